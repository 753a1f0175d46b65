//! Descriptor checks at load time, and argument validation at call time.
//!
//! Threat model: descriptors come from untrusted components and arguments
//! from a model. A descriptor is accepted only with a well-formed name and
//! schemas that are valid JSON Schema; schemas are compiled once, at load,
//! with every remote `$ref` resolver compiled out of the crate (no `http` or
//! file retrieval: a schema can never make the host fetch anything). At call
//! time every validation error is reported, one line each, so a model can fix
//! all of its mistakes in one turn.

use jsonschema::{Draft, Validator};
use serde_json::Value;

use super::component::{Descriptor, Hints};
use crate::sandbox::bindings::{WitDescriptor, WitHints};

/// The longest tool name.
const MAX_NAME_LEN: usize = 64;
/// The longest title, description and schema, in bytes: a descriptor ends up
/// in every request to the model, so a component must not flood its context.
const MAX_TITLE_LEN: usize = 256;
const MAX_DESCRIPTION_LEN: usize = 16 << 10;
const MAX_SCHEMA_LEN: usize = 64 << 10;
/// The most validation errors listed to the model, and the longest line.
const MAX_ERROR_LINES: usize = 20;
const MAX_ERROR_LINE_LEN: usize = 300;

/// A descriptor that passed every check, with its schemas compiled.
pub(crate) struct CheckedTool {
    pub descriptor: Descriptor,
    pub input: Validator,
    pub output: Option<Validator>,
}

/// Checks a descriptor as a component declared it. The error says what is
/// wrong, for the operator's load report.
pub(crate) fn check_descriptor(wit: WitDescriptor) -> Result<CheckedTool, String> {
    check_name(&wit.name)?;
    let too_long = |what: &str, len: usize, max: usize| {
        (len > max).then(|| format!("{what} is {len} bytes long; at most {max} are allowed"))
    };
    let lengths = [
        too_long(
            "title",
            wit.title.as_ref().map_or(0, String::len),
            MAX_TITLE_LEN,
        ),
        too_long("description", wit.description.len(), MAX_DESCRIPTION_LEN),
        too_long("input-schema", wit.input_schema.len(), MAX_SCHEMA_LEN),
        too_long(
            "output-schema",
            wit.output_schema.as_ref().map_or(0, String::len),
            MAX_SCHEMA_LEN,
        ),
    ];
    if let Some(error) = lengths.into_iter().flatten().next() {
        return Err(error);
    }
    let input_schema = parse_schema("input-schema", &wit.input_schema)?;
    if input_schema.get("type") != Some(&Value::String("object".into())) {
        return Err(
            r#"input-schema must have "type": "object": tool arguments are a JSON object"#.into(),
        );
    }
    let input = compile("input-schema", &input_schema)?;
    let (output_schema, output) = match &wit.output_schema {
        Some(text) => {
            let schema = parse_schema("output-schema", text)?;
            let validator = compile("output-schema", &schema)?;
            (Some(schema), Some(validator))
        }
        None => (None, None),
    };
    Ok(CheckedTool {
        descriptor: Descriptor {
            name: wit.name,
            title: wit.title,
            description: wit.description,
            input_schema,
            output_schema,
            hints: hints(wit.hints),
        },
        input,
        output,
    })
}

fn check_name(name: &str) -> Result<(), String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if (1..=MAX_NAME_LEN).contains(&name.len()) && valid_chars {
        Ok(())
    } else {
        Err(format!(
            "name {name:?} does not match ^[a-zA-Z0-9_-]{{1,{MAX_NAME_LEN}}}$"
        ))
    }
}

fn parse_schema(which: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{which} is not valid JSON: {e}"))
}

fn compile(which: &str, schema: &Value) -> Result<Validator, String> {
    // Meta-validation first: it reports what is wrong with a schema more
    // precisely than compilation does.
    jsonschema::meta::validator_for(schema)
        .map_err(|e| format!("{which} names an unknown meta-schema: {e}"))?
        .validate(schema)
        .map_err(|e| {
            format!(
                "{which} is not a valid JSON Schema: {} (at {})",
                e,
                pointer(e.instance_path().as_str())
            )
        })?;
    // `pattern` and `patternProperties` use the `regex` crate: linear time,
    // so no schema and no instance can make validation backtrack for minutes.
    // Patterns it cannot express (backreferences, lookaround) are refused.
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|e| format!("{which} cannot be compiled: {e}"))
}

