//! Helpers shared by toolcage's integration tests: the guests built from
//! source by `build.rs`, one runtime per test binary (so each component is
//! compiled once), and registries built from them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::Duration;

use toolcage::{CallResult, ErrorKind, FileReport, Limits, Registry, RegistryBuilder, Runtime};

/// Paths of the built components, one constant per guest package.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| Runtime::new().expect("the runtime starts"));

/// A registry builder on the shared runtime.
pub fn builder() -> RegistryBuilder {
    Registry::builder().runtime(&RUNTIME)
}

/// Limits that make breach tests quick: 2 s, 2 billion fuel, 64 MiB.
pub fn quick_limits() -> Limits {
    Limits {
        fuel: Some(2_000_000_000),
        timeout: Duration::from_secs(2),
        memory_bytes: 64 << 20,
        ..Limits::default()
    }
}

/// A registry with `components` loaded, each of which must load cleanly.
pub async fn registry(builder: RegistryBuilder, components: &[&str]) -> Registry {
    let mut registry = builder.build().expect("the registry builds");
    for path in components {
        let report = registry.load_file(path).await;
        assert_loaded(&report);
    }
    registry
}

/// Asserts that a call failed with `kind`, showing its output otherwise.
pub fn assert_error(result: &CallResult, kind: ErrorKind) {
    assert_eq!(result.error_kind, Some(kind), "{}", result.output);
    assert!(result.is_error);
}

/// Asserts that a component loaded with no error.
pub fn assert_loaded(report: &FileReport) {
    assert!(
        report.is_ok(),
        "{} failed to load: {:?}",
        report.source,
        report.error
    );
}

static TOOLCAGE_BIN: LazyLock<PathBuf> = LazyLock::new(|| {
    // The binary lives in another package, so cargo does not build it for
    // this one's tests: build it once, beside this test executable.
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "toolcage", "--bin", "toolcage"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the toolcage binary failed");
    profile_dir.join("toolcage")
});

/// A `toolcage` command, the binary built once per test run.
pub fn toolcage() -> Command {
    let mut command = Command::new(&*TOOLCAGE_BIN);
    command.env_remove("RUST_LOG");
    command
}
