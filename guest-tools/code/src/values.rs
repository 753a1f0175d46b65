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

/// The deepest a value the script hands the host may nest: the host reads
/// JSON at most 128 levels deep, and a result sits two levels inside its
/// details.
pub const MAX_DEPTH: usize = 100;

/// A value nested deeper than [`MAX_DEPTH`].
#[derive(Debug, PartialEq)]
pub struct TooDeep;

/// A Python value as JSON, unless it nests deeper than [`MAX_DEPTH`].
pub fn to_json(value: &MontyObject) -> Result<Value, TooDeep> {
    to_json_within(value, MAX_DEPTH)
}

/// A Python value as JSON, with at most `depth` more levels of lists and
/// dicts below it.
fn to_json_within(value: &MontyObject, depth: usize) -> Result<Value, TooDeep> {
    let nested = |items: &[MontyObject]| -> Result<Vec<Value>, TooDeep> {
        let depth = depth.checked_sub(1).ok_or(TooDeep)?;
        items
            .iter()
            .map(|item| to_json_within(item, depth))
            .collect()
    };
    Ok(match value {
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
        | MontyObject::FrozenSet(items) => Value::Array(nested(items)?),
        MontyObject::NamedTuple {
            field_names,
            values,
            ..
        } => Value::Object(field_names.iter().cloned().zip(nested(values)?).collect()),
        MontyObject::Dict(pairs) => {
            let depth = depth.checked_sub(1).ok_or(TooDeep)?;
            let mut object = Map::new();
            for (k, v) in pairs {
                object.insert(key(k), to_json_within(v, depth)?);
            }
            Value::Object(object)
        }
        MontyObject::Repr(text) => Value::String(text.clone()),
        other => Value::String(other.to_string()),
    })
}

/// A dict key as a JSON object's key: a string as is, anything else as its
/// `str()`.
fn key(key: &MontyObject) -> String {
    match key {
        MontyObject::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Why a call of `tool` with positional `args` is refused, if it has any.
pub fn positional(tool: &str, args: &[MontyObject]) -> Option<String> {
    (!args.is_empty()).then(|| {
        format!("{tool}() takes keyword arguments only, as its stub shows: {tool}(name=value, ...)")
    })
}

/// A tool call's arguments: its keyword arguments as a JSON object.
/// Positional arguments are refused, naming the form that works.
pub fn arguments(
    tool: &str,
    args: &[MontyObject],
    kwargs: &[(MontyObject, MontyObject)],
) -> Result<Value, String> {
    if let Some(refused) = positional(tool, args) {
        return Err(refused);
    }
    let mut object = Map::new();
    for (name, value) in kwargs {
        let value = to_json(value).map_err(|TooDeep| {
            format!(
                "{tool}()'s argument `{}` nests deeper than {MAX_DEPTH} levels of lists and dicts, more than a tool takes",
                key(name)
            )
        })?;
        object.insert(key(name), value);
    }
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> MontyObject {
        MontyObject::String(s.to_string())
    }

    #[test]
    fn json_comes_back_as_it_went_in() {
        let value = json!({"a": [1, 2.5, "x", null, true], "b": {"c": -7}});
        assert_eq!(to_json(&from_json(&value)).unwrap(), value);
    }

    #[test]
    fn integers_stay_integers_and_floats_floats() {
        assert!(matches!(from_json(&json!(3)), MontyObject::Int(3)));
        assert!(matches!(from_json(&json!(3.0)), MontyObject::Float(f) if f == 3.0));
        assert!(matches!(from_json(&json!(u64::MAX)), MontyObject::Float(_)));
    }

    #[test]
    fn what_json_cannot_hold_becomes_the_nearest_json() {
        assert_eq!(to_json(&MontyObject::Float(f64::NAN)).unwrap(), Value::Null);
        assert_eq!(
            to_json(&MontyObject::Bytes(b"hi".to_vec())).unwrap(),
            json!("hi")
        );
        let set = MontyObject::Set(vec![MontyObject::Int(1)]);
        assert_eq!(to_json(&set).unwrap(), json!([1]));
        let tuple = MontyObject::Tuple(vec![string("a"), MontyObject::None]);
        assert_eq!(to_json(&tuple).unwrap(), json!(["a", null]));
    }

    #[test]
    fn a_dict_with_keys_that_are_not_strings_keys_them_by_their_str() {
        let dict = MontyObject::dict(vec![
            (MontyObject::Int(1), string("one")),
            (string("two"), MontyObject::Int(2)),
        ]);
        assert_eq!(to_json(&dict).unwrap(), json!({"1": "one", "two": 2}));
    }

    #[test]
    fn keyword_arguments_become_an_object_and_positional_ones_are_refused() {
        let kwargs = [
            (string("path"), string("/a")),
            (string("n"), MontyObject::Int(2)),
        ];
        assert_eq!(
            arguments("read_file", &[], &kwargs).unwrap(),
            json!({"path": "/a", "n": 2})
        );
        let refused = arguments("read_file", &[string("/a")], &[]).unwrap_err();
        assert!(refused.contains("read_file(name=value, ...)"), "{refused}");
        assert_eq!(arguments("calc", &[], &[]).unwrap(), json!({}));
    }

    fn nested(levels: usize) -> MontyObject {
        (0..levels).fold(MontyObject::Int(1), |inner, _| {
            MontyObject::List(vec![inner])
        })
    }

    #[test]
    fn depth_is_bounded_obeyed_and_breached() {
        assert!(to_json(&nested(MAX_DEPTH)).is_ok());
        assert_eq!(to_json(&nested(MAX_DEPTH + 1)), Err(TooDeep));
        let deep_dict = (0..MAX_DEPTH + 1).fold(MontyObject::None, |inner, _| {
            MontyObject::dict(vec![(string("k"), inner)])
        });
        assert_eq!(to_json(&deep_dict), Err(TooDeep));
        let kwargs = [(string("x"), nested(MAX_DEPTH + 1))];
        let refused = arguments("calc", &[], &kwargs).unwrap_err();
        assert!(refused.contains("deeper than 100"), "{refused}");
    }
}
