//! What toolcage's fuzz targets share: one async runtime and one toolcage
//! [`Runtime`] per process, quick limits, the built guest components, and the
//! checks every [`CallResult`] must pass.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use toolcage::{CallResult, ErrorKind, Limits, Registry, RegistryBuilder, Runtime};

/// The environment variable naming the directory of the built guests.
pub const GUESTS_DIR_VAR: &str = "TOOLCAGE_FUZZ_GUESTS";

/// The directory of the built guest components: `$TOOLCAGE_FUZZ_GUESTS`, or
/// where `cargo test --workspace` builds them in this checkout.
pub fn guests_dir() -> PathBuf {
    std::env::var_os(GUESTS_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/guest-tools/wasm32-wasip2/release")
        })
}

/// The bytes of the built guest `stem` (such as `fixture_schema_zoo`), or a
/// panic saying how to build it.
pub fn guest(stem: &str) -> Vec<u8> {
    let path = guests_dir().join(format!("{stem}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the guest component {} ({e}): build the guests first, with \
             `cargo test --workspace --no-run` at the repository's root (or see fuzz/README.md), \
             or point {GUESTS_DIR_VAR} at the directory holding them",
            path.display()
        )
    })
}

/// The tests' `leftovers_wat` component, made by this crate's build script.
pub const LEFTOVERS_WAT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/leftovers_wat.wasm"));

/// The async runtime every target blocks on.
pub static TOKIO: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
});

/// toolcage's runtime (engines, slot pools, compile cache), one per process.
pub static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    Runtime::builder()
        .max_concurrent_calls(2)
        .build()
        .expect("the toolcage runtime starts")
});

/// Limits that keep every input quick: 50 million fuel, 1 s, 32 MiB.
pub fn quick_limits() -> Limits {
    Limits {
        fuel: Some(50_000_000),
        timeout: Duration::from_secs(1),
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

/// A registry builder on the shared runtime, with [`quick_limits`].
pub fn builder() -> RegistryBuilder {
    Registry::builder().runtime(&RUNTIME).limits(quick_limits())
}

/// Runs `future` to completion on the shared async runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    TOKIO.block_on(future)
}

/// The checks every call result must pass, whatever the call: an error has
/// a kind and a success has none, and it names the tool and call it answers.
pub fn check_result(result: &CallResult, tool: &str) {
    assert_eq!(
        result.is_error,
        result.error_kind.is_some(),
        "is_error and error_kind disagree: {result:?}"
    );
    assert_eq!(result.tool, tool, "the result names another tool");
    assert!(!result.call_id.is_empty(), "the result has no call id");
    if result.error_kind == Some(ErrorKind::NotFound) {
        assert!(
            result.output.contains("There is no tool named"),
            "{result:?}"
        );
    }
    // Every result is serialisable, as the CLI and the MCP server send it.
    serde_json::to_string(result).expect("a call result serialises");
}
