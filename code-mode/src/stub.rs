//! The stub of one tool: its helper types, signature and docstring.

use serde_json::{Map, Value};

use crate::ident::{camel, is_identifier};
use crate::text::{doc_escape, flat, lines, py_literal, py_str};
use crate::types::{Renderer, Shared, description, properties, required, resolve};
use crate::{Detail, OUTPUT_KEY, ToolSpec, adds_output, summary};

/// A signature fitting in this many characters stays on one line.
const LINE_WIDTH: usize = 88;

/// Validation keywords noted (with their values) in an argument's line.
const CONSTRAINTS: [&str; 10] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "format",
];

const READ_ONLY: &str = "Read-only: asyncio.gather runs its calls in parallel.";
const RETURNS_TEXT: &str = "Returns its text output.";
const RETURNS_DETAILS: &str = "Returns its result (details).";
const RETURNS_BOTH: &str = "Returns its result, with its text output under \"output\".";

/// `schema` with the text output as its required property `output`.
fn with_output(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        if let Some(Value::Object(properties)) = map.get_mut("properties") {
            properties.insert(
                OUTPUT_KEY.to_owned(),
                serde_json::json!({ "type": "string", "description": "The tool's text output." }),
            );
        }
        let required = map
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(names) = required {
            names.push(Value::String(OUTPUT_KEY.to_owned()));
        }
    }
    schema
}

/// How a tool's input schema becomes parameters.
pub(crate) enum Shape<'v> {
    /// `()`: an object schema that admits no property.
    NoArgs,
    /// `(*, a: T, b: U | None = None)`: every property an identifier.
    Keywords(&'v Map<String, Value>),
    /// `(**arguments: Unpack[ToolArguments])`: some property is not.
    Unpack(&'v Map<String, Value>),
    /// `(**arguments: T)`: no properties; `T` from `additionalProperties`
    /// when it is a schema, else `Any`.
    Kwargs(Option<&'v Value>),
}

/// The shape of the parameters for `input_schema`.
pub(crate) fn shape(input_schema: &Value) -> Shape<'_> {
    let Some(map) = object_root(input_schema) else {
        return Shape::Kwargs(None);
    };
    match map.get("properties") {
        Some(Value::Object(props)) if !props.is_empty() => {
            if props.keys().all(|key| is_identifier(key)) {
                Shape::Keywords(map)
            } else {
                Shape::Unpack(map)
            }
        }
        _ => match map.get("additionalProperties") {
            Some(Value::Bool(false)) => Shape::NoArgs,
            Some(values @ Value::Object(_)) => Shape::Kwargs(Some(values)),
            _ => Shape::Kwargs(None),
        },
    }
}

/// The object schema at the root of an input schema (through `$ref`s), or
/// `None` when it is not one.
fn object_root(root: &Value) -> Option<&Map<String, Value>> {
    let mut schema = root;
    for _ in 0..8 {
        let map = schema.as_object()?;
        match map.get("$ref").and_then(Value::as_str) {
            Some(reference) => schema = resolve(root, reference)?,
            None => return admits_object(map).then_some(map),
        }
    }
    None
}

fn admits_object(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        None => true,
        Some(Value::String(name)) => name == "object",
        Some(Value::Array(names)) => names.iter().any(|name| name == "object"),
        Some(_) => false,
    }
}

/// One property as a parameter.
pub(crate) struct Param<'v> {
    pub(crate) name: &'v str,
    pub(crate) schema: &'v Value,
    pub(crate) required: bool,
}

/// An object schema's properties as parameters: required ones first, each
/// group in schema order.
pub(crate) fn params(map: &Map<String, Value>) -> Vec<Param<'_>> {
    let required = required(map);
    let all = properties(map).map(|(name, schema)| Param {
        name,
        schema,
        required: required.contains(&name.as_str()),
    });
    let (mut out, optional): (Vec<_>, Vec<_>) = all.partition(|p| p.required);
    out.extend(optional);
    out
}

/// A property's `default` as a Python literal, when it has one that is.
pub(crate) fn default_literal(schema: &Value) -> Option<String> {
    py_literal(schema.get("default")?)
}

/// The stub of `tool`, helpers first; a comment alone for a tool whose
/// name is not a Python identifier.
pub(crate) fn stub(tool: &ToolSpec, shared: &mut Shared, detail: Detail) -> String {
    let Some(py_name) = tool.identifier else {
        let name = py_str(tool.name);
        return format!("# {name} is not a Python identifier; this script cannot call it.\n");
    };
    let prefix = camel(tool.name);
    let mut inputs = Renderer::new(shared, tool.input_schema, &prefix);
    let (parameters, args) = parameters(&mut inputs, tool.input_schema, &prefix);
    let merged = tool
        .output_schema
        .filter(|s| adds_output(s))
        .map(with_output);
    let returns = match merged.as_ref().or(tool.output_schema) {
        Some(schema) => {
            let mut outputs = Renderer::new(shared, schema, &prefix);
            outputs.ty(schema, &format!("{prefix}Result"), 0).render()
        }
        None => "str".to_owned(),
    };
    let mut out = String::new();
    for helper in std::mem::take(&mut shared.helpers) {
        out.push_str(&helper);
        out.push('\n');
    }
    if py_name != tool.name {
        out.push_str(&format!("# the tool {}\n", py_str(tool.name)));
    }
    out.push_str(&def_line(py_name, &parameters, &returns));
    out.push_str(&docstring(tool, &args, detail));
    out.push_str("    ...\n");
    out
}

