//! Builds every guest (the fixtures and the standard toolset) from source and
//! writes `guests.rs`: a constant per component with the path of its `.wasm`.

#[path = "../guest-tools/build_support.rs"]
mod build_support;
#[path = "build/script_guests.rs"]
mod script_guests;
#[path = "build/wat_guests.rs"]
mod wat_guests;

use std::fmt::Write;
use std::path::Path;

fn main() {
    let fixtures_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-tools/fixtures");
    println!("cargo:rerun-if-changed={}", fixtures_dir.display());
    let mut fixtures: Vec<String> = std::fs::read_dir(&fixtures_dir)
        .expect("guest-tools/fixtures exists")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("Cargo.toml").exists())
        .map(|entry| {
            format!(
                "fixture-{}",
                entry.file_name().to_string_lossy().replace('_', "-")
            )
        })
        .collect();
    fixtures.sort();
    let mut packages: Vec<&str> = fixtures.iter().map(String::as_str).collect();
    packages.extend(["toolcage-fs", "toolcage-calc", "toolcage-fetch"]);

    let mut code = String::new();
    let mut all = String::from(
        "/// Every Rust and WAT guest: (constant name, path).\npub const ALL: &[(&str, &str)] = &[\n",
    );
    let guest_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-tools");
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let out = build_support::shared_target_dir();
    let scripts = script_guests::script_guests(&guest_root, &out);
    // The Python and JavaScript guests build while cargo builds the Rust ones.
    let rust_guests = std::thread::scope(|scope| {
        scope.spawn(|| script_guests::build(&guest_root, &wit, &out, &scripts));
        build_support::build_guests(&packages)
    });
    let mut script_list = String::from(
        "/// The Python and JavaScript guests (big, slow to compile: kept out of\n/// `ALL`): (constant name, path).\npub const SCRIPT: &[(&str, &str)] = &[\n",
    );
    for guest in &scripts {
        let name = guest.constant;
        writeln!(
            code,
            "/// The `{}` component, built from {}.",
            guest.wasm.file_name().unwrap().to_string_lossy(),
            guest.source.display()
        )
        .unwrap();
        writeln!(
            code,
            "pub const {name}: &str = {:?};",
            guest.wasm.display().to_string()
        )
        .unwrap();
        writeln!(script_list, "    ({name:?}, {name}),").unwrap();
    }
    script_list.push_str("];\n");
    code.push_str(&script_list);
    writeln!(
        code,
        "/// The directory of the example tools in Python and JavaScript."
    )
    .unwrap();
    writeln!(
        code,
        "pub const EXAMPLES_DIR: &str = {:?};",
        out.join("examples").display().to_string()
    )
    .unwrap();
    for guest in rust_guests {
        let name = guest.package.replace('-', "_").to_uppercase();
        let path = guest.wasm.display().to_string();
        writeln!(code, "/// The `{}` component.", guest.package).unwrap();
        writeln!(code, "pub const {name}: &str = {path:?};").unwrap();
        writeln!(all, "    ({name:?}, {name}),").unwrap();
    }
    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed=build/wat_guests.rs");
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let leftovers_wat = out_dir.join("leftovers_wat.wasm");
    // Built against the WIT of toolcage:tool@0.1.0, kept in build/: a
    // component of the previous contract must load and run unchanged.
    let wit_0_1_0 = Path::new(env!("CARGO_MANIFEST_DIR")).join("build/wit-0.1.0");
    println!("cargo:rerun-if-changed={}", wit_0_1_0.display());
    std::fs::write(&leftovers_wat, wat_guests::leftovers_wat(&wit_0_1_0)).unwrap();
    writeln!(
        code,
        "/// The `leftovers_wat` component, written in WebAssembly text against toolcage:tool@0.1.0."
    )
    .unwrap();
    writeln!(
        code,
        "pub const FIXTURE_LEFTOVERS_WAT: &str = {:?};",
        leftovers_wat.display().to_string()
    )
    .unwrap();
    writeln!(
        all,
        "    (\"FIXTURE_LEFTOVERS_WAT\", FIXTURE_LEFTOVERS_WAT),"
    )
    .unwrap();
    code.push_str(&all);
    code.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("guests.rs");
    std::fs::write(out, code).unwrap();
}
