//! Writes the tests' `leftovers_wat` component (WebAssembly text wrapped by
//! `wit-component`) to `OUT_DIR`: a seed for `component_bytes` small enough
//! to compile in milliseconds.

#[path = "../tests/build/wat_guests.rs"]
mod wat_guests;

fn main() {
    // Written against toolcage:tool@0.1.0, as in the tests.
    let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/build/wit-0.1.0");
    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed=../tests/build/wat_guests.rs");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(
        out.join("leftovers_wat.wasm"),
        wat_guests::leftovers_wat(&wit),
    )
    .unwrap();
}
