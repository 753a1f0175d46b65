//! Python values and JSON: what crosses between the script and the tools
//! it calls. A tool's JSON becomes dicts, lists and scalars; what the
//! script passes or returns becomes JSON, with anything JSON cannot hold
//! (a set, a date, a function) as the nearest JSON or its `str()`.

use monty_types::MontyObject;
use serde_json::{Map, Value, json};

/// A JSON value as a Python one.
pub fn from_json(value: &Value) -> MontyObject {
    match value {
        Value::Null => MontyObject::None,
        Value::Bool(b) => MontyObject::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::Int(i),
            None => MontyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => MontyObject::String(s.clone()),
        Value::Array(items) => MontyObject::List(items.iter().map(from_json).collect()),
        Value::Object(map) => MontyObject::dict(
            map.iter()
                .map(|(k, v)| (MontyObject::String(k.clone()), from_json(v)))
                .collect::<Vec<_>>(),
        ),
    }
}

/// A Python value as JSON.
pub fn to_json(value: &MontyObject) -> Value {
    match value {
        MontyObject::None => Value::Null,
        MontyObject::Bool(b) => Value::Bool(*b),
        MontyObject::Int(i) => json!(i),
        MontyObject::BigInt(i) => {
            let text = i.to_string();
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }
        MontyObject::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        MontyObject::String(s) | MontyObject::Path(s) => Value::String(s.clone()),
        MontyObject::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        MontyObject::List(items)
        | MontyObject::Tuple(items)
        | MontyObject::Set(items)
        | MontyObject::FrozenSet(items) => Value::Array(items.iter().map(to_json).collect()),
        MontyObject::NamedTuple {
            field_names,
            values,
            ..
        } => Value::Object(
            field_names
                .iter()
                .cloned()
                .zip(values.iter().map(to_json))
                .collect(),
        ),
        MontyObject::Dict(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (key(k), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        MontyObject::Repr(text) => Value::String(text.clone()),
        other => Value::String(other.to_string()),
    }
}

/// A dict key as a JSON object's key: a string as is, anything else as its
/// `str()`.
fn key(key: &MontyObject) -> String {
    match key {
        MontyObject::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A tool call's arguments: its keyword arguments as a JSON object.
/// Positional arguments are refused, naming the form that works.
pub fn arguments(
    tool: &str,
    args: &[MontyObject],
    kwargs: &[(MontyObject, MontyObject)],
) -> Result<Value, String> {
    if !args.is_empty() {
        return Err(format!(
            "{tool}() takes keyword arguments only, as its stub shows: {tool}(name=value, ...)"
        ));
    }
    let mut object = Map::new();
    for (name, value) in kwargs {
        object.insert(key(name), to_json(value));
    }
    Ok(Value::Object(object))
}