/// The parameters of the signature, and the `Args:` lines of the docstring.
fn parameters<'v>(
    r: &mut Renderer<'_, 'v>,
    input: &'v Value,
    prefix: &str,
) -> (Vec<String>, Vec<String>) {
    match shape(input) {
        Shape::NoArgs => (Vec::new(), Vec::new()),
        Shape::Kwargs(None) => {
            r.uses("Any");
            (vec!["**arguments: Any".into()], Vec::new())
        }
        Shape::Kwargs(Some(values)) => {
            let ty = r.ty(values, &format!("{prefix}Value"), 1).render();
            (vec![format!("**arguments: {ty}")], Vec::new())
        }
        Shape::Unpack(map) => {
            let name = r.typed_dict(map, &format!("{prefix}Arguments"), Some(prefix), 0);
            r.uses("Unpack");
            let parameter = format!("**arguments: Unpack[{name}]");
            (vec![parameter], arg_lines(map, input, r.brief()))
        }
        Shape::Keywords(map) => {
            let mut out = vec!["*".to_owned()];
            for param in params(map) {
                out.push(keyword(r, &param, prefix));
            }
            (out, arg_lines(map, input, r.brief()))
        }
    }
}

/// `name: T`, `name: T | None = None` or `name: T = default`.
fn keyword<'v>(r: &mut Renderer<'_, 'v>, param: &Param<'v>, prefix: &str) -> String {
    let ty = r.ty(param.schema, &format!("{prefix}{}", camel(param.name)), 1);
    let name = param.name;
    if param.required {
        return format!("{name}: {}", ty.render());
    }
    match default_literal(param.schema) {
        Some(default) if default != "None" => format!("{name}: {} = {default}", ty.render()),
        _ => format!("{name}: {} = None", ty.or_none().render()),
    }
}

/// `name: description (constraints)` for each property with either; the
/// description alone when `brief`.
fn arg_lines(map: &Map<String, Value>, root: &Value, brief: bool) -> Vec<String> {
    let mut out = Vec::new();
    for param in params(map) {
        let notes = match brief {
            true => String::new(),
            false => constraints(param.schema, root),
        };
        let text = match (flat(description(param.schema)), notes.is_empty()) {
            (text, true) => text,
            (text, false) if text.is_empty() => format!("({notes})"),
            (text, false) => format!("{text} ({notes})"),
        };
        if !text.is_empty() {
            out.push(flat(&format!("{}: {text}", param.name)));
        }
    }
    out
}

/// `minimum 0, pattern ^[a-z]+$`: the validation keywords of a property
/// (through one `$ref`) that its type does not show.
fn constraints(schema: &Value, root: &Value) -> String {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolve(root, reference).unwrap_or(schema),
        None => schema,
    };
    let Some(map) = schema.as_object() else {
        return String::new();
    };
    let notes = CONSTRAINTS.iter().filter_map(|key| match map.get(*key)? {
        Value::Number(n) => Some(format!("{key} {n}")),
        Value::String(s) if s.chars().count() <= 80 => Some(format!("{key} {s}")),
        _ => None,
    });
    notes.collect::<Vec<_>>().join(", ")
}

/// `async def name(...) -> R:`, on several lines when long.
fn def_line(name: &str, parameters: &[String], returns: &str) -> String {
    let line = format!(
        "async def {name}({}) -> {returns}:\n",
        parameters.join(", ")
    );
    if line.len() <= LINE_WIDTH + 1 || parameters.is_empty() {
        return line;
    }
    let listed: String = parameters.iter().map(|p| format!("    {p},\n")).collect();
    format!("async def {name}(\n{listed}) -> {returns}:\n")
}

/// The docstring: the description, `Args:`, what it returns, and whether
/// it is read-only.
fn docstring(tool: &ToolSpec, args: &[String], detail: Detail) -> String {
    let mut body: Vec<String> = match detail {
        Detail::Full => lines(tool.description)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        Detail::Brief => vec![summary(tool.description)],
    };
    let mut paragraph = |lines: Vec<String>| {
        if !body.is_empty() {
            body.push(String::new());
        }
        body.extend(lines);
    };
    if !args.is_empty() {
        let listed = args.iter().map(|line| format!("    {line}"));
        paragraph(std::iter::once("Args:".to_owned()).chain(listed).collect());
    }
    let returns = match tool.output_schema {
        Some(schema) if adds_output(schema) => RETURNS_BOTH,
        Some(_) => RETURNS_DETAILS,
        None => RETURNS_TEXT,
    };
    paragraph(vec![returns.to_owned()]);
    if tool.read_only {
        paragraph(vec![READ_ONLY.to_owned()]);
    }
    indent_docstring(&body)
}

fn indent_docstring(body: &[String]) -> String {
    let mut out = String::from("    \"\"\"");
    for (i, line) in body.iter().enumerate() {
        match (i, line.is_empty()) {
            (0, _) => out.push_str(&doc_escape(line)),
            (_, true) => out.push('\n'),
            (_, false) => out.push_str(&format!("\n    {}", doc_escape(line))),
        }
    }
    out.push_str("\n    \"\"\"\n");
    out
}
