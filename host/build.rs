//! With the `bundled-tools` feature, builds the standard toolset (fs, calc,
//! fetch, code) from `guest-tools/`, compiles each component ahead of time
//! with the compiler settings the runtime uses (`src/sandbox/codegen.rs`),
//! and writes `bundled.rs`, which embeds both, with each component's hash.
//!
//! The ahead-of-time compile is skipped when cross-compiling (the code would
//! be for this machine, not the target): the runtime then compiles the
//! bundled tools on first use, as it does any other component.

#[cfg(feature = "bundled-tools")]
#[path = "../guest-tools/build_support.rs"]
mod build_support;

#[cfg(feature = "bundled-tools")]
#[allow(dead_code)]
#[path = "src/sandbox/codegen.rs"]
mod codegen;

fn main() {
    #[cfg(feature = "bundled-tools")]
    bundle();
}

#[cfg(feature = "bundled-tools")]
fn bundle() {
    use std::fmt::Write;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // Code mode's interpreter is built on its own: its Python stubs keep
    // JSON objects in order (serde_json's `preserve_order`), which the
    // other tools' output need not change for.
    let tools = build_support::build_guests(&["toolcage-fs", "toolcage-calc", "toolcage-fetch"]);
    let interpreter = build_support::build_guests(&["toolcage-code"]);
    let engine = precompiling_engine();
    let mut code = String::from("pub(crate) const COMPONENTS: &[Bundled] = &[\n");
    for guest in tools.into_iter().chain(interpreter) {
        let name = guest.package.trim_start_matches("toolcage-");
        let wasm = std::fs::read(&guest.wasm).expect("the guest's component was built");
        let precompiled = match &engine {
            Some(engine) => {
                let compiled = out.join(format!("{name}.cwasm"));
                let bytes = engine
                    .precompile_component(&wasm)
                    .unwrap_or_else(|e| panic!("precompiling the bundled `{name}`: {e:#}"));
                std::fs::write(&compiled, bytes).unwrap();
                format!(
                    "Some(Precompiled {{ code: include_bytes!({:?}), engine_key: {:?} }})",
                    compiled.display().to_string(),
                    codegen::engine_key(engine)
                )
            }
            None => "None".to_string(),
        };
        writeln!(
            code,
            "    Bundled {{ name: {name:?}, wasm: include_bytes!({:?}), hash: {:?}, precompiled: {precompiled} }},",
            guest.wasm.display().to_string(),
            blake3::hash(&wasm).to_hex().to_string(),
        )
        .unwrap();
    }
    code.push_str("];\n");
    std::fs::write(out.join("bundled.rs"), code).unwrap();
}

/// The engine the bundled tools are compiled ahead of time with, unless
/// cross-compiling.
#[cfg(feature = "bundled-tools")]
fn precompiling_engine() -> Option<wasmtime::Engine> {
    let target = std::env::var("TARGET").unwrap();
    let host = std::env::var("HOST").unwrap();
    (target == host).then(|| {
        wasmtime::Engine::new(&codegen::compiler_config())
            .expect("an engine with the runtime's compiler settings")
    })
}
