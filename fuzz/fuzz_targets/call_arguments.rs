//! Arguments through the whole call path (lookup, JSON parsing, schema
//! validation, the sandbox, the outcome's checks) of the `zoo` tool of the
//! `schema_zoo` fixture, whose schema uses every validation keyword.
//!
//! The oracle is an independent validator compiled from the tool's schema
//! with the host's options: arguments that are not JSON, or that it rejects,
//! must be an `InvalidArguments` result; arguments it accepts must run, and
//! come back unchanged (the tool returns them, as text and as details). No
//! input may panic, and every result must be well-formed.

#![no_main]

use std::sync::LazyLock;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Number, Value};
use toolcage::{ErrorKind, Registry};
use toolcage_fuzz::{block_on, builder, check_result, guest};

const TOOL: &str = "zoo";

struct Zoo {
    registry: Registry,
    schema: Value,
    validator: jsonschema::Validator,
}

static ZOO: LazyLock<Zoo> = LazyLock::new(|| {
    let mut registry = builder().build().expect("the registry builds");
    let report = block_on(registry.load_bytes("zoo", guest("fixture_schema_zoo")));
    assert!(report.is_ok(), "the zoo does not load: {:?}", report.error);
    let schema = registry
        .tool(TOOL)
        .expect("the zoo declares `zoo`")
        .descriptor
        .input_schema
        .clone();
    // The options of host/src/catalog/schema.rs.
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(&schema)
        .expect("the zoo's schema compiles");
    Zoo {
        registry,
        schema,
        validator,
    }
});

/// The property names of the zoo's schema, so generated objects hit them.
const KEYS: &[&str] = &[
    "name", "kind", "version", "count", "ratio", "tags", "center", "radius", "points", "text",
    "id", "parity", "note", "meta", "range", "lo", "hi", "x-a", "x-", "main", "circle", "polygon",
    "label",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Known(u8),
    Other(String),
}

impl Key {
    fn text(self) -> String {
        match self {
            Key::Known(i) => KEYS[usize::from(i) % KEYS.len()].to_string(),
            Key::Other(text) => text,
        }
    }
}

/// A JSON value, generated from the fuzzer's bytes.
#[derive(Arbitrary, Debug)]
enum ArbValue {
    Null,
    Bool(bool),
    Small(i8),
    Int(i64),
    UInt(u64),
    Float(f64),
    Word(Key),
    Str(String),
    Array(Vec<ArbValue>),
    Object(Vec<(Key, ArbValue)>),
}

impl ArbValue {
    fn into_json(self) -> Value {
        match self {
            ArbValue::Null => Value::Null,
            ArbValue::Bool(b) => Value::Bool(b),
            ArbValue::Small(n) => Value::from(n),
            ArbValue::Int(n) => Value::from(n),
            ArbValue::UInt(n) => Value::from(n),
            ArbValue::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            ArbValue::Word(key) => Value::String(key.text()),
            ArbValue::Str(s) => Value::String(s),
            ArbValue::Array(items) => items.into_iter().map(ArbValue::into_json).collect(),
            ArbValue::Object(members) => Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k.text(), v.into_json()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

/// How the arguments reach the call.
#[derive(Arbitrary, Debug)]
enum Input {
    /// JSON text, as a model writes it (OpenAI's formats).
    Text(String),
    /// A value, as Anthropic's and MCP's formats carry it.
    Value(ArbValue),
    /// A value sent as the text it serialises to.
    ValueAsText(ArbValue),
    /// Another tool's name: never found.
    OtherTool(String, ArbValue),
}

fuzz_target!(|data: &[u8]| {
    let zoo = &*ZOO;
    // Raw bytes are JSON text too, as long as they are UTF-8; the rest of
    // the time they drive the structured generator.
    if let Some((&0, text)) = data.split_first()
        && let Ok(text) = std::str::from_utf8(text)
    {
        return check_text(zoo, text);
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match input {
        Input::Text(text) => check_text(zoo, &text),
        Input::Value(value) => check_value(zoo, value.into_json()),
        Input::ValueAsText(value) => check_text(zoo, &value.into_json().to_string()),
        Input::OtherTool(name, value) => {
            let result = block_on(zoo.registry.call(&name, value.into_json()));
            check_result(&result, &name);
            if name != TOOL {
                assert_eq!(result.error_kind, Some(ErrorKind::NotFound), "{result:?}");
            }
        }
    }
});

fn check_text(zoo: &Zoo, text: &str) {
    let result = block_on(zoo.registry.call(TOOL, text));
    check_result(&result, TOOL);
    match serde_json::from_str::<Value>(text) {
        Err(_) => {
            assert_eq!(
                result.error_kind,
                Some(ErrorKind::InvalidArguments),
                "{text:?}: {result:?}"
            );
            assert!(result.output.contains("not valid JSON"), "{result:?}");
        }
        Ok(value) => check_outcome(zoo, &value, &result),
    }
}

fn check_value(zoo: &Zoo, value: Value) {
    let result = block_on(zoo.registry.call(TOOL, value.clone()));
    check_result(&result, TOOL);
    check_outcome(zoo, &value, &result);
}

fn check_outcome(zoo: &Zoo, arguments: &Value, result: &toolcage::CallResult) {
    if zoo.validator.is_valid(arguments) {
        assert!(
            !result.is_error,
            "valid arguments {arguments} failed: {result:?}"
        );
        assert_eq!(
            result.details.as_ref(),
            Some(arguments),
            "the details are not the arguments"
        );
        let echoed: Value = serde_json::from_str(&result.output).expect("the output is JSON");
        assert_eq!(&echoed, arguments, "the output is not the arguments");
    } else {
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::InvalidArguments),
            "invalid arguments {arguments} were not refused: {result:?}"
        );
        assert!(
            result.output.contains("do not match its input schema:\n- "),
            "{result:?}"
        );
        assert_eq!(
            result.details,
            Some(serde_json::json!({ "input_schema": zoo.schema })),
            "an invalid call's details are the schema"
        );
    }
}
