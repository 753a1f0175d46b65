//! Code mode's Python stubs of tools' schemas. A tool's schemas are its
//! component's word, so untrusted: any JSON, as a tool's input and output
//! schema, must render (fully and briefly), list and search without a
//! panic, and without an output out of proportion to the schema (a `$ref`
//! cycle or a shared definition must not multiply it).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolcage_code_mode::{Detail, ToolSpec, one_line, python_module, search, summary};

/// The most bytes of stubs per byte of schema, allowing for the fixed text
/// of a stub: far above what any schema renders to, far below a blow-up.
const MAX_GROWTH: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let description = String::from_utf8_lossy(data);
    let specs = [
        ToolSpec {
            name: "probe",
            identifier: Some("probe"),
            description: &description,
            input_schema: &schema,
            output_schema: Some(&schema),
            read_only: true,
        },
        ToolSpec {
            name: "class",
            identifier: None,
            description: "Not a Python identifier.",
            input_schema: &schema,
            output_schema: None,
            read_only: false,
        },
    ];
    for detail in [Detail::Full, Detail::Brief] {
        let module = python_module(&specs, detail);
        assert!(module.contains("async def probe("), "{module}");
        assert!(
            module.len() <= 4096 + MAX_GROWTH * (data.len() * 2),
            "{} bytes of stubs from {} of schema",
            module.len(),
            data.len()
        );
    }
    for spec in &specs {
        one_line(spec);
    }
    search(&specs, &description);
    summary(&description);
});
