//! Component bytes through [`Registry::load_bytes`]: raw bytes, byte patches
//! of valid components, and valid components whose core modules
//! `wasm-mutate` has changed (code, exports, types, data, …) while the
//! component around them stays well-formed.
//!
//! Checks: loading never panics and returns a report, an error exactly when
//! nothing registered; a component that loads has well-formed tools, and
//! calling each with `{}` (under quick limits) gives a well-formed result.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolcage_fuzz::{LEFTOVERS_WAT, block_on, builder, check_result, guest};

/// Valid components to start from: the small WAT one, and two built from
/// Rust (the echo fixture, the schema zoo).
static SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    vec![
        LEFTOVERS_WAT.to_vec(),
        guest("fixture_echo"),
        guest("fixture_schema_zoo"),
    ]
});

/// The largest input a mutation may grow a component to.
const MAX_COMPONENT: usize = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = match mode % 4 {
        0 => rest.to_vec(),
        1 => patched(rest),
        _ => match mutated(rest) {
            Some(bytes) => bytes,
            None => return,
        },
    };
    if bytes.len() > MAX_COMPONENT {
        return;
    }
    check_component(bytes);
});

/// The seed `rest[0]` picks: one time in 32 each a Rust-built one (a
/// second or more to compile in the instrumented build), else the small one
/// (milliseconds).
fn seed(choice: u8) -> &'static [u8] {
    let seeds = &*SEEDS;
    match choice % 32 {
        30 => &seeds[1],
        31 => &seeds[2],
        _ => &seeds[0],
    }
}

/// A seed with byte patches: `rest` is a seed choice, then patches of
/// (offset: u32 little-endian, length: u8, that many bytes), each written
/// over the seed at the offset modulo its length.
fn patched(rest: &[u8]) -> Vec<u8> {
    let Some((&choice, mut patches)) = rest.split_first() else {
        return Vec::new();
    };
    let mut bytes = seed(choice).to_vec();
    while patches.len() >= 5 {
        let offset = u32::from_le_bytes(patches[..4].try_into().unwrap()) as usize % bytes.len();
        let len = usize::from(patches[4]).min(patches.len() - 5);
        let patch = &patches[5..5 + len];
        let end = (offset + len).min(bytes.len());
        bytes[offset..end].copy_from_slice(&patch[..end - offset]);
        patches = &patches[5 + len..];
    }
    bytes
}

/// A seed with one of its top-level core modules mutated by `wasm-mutate`:
/// `rest` is a seed choice, a module choice, rounds, then the mutation seed.
fn mutated(rest: &[u8]) -> Option<Vec<u8>> {
    let [choice, module, rounds, seed_bytes @ ..] = rest else {
        return None;
    };
    let mut seed_word = [0u8; 8];
    let n = seed_bytes.len().min(8);
    seed_word[..n].copy_from_slice(&seed_bytes[..n]);
    let mutation_seed = u64::from_le_bytes(seed_word);
    let component = seed(*choice);
    let sections = core_modules(component);
    if sections.is_empty() {
        return None;
    }
    let (start, end) = sections[usize::from(*module) % sections.len()];
    let mut module_bytes = component[start..end].to_vec();
    for round in 0..=u64::from(rounds % 4) {
        let mut mutate = wasm_mutate::WasmMutate::default();
        mutate
            .seed(mutation_seed.wrapping_add(round))
            .preserve_semantics(false)
            .fuel(1_000);
        let next = match mutate.run(&module_bytes) {
            Ok(mut mutations) => mutations.next().and_then(Result::ok),
            Err(_) => None,
        };
        match next {
            Some(next) => module_bytes = next,
            None if round == 0 => return None,
            None => break,
        }
    }
    Some(splice(component, start, end, &module_bytes))
}

/// The byte ranges of the core modules in the top-level core module
/// sections of `component`.
fn core_modules(component: &[u8]) -> Vec<(usize, usize)> {
    let mut modules = Vec::new();
    let mut components = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        match payload {
            Ok(wasmparser::Payload::ModuleSection {
                unchecked_range, ..
            }) => modules.push(unchecked_range),
            Ok(wasmparser::Payload::ComponentSection {
                unchecked_range, ..
            }) => components.push(unchecked_range),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // Nested components are parsed too: keep the modules outside them, and
    // only those whose section header `splice` can find.
    modules
        .into_iter()
        .filter(|module| {
            !components
                .iter()
                .any(|c| c.start <= module.start && module.end <= c.end)
        })
        .map(|module| (module.start, module.end))
        .filter(|&(start, end)| {
            let size = leb128(end - start);
            start > size.len()
                && component[start - size.len() - 1] == 1
                && component[start - size.len()..start] == size[..]
        })
        .collect()
}

/// `component` with the module section whose body is `start..end` replaced
/// by one holding `module`.
fn splice(component: &[u8], start: usize, end: usize, module: &[u8]) -> Vec<u8> {
    // The section's header, as `core_modules` checked: its id (1, a core
    // module) and the body's size as an unsigned LEB128, before the body.
    let header_start = start - leb128(end - start).len() - 1;
    let mut out = component[..header_start].to_vec();
    out.push(1);
    out.extend(leb128(module.len()));
    out.extend_from_slice(module);
    out.extend_from_slice(&component[end..]);
    out
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn check_component(bytes: Vec<u8>) {
    let mut registry = builder().build().expect("the registry builds");
    let report = block_on(registry.load_bytes("fuzzed", bytes));
    assert_eq!(
        report.is_ok(),
        report.error.is_none(),
        "is_ok disagrees with the error: {report:?}"
    );
    if let Some(error) = &report.error {
        assert!(report.registered.is_empty(), "{report:?}");
        assert!(!error.to_string().is_empty());
        return;
    }
    assert!(!report.registered.is_empty(), "loaded with no tools");
    assert_eq!(registry.tools().len(), report.registered.len());
    let names: Vec<String> = registry
        .tools()
        .map(|tool| tool.descriptor.name.clone())
        .collect();
    for name in &names {
        let tool = registry.tool(name).expect("a registered tool is found");
        assert_eq!(tool.component, "fuzzed");
        assert!(tool.descriptor.input_schema.is_object());
        let result = block_on(registry.call(name, json!({})));
        check_result(&result, name);
    }
}
