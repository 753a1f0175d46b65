// Builds guest components from source for the build scripts of `host` (the
// bundled toolset) and `tests` (fixtures and tools). Both include this file
// with `#[path]`, so it has no crate of its own.
//
// The pattern is wasmtime's test-programs artifacts crate: a nested
// `cargo build --target wasm32-wasip2` of the `guest-tools` workspace, in a
// target directory of its own (so it never waits on the outer cargo's lock),
// `rerun-if-changed` lines taken from cargo's dep-info files (so an edit to a
// guest, the SDK or the WIT rebuilds), and a generated Rust file naming each
// artifact.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// One built component: the package name and the path of its `.wasm`.
pub struct Guest {
    pub package: String,
    pub wasm: PathBuf,
}

/// Builds `packages` of the guest-tools workspace in release mode and returns
/// their components. Panics with an actionable message on failure, as build
/// scripts do.
pub fn build_guests(packages: &[&str]) -> Vec<Guest> {
    let guest_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-tools");
    let guest_root = guest_root.canonicalize().expect("guest-tools/ exists");
    ensure_target_installed();

    let target_dir = shared_target_dir();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(guest_root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    for package in packages {
        cmd.arg("-p").arg(package);
    }
    // The outer build's settings are for the host target, not for wasm.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PRIMARY_PACKAGE",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    // SIMD: memchr and regex use wasm's 128-bit SIMD when it is on at
    // compile time, and wasmtime runs it by default. Cargo takes the first
    // of its rustflags sources, so RUSTFLAGS (CI's `-D warnings`) is kept in.
    let mut rustflags: Vec<String> = env::var("RUSTFLAGS")
        .map(|flags| flags.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    rustflags.push("-Ctarget-feature=+simd128".into());
    cmd.env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"));
    let status = cmd
        .status()
        .expect("failed to run cargo for the guest tools");
    assert!(
        status.success(),
        "building the guest tools failed ({status}); run `cargo build --release --target {TARGET}` in guest-tools/ to see why"
    );

    let out = target_dir.join(TARGET).join("release");
    packages
        .iter()
        .map(|package| {
            let stem = package.replace('-', "_");
            rerun_if_changed_from_dep_info(&out.join(format!("{stem}.d")));
            Guest {
                package: package.to_string(),
                wasm: out.join(format!("{stem}.wasm")),
            }
        })
        .collect()
}

/// `target/guest-tools`, shared by every build script of the outer workspace
/// so each guest is built once.
pub fn shared_target_dir() -> PathBuf {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set for build scripts"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out (plus <triple>/ when cross-compiling).
    let target = out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            out_dir
                .ancestors()
                .nth(4)
                .expect("OUT_DIR is deep enough")
                .to_path_buf()
        });
    target.join("guest-tools")
}

/// Installs the wasm target with rustup when it is missing, since
/// `RUSTUP_AUTO_INSTALL=0` keeps `rust-toolchain.toml` from doing it.
fn ensure_target_installed() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let installed = |root: &Path| root.join("lib/rustlib").join(TARGET).join("lib").is_dir();
    if sysroot.as_deref().is_some_and(installed) {
        return;
    }
    let added = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        added,
        "the {TARGET} target is missing and could not be installed: run `rustup target add {TARGET}`"
    );
}

/// Emits `rerun-if-changed` for every source file a guest was built from.
fn rerun_if_changed_from_dep_info(dep_info: &Path) {
    let text = std::fs::read_to_string(dep_info)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dep_info.display()));
    // Format: `target: dep dep dep`, with spaces in paths escaped as `\ `.
    let deps = text.split_once(": ").map(|(_, deps)| deps).unwrap_or("");
    let mut path = String::new();
    let mut chars = deps.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => path.push(chars.next().unwrap_or(' ')),
            ' ' | '\n' => {
                if !path.is_empty() {
                    println!("cargo:rerun-if-changed={path}");
                    path.clear();
                }
            }
            c => path.push(c),
        }
    }
    if !path.is_empty() {
        println!("cargo:rerun-if-changed={path}");
    }
}
