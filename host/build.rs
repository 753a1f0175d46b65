//! With the `bundled-tools` feature, builds the standard toolset (fs, calc, fetch, code)
//! from `guest-tools/` and writes `bundled.rs`, which embeds their bytes.

#[cfg(feature = "bundled-tools")]
#[path = "../guest-tools/build_support.rs"]
mod build_support;

fn main() {
    #[cfg(feature = "bundled-tools")]
    {
        use std::fmt::Write;
        let mut code = String::from(
            "/// The bundled components: (name, bytes).\npub(crate) const COMPONENTS: &[(&str, &[u8])] = &[\n",
        );
        // Code mode's interpreter is built on its own: its Python stubs
        // keep JSON objects in order (serde_json's `preserve_order`), which
        // the other tools' output need not change for.
        let tools =
            build_support::build_guests(&["toolcage-fs", "toolcage-calc", "toolcage-fetch"]);
        let interpreter = build_support::build_guests(&["toolcage-code"]);
        for guest in tools.into_iter().chain(interpreter) {
            let name = guest.package.trim_start_matches("toolcage-");
            writeln!(
                code,
                "    ({name:?}, include_bytes!({:?})),",
                guest.wasm.display().to_string()
            )
            .unwrap();
        }
        code.push_str("];\n");
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
        std::fs::write(out.join("bundled.rs"), code).unwrap();
    }
}
