//! The strict-mode predicate against OpenAI's documented subset and limits,
//! and the `strict` flag of the definitions.

use serde_json::{Map, Value, json};

use super::{Format, definition, strict_compatible};
use crate::catalog::component::Descriptor;

/// An object schema that strict mode accepts, with `extra` merged into
/// the property `p`'s schema.
fn with_property(extra: Value) -> Value {
    let mut property = json!({ "type": "string", "description": "A value." });
    for (key, value) in extra.as_object().unwrap() {
        property[key] = value.clone();
    }
    json!({
        "type": "object",
        "properties": { "p": property },
        "required": ["p"],
        "additionalProperties": false
    })
}

#[test]
fn strict_mode_accepts_the_documented_subset() {
    let accepted = [
        json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        json!({ "type": "object", "properties": {}, "required": [], "additionalProperties": false }),
        with_property(json!({})),
        with_property(json!({ "type": ["string", "null"], "title": "P" })),
        with_property(json!({ "pattern": "^[a-z]+$", "format": "date-time" })),
        with_property(json!({ "type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 2 })),
        with_property(json!({ "type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1 })),
        with_property(json!({ "enum": ["a", "b"] })),
        with_property(json!({ "const": "a" })),
        with_property(json!({
            "type": "array", "minItems": 1, "maxItems": 3,
            "items": { "type": "object", "properties": { "x": { "type": "boolean" } },
                       "required": ["x"], "additionalProperties": false }
        })),
        json!({
            "type": "object",
            "properties": { "p": { "anyOf": [{ "type": "string" }, { "$ref": "#/$defs/n" }] } },
            "required": ["p"],
            "additionalProperties": false,
            "$defs": { "n": { "type": "object", "properties": { "next": { "anyOf": [{ "$ref": "#/$defs/n" }, { "type": "null" }] } },
                              "required": ["next"], "additionalProperties": false } }
        }),
    ];
    for schema in accepted {
        assert!(strict_compatible(&schema), "{schema}");
    }
}

#[test]
fn strict_mode_refuses_everything_else() {
    let refused = [
        // Not an object schema at the root.
        json!(true),
        json!({ "type": "array", "items": { "type": "string" } }),
        json!({ "anyOf": [{ "type": "object", "properties": {}, "additionalProperties": false }] }),
        // Objects: no properties, extra properties allowed, optional properties.
        json!({ "type": "object" }),
        json!({ "type": "object", "properties": {} }),
        json!({ "type": "object", "properties": {}, "additionalProperties": true }),
        json!({ "type": "object", "properties": { "p": { "type": "string" } }, "additionalProperties": false }),
        json!({ "type": "object", "properties": { "p": { "type": "string" } }, "required": ["p", "q"], "additionalProperties": false }),
        json!({ "type": "object", "properties": { "p": { "type": "string" } }, "required": ["p", "p"], "additionalProperties": false }),
        with_property(json!({ "type": "object", "properties": {}, "additionalProperties": {} })),
        // Keywords outside the subset.
        with_property(json!({ "default": "x" })),
        with_property(json!({ "minLength": 1 })),
        with_property(json!({ "maxLength": 9 })),
        with_property(json!({ "format": "uri" })),
        with_property(
            json!({ "type": "array", "items": { "type": "string" }, "uniqueItems": true }),
        ),
        with_property(json!({ "oneOf": [{ "type": "string" }] })),
        with_property(json!({ "$ref": "#/$defs/x", "description": "siblings" })),
        with_property(json!({ "$ref": "https://example.com/schema" })),
        json!({ "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}, "additionalProperties": false }),
        // Types: missing, unknown; arrays without one items schema.
        json!({ "type": "object", "properties": { "p": { "description": "anything" } }, "required": ["p"], "additionalProperties": false }),
        with_property(json!({ "type": "text" })),
        with_property(json!({ "type": "array" })),
        with_property(json!({ "type": "array", "items": [{ "type": "string" }] })),
        with_property(json!({ "anyOf": [] })),
    ];
    for schema in refused {
        assert!(!strict_compatible(&schema), "{schema}");
    }
}

#[test]
fn strict_mode_limits_hold() {
    // A leaf 10 levels below the root (10 levels of objects), then 11.
    let nested = |levels: usize| {
        let mut schema = json!({ "type": "string" });
        for _ in 0..levels {
            schema = json!({ "type": "object", "properties": { "p": schema }, "required": ["p"], "additionalProperties": false });
        }
        schema
    };
    assert!(strict_compatible(&nested(10)));
    assert!(!strict_compatible(&nested(11)));

    let many = |count: usize| {
        let names: Vec<String> = (0..count).map(|i| format!("p{i}")).collect();
        let properties: Map<String, Value> = names
            .iter()
            .map(|name| (name.clone(), json!({ "type": "boolean" })))
            .collect();
        json!({ "type": "object", "properties": properties, "required": names, "additionalProperties": false })
    };
    assert!(strict_compatible(&many(5000)));
    assert!(!strict_compatible(&many(5001)));

    let values = |count: usize, length: usize| {
        let values: Vec<String> = (0..count).map(|i| format!("{i:0length$}")).collect();
        with_property(json!({ "enum": values }))
    };
    assert!(strict_compatible(&values(1000, 4)));
    assert!(
        !strict_compatible(&values(1001, 4)),
        "1000 enum values in all"
    );
    assert!(strict_compatible(&values(300, 50)));
    assert!(
        !strict_compatible(&values(300, 51)),
        "15,000 characters in a large enum"
    );
    assert!(
        !strict_compatible(&with_property(json!({ "const": "x".repeat(120_001) }))),
        "120,000 characters in all"
    );
}

#[test]
fn definitions_carry_strict_in_both_openai_formats() {
    let descriptor = |input_schema: Value| Descriptor {
        name: "t".into(),
        title: None,
        description: "T.".into(),
        input_schema,
        output_schema: None,
        hints: Default::default(),
    };
    let strict = descriptor(with_property(json!({})));
    let loose = descriptor(json!({ "type": "object" }));
    for (descriptor, expected) in [(&strict, true), (&loose, false)] {
        let chat = definition(descriptor, Format::OpenAi);
        assert_eq!(chat["function"]["strict"], json!(expected), "{chat}");
        let responses = definition(descriptor, Format::OpenAiResponses);
        assert_eq!(responses["strict"], json!(expected), "{responses}");
        let anthropic = definition(descriptor, Format::Anthropic);
        assert!(anthropic.get("strict").is_none(), "{anthropic}");
    }
}
