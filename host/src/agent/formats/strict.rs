//! Whether OpenAI's strict mode accepts a tool's input schema as it is: the
//! `strict` flag of both OpenAI formats' definitions.

use serde_json::{Value, json};

/// Whether OpenAI's strict mode (Structured Outputs) accepts `schema`, a
/// function's parameters, exactly as it is: the `strict` flag of both OpenAI
/// formats' definitions.
///
/// Strict mode constrains the model's arguments to the schema, and accepts
/// only a subset of JSON Schema: OpenAI's guide to Structured Outputs
/// ("Supported schemas"). This predicate is conservative: `true` means the
/// schema keeps to that documented subset; a schema using anything else
/// (even something the API might tolerate) is `false`, and is then sent
/// without strict mode. It is `true` when:
///
/// - the root is an object schema (`type: "object"`), not an `anyOf`;
/// - every object schema has `properties`, `additionalProperties: false`,
///   and lists every property in `required` (strict mode has no optional
///   properties; a schema emulates one with a `null` type in a union);
/// - every schema has a `type` (a string or an array of `string`, `number`,
///   `integer`, `boolean`, `object`, `array`, `null`) or is an `anyOf` or a
///   `$ref`; an array schema has a single `items` schema;
/// - every keyword is one of `type`, `description`, `title`, `enum`,
///   `const`, `anyOf`, `properties`, `required`, `additionalProperties`,
///   `items`, `minItems`, `maxItems`, `pattern`, `format`, `minimum`,
///   `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, plus
///   `$defs` / `definitions` at the root and `$ref` (a local `#…` pointer,
///   alone in its schema); so no `default`, `minLength`, `maxLength`,
///   `oneOf`, `allOf`, `not`, `if`, `patternProperties`, `uniqueItems`, …;
/// - a `format` is one of `date-time`, `time`, `date`, `duration`, `email`,
///   `hostname`, `ipv4`, `ipv6`, `uuid`;
/// - the documented limits hold: no schema more than 10 levels below the
///   root (a property's or an array's items schema is one level below its
///   parent; so at most 10 levels of objects), 5000 properties in all, 1000 enum values in all, 120,000
///   characters of property names, definition names, enum values and const
///   values in all, and 15,000 characters of values for an enum of more than
///   250 strings.
pub fn strict_compatible(schema: &Value) -> bool {
    let Some(root) = schema.as_object() else {
        return false;
    };
    if root.contains_key("anyOf") || root.get("type") != Some(&json!("object")) {
        return false;
    }
    let mut totals = StrictTotals::default();
    for key in ["$defs", "definitions"] {
        if let Some(definitions) = root.get(key) {
            let Some(definitions) = definitions.as_object() else {
                return false;
            };
            for (name, definition) in definitions {
                totals.characters += name.chars().count();
                // A definition is used below the root: checked as a property is.
                if !strict_schema(definition, 1, &mut totals) {
                    return false;
                }
            }
        }
    }
    strict_schema(schema, 0, &mut totals)
        && totals.properties <= 5000
        && totals.enum_values <= 1000
        && totals.characters <= 120_000
}

/// What [`strict_compatible`] counts across a whole schema.
#[derive(Default)]
struct StrictTotals {
    properties: usize,
    enum_values: usize,
    characters: usize,
}

/// The keywords strict mode accepts in a schema.
const STRICT_KEYWORDS: [&str; 21] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "$defs",
    "definitions",
];
/// The types strict mode accepts.
const STRICT_TYPES: [&str; 7] = [
    "string", "number", "integer", "boolean", "object", "array", "null",
];
/// The string formats strict mode accepts.
const STRICT_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// One schema of [`strict_compatible`], `depth` levels below the root.
fn strict_schema(schema: &Value, depth: usize, totals: &mut StrictTotals) -> bool {
    let Some(object) = schema.as_object() else {
        return false;
    };
    if depth > 10 {
        return false;
    }
    if let Some(reference) = object.get("$ref") {
        return object.len() == 1 && reference.as_str().is_some_and(|r| r.starts_with('#'));
    }
    if object.keys().any(|key| {
        !STRICT_KEYWORDS.contains(&key.as_str())
            || (matches!(key.as_str(), "$defs" | "definitions") && depth > 0)
    }) {
        return false;
    }
    let Some(types) = strict_types(object) else {
        return false;
    };
    if let Some(format) = object.get("format")
        && !format.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f))
    {
        return false;
    }
    if !strict_values(object, totals) {
        return false;
    }
    if let Some(variants) = object.get("anyOf") {
        let Some(variants) = variants.as_array().filter(|v| !v.is_empty()) else {
            return false;
        };
        if !variants.iter().all(|v| strict_schema(v, depth, totals)) {
            return false;
        }
    }
    let is_object = types.contains(&"object") || object.contains_key("properties");
    if is_object {
        if !strict_object(object, depth, totals) {
            return false;
        }
    } else if object.contains_key("additionalProperties") || object.contains_key("required") {
        return false;
    }
    if types.contains(&"array") {
        match object.get("items") {
            Some(items @ Value::Object(_)) => strict_schema(items, depth + 1, totals),
            _ => false,
        }
    } else {
        !object.contains_key("items")
    }
}

/// The schema's `type`s, all of strict mode's; empty for an `anyOf`
/// without one; `None` when strict mode refuses them.
fn strict_types(object: &serde_json::Map<String, Value>) -> Option<Vec<&str>> {
    let types: Vec<&str> = match object.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) if !names.is_empty() => {
            names.iter().map(Value::as_str).collect::<Option<_>>()?
        }
        Some(_) => return None,
        None if object.contains_key("anyOf") => Vec::new(),
        None => return None,
    };
    types
        .iter()
        .all(|t| STRICT_TYPES.contains(t))
        .then_some(types)
}

/// Whether the schema's `enum` fits strict mode (at most 250 strings or
/// 15,000 characters), counting it and its `const` in `totals`.
fn strict_values(object: &serde_json::Map<String, Value>, totals: &mut StrictTotals) -> bool {
    if let Some(values) = object.get("enum") {
        let Some(values) = values.as_array() else {
            return false;
        };
        totals.enum_values += values.len();
        let characters: usize = values
            .iter()
            .filter_map(Value::as_str)
            .map(|v| v.chars().count())
            .sum();
        let strings = values.iter().filter(|v| v.is_string()).count();
        if strings > 250 && characters > 15_000 {
            return false;
        }
        totals.characters += characters;
    }
    if let Some(Value::String(value)) = object.get("const") {
        totals.characters += value.chars().count();
    }
    true
}

/// Whether an object schema fits strict mode: `additionalProperties:
/// false`, every property required (once), and each property's schema
/// strict, one level down.
fn strict_object(
    object: &serde_json::Map<String, Value>,
    depth: usize,
    totals: &mut StrictTotals,
) -> bool {
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return false;
    };
    if object.get("additionalProperties") != Some(&Value::Bool(false)) {
        return false;
    }
    let required: Option<Vec<&str>> = match object.get("required") {
        None => Some(Vec::new()),
        Some(Value::Array(names)) => names.iter().map(Value::as_str).collect(),
        Some(_) => None,
    };
    let Some(required) = required else {
        return false;
    };
    let listed: std::collections::HashSet<&str> = required.iter().copied().collect();
    if listed.len() != required.len()
        || listed.len() != properties.len()
        || !properties.keys().all(|name| listed.contains(name.as_str()))
    {
        return false;
    }
    totals.properties += properties.len();
    properties.iter().all(|(name, property)| {
        totals.characters += name.chars().count();
        strict_schema(property, depth + 1, totals)
    })
}