/// Every way `instance` fails `validator`, one line each
/// (`- <instance path>: <message>`), or `None` when it is valid. At most
/// [`MAX_ERROR_LINES`] lines are listed, each cut to about
/// [`MAX_ERROR_LINE_LEN`] bytes (its start and its end kept), and a last
/// line counts the rest.
pub(crate) fn errors(validator: &Validator, instance: &Value) -> Option<String> {
    // The common case, without the error iterator's allocation.
    if validator.is_valid(instance) {
        return None;
    }
    let mut lines = Vec::new();
    let mut more = 0;
    for error in validator.iter_errors(instance) {
        if lines.len() == MAX_ERROR_LINES {
            more += 1;
            continue;
        }
        let line = format!("- {}: {}", pointer(error.instance_path().as_str()), error);
        lines.push(cut(line, MAX_ERROR_LINE_LEN));
    }
    if more > 0 {
        lines.push(format!("- … and {more} more"));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// `line` cut to about `max` bytes, keeping its start and its end: an error
/// message ends with what was wrong (`… is longer than 1024 characters`),
/// after the offending value.
fn cut(line: String, max: usize) -> String {
    if line.len() <= max {
        return line;
    }
    let mut head = max * 2 / 3;
    while !line.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = line.len() - (max - head);
    while !line.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} … {}", &line[..head], &line[tail..])
}

/// A JSON pointer for people: the root, which is the empty pointer, is `/`.
fn pointer(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn hints(flags: WitHints) -> Hints {
    Hints {
        read_only: flags.contains(WitHints::READ_ONLY),
        idempotent: flags.contains(WitHints::IDEMPOTENT),
        destructive: flags.contains(WitHints::DESTRUCTIVE),
        open_world: flags.contains(WitHints::OPEN_WORLD),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cut_error_line_keeps_what_was_wrong() {
        let value = "{".repeat(5_000);
        let line = format!("- /pattern: \"{value}\" is longer than 1024 characters");
        let cut = super::cut(line, 300);
        assert!(cut.len() <= 305, "{}", cut.len());
        assert!(cut.starts_with("- /pattern: \"{{{"), "{cut}");
        assert!(cut.ends_with("is longer than 1024 characters"), "{cut}");
        assert_eq!(super::cut("short".into(), 300), "short");
    }

    use super::*;
    use serde_json::json;

    fn descriptor(name: &str, input: &str, output: Option<&str>) -> WitDescriptor {
        WitDescriptor {
            name: name.into(),
            title: None,
            description: "d".into(),
            input_schema: input.into(),
            output_schema: output.map(String::from),
            hints: WitHints::READ_ONLY,
        }
    }

    const OBJECT: &str = r#"{"type":"object"}"#;

    #[test]
    fn names() {
        for good in ["a", "read_file", "A-1", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "bad name", "é", "a.b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accepts_a_good_descriptor() {
        let tool = check_descriptor(descriptor("t", OBJECT, Some(OBJECT))).unwrap();
        assert!(tool.descriptor.hints.read_only);
        assert!(!tool.descriptor.hints.destructive);
        assert!(tool.output.is_some());
    }

    #[test]
    fn rejects_bad_schemas() {
        let cases = [
            ("not json", None, "not valid JSON"),
            (r#"{"type":"string"}"#, None, r#""type": "object""#),
            (r#"{"properties":{}}"#, None, r#""type": "object""#),
            (
                r#"{"type":"object","properties":{"x":{"type":"nonsense"}}}"#,
                None,
                "not a valid JSON Schema",
            ),
            (
                r#"{"type":"object","minProperties":-1}"#,
                None,
                "not a valid JSON Schema",
            ),
            (
                OBJECT,
                Some(r#"{"type": 5}"#),
                "output-schema is not a valid JSON Schema",
            ),
            (OBJECT, Some("{"), "output-schema is not valid JSON"),
        ];
        for (input, output, expected) in cases {
            let error = check_descriptor(descriptor("t", input, output))
                .err()
                .unwrap();
            assert!(error.contains(expected), "{input}: {error}");
        }
    }

    #[test]
    fn oversized_descriptors_are_refused() {
        let mut big = descriptor("t", OBJECT, None);
        big.description = "x".repeat(MAX_DESCRIPTION_LEN + 1);
        let error = check_descriptor(big).err().unwrap();
        assert!(error.contains("description is 16385 bytes long"), "{error}");
        let padded = format!(
            r#"{{"type":"object","description":"{}"}}"#,
            "x".repeat(MAX_SCHEMA_LEN)
        );
        let error = check_descriptor(descriptor("t", &padded, None))
            .err()
            .unwrap();
        assert!(error.contains("input-schema is"), "{error}");
    }

    #[test]
    fn backtracking_patterns_are_refused() {
        let schema = r#"{"type":"object","properties":{"x":{"pattern":"^(a|aa)*\\1b$"}}}"#;
        let error = check_descriptor(descriptor("t", schema, None))
            .err()
            .unwrap();
        assert!(error.contains("cannot be compiled"), "{error}");
    }

    #[test]
    fn error_listings_are_capped() {
        let schema = json!({ "type": "array", "items": { "type": "string" } });
        let validator = jsonschema::validator_for(&schema).unwrap();
        let report = errors(&validator, &json!(vec![1; 100])).unwrap();
        assert_eq!(report.lines().count(), MAX_ERROR_LINES + 1, "{report}");
        assert!(report.ends_with("- … and 80 more"), "{report}");
    }

    #[test]
    fn remote_refs_are_never_fetched() {
        let schema =
            r#"{"type":"object","properties":{"x":{"$ref":"http://127.0.0.1:1/schema.json"}}}"#;
        let error = check_descriptor(descriptor("t", schema, None))
            .err()
            .unwrap();
        assert!(error.contains("cannot be compiled"), "{error}");
    }

    #[test]
    fn reports_every_error_with_its_path() {
        let schema = json!({
            "type": "object",
            "properties": { "a": { "type": "integer" }, "b": { "type": "string" } },
            "required": ["a", "b", "c"]
        });
        let validator = jsonschema::validator_for(&schema).unwrap();
        let report = errors(&validator, &json!({ "a": "x", "b": 1 })).unwrap();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3, "{report}");
        assert!(
            lines.contains(&r#"- /a: "x" is not of type "integer""#),
            "{report}"
        );
        assert!(
            lines.contains(&r#"- /b: 1 is not of type "string""#),
            "{report}"
        );
        assert!(
            lines.contains(&r#"- /: "c" is a required property"#),
            "{report}"
        );
        assert!(errors(&validator, &json!({ "a": 1, "b": "y", "c": 0 })).is_none());
    }
}
