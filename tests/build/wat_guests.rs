//! Guests written in WebAssembly text, for what Rust cannot express: a
//! mutable wasm global and a table written at run time. Each core module is
//! turned into a component of the `toolset` world with `wit-component`.

use std::fmt::Write;
use std::path::Path;

/// The mark a call leaves; what the next call must never find.
const MARK: u32 = 0x5eed_beef;

/// `leftovers_wat`: like the `leftovers` fixture, for a global, a table and
/// linear memory. Its output is three digits, `1` where the call found an
/// earlier call's mark (global, table, memory): `000` when clean.
pub fn leftovers_wat(wit_dir: &Path) -> Vec<u8> {
    // Static data: describe()'s return area at 0x100 (list pointer and
    // length), the one descriptor at 0x200 (canonical ABI layout: name,
    // title, description, input schema, output schema, hints), its strings
    // from 0x400.
    let name = b"leftovers_wat";
    let description = b"Reports whether an earlier call's marks are in this instance's global, table or memory, then leaves its own.";
    let schema = br#"{"type":"object"}"#;
    let (name_at, description_at, schema_at) = (0x400u32, 0x440u32, 0x500u32);
    let mut descriptor = Vec::new();
    for word in [name_at, name.len() as u32, 0, 0, 0] {
        descriptor.extend(word.to_le_bytes()); // name, title: none
    }
    for word in [
        description_at,
        description.len() as u32,
        schema_at,
        schema.len() as u32,
    ] {
        descriptor.extend(word.to_le_bytes()); // description, input schema
    }
    descriptor.extend([0u8; 12]); // output schema: none
    descriptor.extend([0u8; 4]); // hints: none, padding
    assert_eq!(descriptor.len(), 52);
    let return_area: Vec<u8> = [0x200u32, 1].iter().flat_map(|w| w.to_le_bytes()).collect();

    let mut wat = String::new();
    write!(
        wat,
        r#"(module
  (memory (export "memory") 1)
  (global $mark (mut i32) (i32.const 0))
  (global $heap (mut i32) (i32.const 0x1000))
  (table $slots 1 funcref)
  (func $marked (result i32) (i32.const 1))
  (elem declare func $marked)

  ;; A bump allocator for the host's copies into the guest.
  (func (export "cabi_realloc") (param i32 i32) (param $align i32) (param $size i32) (result i32)
    (local $at i32)
    (local.set $at
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $at) (local.get $size)))
    (if (i32.gt_u (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq (i32.const -1)
              (memory.grow (i32.add (i32.const 1)
                (i32.shr_u (i32.sub (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
                           (i32.const 16)))))
          (then unreachable))))
    (local.get $at))

  (func (export "toolcage:tool/tool@0.1.0#describe") (result i32)
    (i32.const 0x100))

  (func (export "toolcage:tool/tool@0.1.0#call") (param i32 i32 i32 i32) (result i32)
    ;; What earlier calls left: '0' or '1' for the global, the table, memory.
    (i32.store8 (i32.const 0x600)
      (i32.add (i32.const 48) (i32.eq (global.get $mark) (i32.const {MARK}))))
    (i32.store8 (i32.const 0x601)
      (i32.add (i32.const 48) (i32.eqz (ref.is_null (table.get $slots (i32.const 0))))))
    (i32.store8 (i32.const 0x602)
      (i32.add (i32.const 48) (i32.eq (i32.load (i32.const 0x700)) (i32.const {MARK}))))
    ;; Its own marks.
    (global.set $mark (i32.const {MARK}))
    (table.set $slots (i32.const 0) (ref.func $marked))
    (i32.store (i32.const 0x700) (i32.const {MARK}))
    ;; ok(outcome {{ output: the three digits, details: none }})
    (i32.store8 (i32.const 0x300) (i32.const 0))
    (i32.store (i32.const 0x304) (i32.const 0x600))
    (i32.store (i32.const 0x308) (i32.const 3))
    (i32.store8 (i32.const 0x30c) (i32.const 0))
    (i32.const 0x300))

  (data (i32.const 0x100) "{return_area}")
  (data (i32.const 0x200) "{descriptor}")
  (data (i32.const {name_at}) "{name}")
  (data (i32.const {description_at}) "{description}")
  (data (i32.const {schema_at}) "{schema}")
)"#,
        return_area = escaped(&return_area),
        descriptor = escaped(&descriptor),
        name = escaped(name),
        description = escaped(description),
        schema = escaped(schema),
    )
    .unwrap();

    let mut module = wat::parse_str(&wat).expect("the WAT guest parses");
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(wit_dir).expect("the WIT parses");
    let world = resolve
        .select_world(&[package], Some("toolset"))
        .expect("the toolset world");
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .expect("the world embeds");
    wit_component::ComponentEncoder::default()
        .module(&module)
        .expect("the module is a valid core module")
        .validate(true)
        .encode()
        .expect("the component encodes")
}

/// `bytes` as the contents of a WAT string.
fn escaped(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, byte| {
        write!(out, "\\{byte:02x}").unwrap();
        out
    })
}
