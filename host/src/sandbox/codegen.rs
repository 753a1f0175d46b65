//! The compiler's settings, in one place for two users: every engine the
//! runtime makes (`engine`) and the build script, which compiles the bundled
//! components ahead of time with them (`host/build.rs` includes this file
//! by path, so it uses nothing but wasmtime and blake3).
//!
//! Threat model: none of its own. Compiled code is only ever used by an
//! engine whose [`engine_key`] matches the one it was compiled by, and
//! wasmtime checks the same settings again when it deserializes the code.

use std::hash::{Hash, Hasher};

/// The settings compiled code depends on: the component model, fuel and
/// epoch interruption on, the rest wasmtime's defaults for the machine it
/// runs on (its CPU's features). Run-time settings (stack sizes, the
/// instance allocator) do not change the code and are set by the engine.
pub(crate) fn compiler_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true);
    config
}

/// The key of an engine's compiled code: a hash of its compilation settings
/// (target, flags, tunables, wasmtime's version), the same in every process.
pub(crate) fn engine_key(engine: &wasmtime::Engine) -> String {
    let mut hasher = Blake3Hasher(blake3::Hasher::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().to_hex()[..16].to_string()
}

/// `std::hash::Hasher` over BLAKE3: the same input gives the same key in
/// every process (the standard library's hashers promise no such thing).
struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let hash = self.0.finalize();
        u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
    }
}
