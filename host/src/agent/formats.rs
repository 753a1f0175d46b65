//! Tool definitions, tool calls and tool results in the wire formats of the
//! model providers: OpenAI Chat Completions, OpenAI Responses, Anthropic
//! Messages, and MCP.
//!
//! Threat model: a parsed document comes from a model provider, and what is
//! inside its tool calls comes from a model. Parsing checks only the
//! envelope: a document that is not one of the formats is an `Err` for the
//! embedder (a bug, or a provider changing its API). Whatever the model chose
//! (the tool name, the arguments text, even arguments that are not JSON) is
//! carried through untouched, so that running the call gives the model a
//! result saying what was wrong instead of failing the whole batch.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value, json};

use crate::call::Permissions;
use crate::{Arguments, CallResult, Descriptor, Registry};

/// A provider's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Format {
    /// OpenAI Chat Completions (`openai`): `tools[].function`,
    /// `message.tool_calls`, `role: "tool"` messages. Also spoken by most
    /// OpenAI-compatible servers.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses (`openai-responses`): `function` tools,
    /// `function_call` output items, `function_call_output` input items.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages (`anthropic`): `input_schema` tools, `tool_use`
    /// content blocks, `tool_result` blocks in one user message.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Model Context Protocol, revision 2025-06-18 (`mcp`): `Tool` objects,
    /// `tools/call` requests, `CallToolResult` objects.
    #[serde(rename = "mcp")]
    Mcp,
}

impl Format {
    /// Every format, in the order of their names in [`Format::from_str`]'s error.
    pub const ALL: [Format; 4] = [
        Format::OpenAi,
        Format::OpenAiResponses,
        Format::Anthropic,
        Format::Mcp,
    ];

    /// The format's short name: `openai`, `openai-responses`, `anthropic` or
    /// `mcp`, as [`FromStr`] accepts it.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::OpenAiResponses => "openai-responses",
            Format::Anthropic => "anthropic",
            Format::Mcp => "mcp",
        }
    }

    /// The format's human name, e.g. `OpenAI Chat Completions`.
    pub fn title(self) -> &'static str {
        match self {
            Format::OpenAi => "OpenAI Chat Completions",
            Format::OpenAiResponses => "OpenAI Responses",
            Format::Anthropic => "Anthropic Messages",
            Format::Mcp => "MCP",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is none of `openai`, `openai-responses`, `anthropic`,
/// `mcp`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?}; expected one of openai, openai-responses, anthropic, mcp")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    /// Parses a short name, exactly as [`Format::as_str`] writes it.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|format| format.as_str() == name)
            .ok_or_else(|| UnknownFormat(name.to_string()))
    }
}

/// The definitions of every tool of `registry`, in registration order, as a
/// JSON array of `format`'s tool objects:
///
/// - OpenAI Chat Completions: `{type: "function", function: {name, description, parameters, strict}}`;
/// - OpenAI Responses: `{type: "function", name, description, parameters, strict}`;
/// - Anthropic Messages: `{name, description, input_schema}`;
/// - MCP: `Tool` objects `{name, title?, description, inputSchema,
///   outputSchema?, annotations: {readOnlyHint, destructiveHint,
///   idempotentHint, openWorldHint}}`, the `tools` of a `tools/list` result.
///
/// Only MCP carries the title, output schema and hints: the provider formats
/// have no place for them.
///
/// Both OpenAI formats carry `strict` explicitly, as [`strict_compatible`]
/// decides: `true` only for an input schema that OpenAI's strict mode accepts
/// as it is, `false` for every other. The Responses API takes a missing
/// `strict` as `true`, which would make every optional argument required
/// (or reject the schema); Chat Completions takes it as `false`, and says the
/// same when told.
///
/// Code mode's `run_code` is shown as the model should see it under
/// `permissions`: its description lists the tools a script may call
/// ([`code_mode::shown`](crate::code_mode::shown)).
pub fn definitions(registry: &Registry, permissions: &Permissions, format: Format) -> Value {
    Value::Array(
        registry
            .tools()
            .map(|tool| {
                let shown = crate::code_mode::shown(registry, permissions, tool);
                definition(&shown.descriptor, format)
            })
            .collect(),
    )
}

/// One tool's definition in `format`: see [`definitions`].
pub fn definition(descriptor: &Descriptor, format: Format) -> Value {
    let Descriptor {
        name,
        title,
        description,
        input_schema,
        output_schema,
        hints,
    } = descriptor;
    match format {
        Format::OpenAi => json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": input_schema,
                "strict": strict_compatible(input_schema),
            },
        }),
        Format::OpenAiResponses => json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": input_schema,
            "strict": strict_compatible(input_schema),
        }),
        Format::Anthropic => {
            json!({ "name": name, "description": description, "input_schema": input_schema })
        }
        Format::Mcp => {
            let mut tool = Map::new();
            tool.insert("name".into(), json!(name));
            if let Some(title) = title {
                tool.insert("title".into(), json!(title));
            }
            tool.insert("description".into(), json!(description));
            tool.insert("inputSchema".into(), input_schema.clone());
            if let Some(output_schema) = output_schema {
                tool.insert("outputSchema".into(), output_schema.clone());
            }
            tool.insert(
                "annotations".into(),
                json!({
                    "readOnlyHint": hints.read_only,
                    "destructiveHint": hints.destructive,
                    "idempotentHint": hints.idempotent,
                    "openWorldHint": hints.open_world,
                }),
            );
            Value::Object(tool)
        }
    }
}

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

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in its result.
    pub id: String,
    /// The tool's name, as the model wrote it.
    pub name: String,
    /// The arguments: JSON text as the model wrote it (OpenAI's formats), or
    /// a value (Anthropic's `input`, MCP's `arguments`). For a custom tool
    /// call, its free-text `input` as a JSON string.
    pub arguments: Arguments,
    /// What kind of call it is: only [`CallKind::Function`] calls run.
    pub kind: CallKind,
}

impl ToolCall {
    /// A function call with id `id` of tool `name`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<Arguments>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            kind: CallKind::Function,
        }
    }

    /// A custom tool call with id `id` of tool `name`, with free-text `input`.
    pub fn custom(
        id: impl Into<String>,
        name: impl Into<String>,
        input: impl Into<String>,
    ) -> Self {
        ToolCall {
            kind: CallKind::Custom,
            ..ToolCall::new(id, name, Value::String(input.into()))
        }
    }
}

/// The kind of a [`ToolCall`]: which tools it calls, and so whether
/// toolcage can run it and what shape its result takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallKind {
    /// A call of a function tool with JSON arguments: Chat Completions
    /// `type: "function"`, a Responses `function_call`, an Anthropic
    /// `tool_use`, an MCP `tools/call`. The kind toolcage's tools are defined
    /// as, and the only kind a [`Runner`](super::Runner) runs.
    Function,
    /// A call of an OpenAI custom tool, whose input is free text: Chat
    /// Completions `type: "custom"`, a Responses `custom_tool_call`.
    /// toolcage's tools take JSON arguments, so it never runs one: its result
    /// is an [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) error
    /// of its own, rendered as the provider expects for that call (a
    /// Responses `custom_tool_call_output`), and the calls beside it run as
    /// usual.
    Custom,
}

/// A document that holds no tool calls the parser can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Auto-detection recognised none of the formats.
    #[error(
        "cannot tell the format of this document ({0}): expected an OpenAI chat completion \
         (`choices`), assistant message (`tool_calls`) or tool call array, an OpenAI Responses \
         object (`output`) or output array, an Anthropic message (`content` array) or content \
         array, or MCP `tools/call` requests; name the format explicitly"
    )]
    Undetected(String),
    /// The document is not a valid document of its format.
    #[error("not a valid {} document: at `{path}`, {message}", format.title())]
    Invalid {
        /// The format it was parsed as.
        format: Format,
        /// Where in the document, as a path such as `$.choices[0].message`.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// Two calls share an id, so their results could not be told apart.
    #[error("invalid {} document: the call id {id:?} appears more than once", format.title())]
    DuplicateId {
        /// The format it was parsed as.
        format: Format,
        /// The repeated id.
        id: String,
    },
}

/// Recognises a document's format from its shape:
///
/// - an object with `choices` or `tool_calls`, or an assistant message with
///   a text or null `content`: OpenAI Chat Completions;
/// - an object with `output`: OpenAI Responses;
/// - an object with `jsonrpc` or `method`: MCP;
/// - an object with a `content` array: Anthropic Messages;
/// - an array: by its first item with a telling shape (`function` or
///   `custom`: OpenAI's `tool_calls`; `type` `function_call`,
///   `custom_tool_call`, `message` or `reasoning`: a Responses `output`; `type` `tool_use`, `text` or
///   `thinking`: an Anthropic `content`; `jsonrpc` or `method`: MCP).
pub fn detect(document: &Value) -> Result<Format, ParseError> {
    match document {
        Value::Object(object) => {
            if object.contains_key("choices") || object.contains_key("tool_calls") {
                Ok(Format::OpenAi)
            } else if object.contains_key("output") {
                Ok(Format::OpenAiResponses)
            } else if object.contains_key("jsonrpc") || object.contains_key("method") {
                Ok(Format::Mcp)
            } else if object.get("content").is_some_and(Value::is_array) {
                Ok(Format::Anthropic)
            } else if object.contains_key("role")
                && object
                    .get("content")
                    .is_none_or(|c| c.is_string() || c.is_null())
            {
                Ok(Format::OpenAi)
            } else {
                Err(ParseError::Undetected(
                    "an object with none of the telling keys".into(),
                ))
            }
        }
        Value::Array(items) if items.is_empty() => {
            Err(ParseError::Undetected("an empty array".into()))
        }
        Value::Array(items) => items
            .iter()
            .find_map(detect_item)
            .ok_or_else(|| ParseError::Undetected("an array of items of no known type".into())),
        other => Err(ParseError::Undetected(format!(
            "{}, not an object or array",
            kind(other)
        ))),
    }
}

fn detect_item(item: &Value) -> Option<Format> {
    let object = item.as_object()?;
    if object.contains_key("function") || object.contains_key("custom") {
        return Some(Format::OpenAi);
    }
    if object.contains_key("jsonrpc") || object.contains_key("method") {
        return Some(Format::Mcp);
    }
    match object.get("type").and_then(Value::as_str)? {
        "function_call"
        | "custom_tool_call"
        | "message"
        | "reasoning"
        | "function_call_output"
        | "custom_tool_call_output" => Some(Format::OpenAiResponses),
        "tool_use" | "text" | "thinking" | "redacted_thinking" | "server_tool_use" => {
            Some(Format::Anthropic)
        }
        _ => None,
    }
}

/// The tool calls in `document`, in their order there, with the format it
/// was read as (`format`, or the one [`detect`] finds when `None`).
///
/// What each format accepts:
///
/// - OpenAI Chat Completions: a chat completion, an assistant message, or
///   its `tool_calls` array; each call is
///   `{id, type: "function", function: {name, arguments}}`, and `arguments`
///   is kept as the JSON text the model wrote; a custom tool call
///   `{id, type: "custom", custom: {name, input}}` is a [`CallKind::Custom`]
///   call. Of a completion with several choices (a request with `n` above
///   1), only the first choice's message is read, as the SDKs' examples
///   continue from it: the choices are alternative replies, and only one of
///   them goes on in the conversation; to continue from another, pass its
///   `message`;
/// - OpenAI Responses: a response object (its `output`) or the `output`
///   array; its `function_call` items `{call_id, name, arguments}` are the
///   calls, and its `custom_tool_call` items `{call_id, name, input}` are
///   [`CallKind::Custom`] calls; other items are skipped: messages,
///   reasoning, and the calls of OpenAI's built-in tools, which OpenAI runs
///   itself (web and file search, code interpreter, image generation,
///   remote MCP) or which answer to tools the embedder declared itself, not
///   toolcage's (computer use, shell, local shell, apply patch, MCP
///   approval requests);
/// - Anthropic Messages: a message or its `content` array; its `tool_use`
///   blocks `{id, name, input}` are the calls, other blocks are skipped;
/// - MCP: a JSON-RPC `tools/call` request or an array of them; `params`
///   `{name, arguments?}` (missing `arguments` is `{}`), and the call's id is
///   the request's `id` as text.
///
/// A document with no tool calls (a model's final answer, the normal last
/// turn of an agent loop) is not an error: it has an empty list.
///
/// Malformed arguments are not an error here: running the call reports them
/// to the model as [`ErrorKind::InvalidArguments`](crate::ErrorKind::InvalidArguments).
pub fn parse_calls(
    document: &Value,
    format: Option<Format>,
) -> Result<(Format, Vec<ToolCall>), ParseError> {
    let format = match format {
        Some(format) => format,
        None => detect(document)?,
    };
    let root = At {
        value: document,
        path: "$".into(),
        format,
    };
    let calls = match format {
        Format::OpenAi => parse_openai(root)?,
        Format::OpenAiResponses => parse_responses(root)?,
        Format::Anthropic => parse_anthropic(root)?,
        Format::Mcp => parse_mcp(root)?,
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(call) = calls.iter().find(|call| !seen.insert(call.id.as_str())) {
        return Err(ParseError::DuplicateId {
            format,
            id: call.id.clone(),
        });
    }
    Ok((format, calls))
}

fn parse_openai(root: At<'_>) -> Result<Vec<ToolCall>, ParseError> {
    let tool_calls = if root.value.is_array() {
        root
    } else {
        let message = if root.get("choices").is_some() {
            let choices = root.field("choices")?.array()?;
            let Some(first) = choices.into_iter().next() else {
                return Err(root
                    .field("choices")?
                    .invalid("expected at least one choice"));
            };
            first.field("message")?
        } else {
            root
        };
        message.object()?;
        match message.get("tool_calls") {
            Some(tool_calls) => tool_calls,
            None => return Ok(Vec::new()),
        }
    };
    let mut calls = Vec::new();
    for call in tool_calls.array()? {
        call.object()?;
        let id = call.field("id")?.str()?.to_string();
        let kind = match call.get("type") {
            Some(kind) => kind.str()?,
            None => "function",
        };
        match kind {
            "function" => {
                let function = call.field("function")?;
                calls.push(ToolCall {
                    id,
                    name: function.field("name")?.str()?.to_string(),
                    arguments: function.field("arguments")?.arguments(),
                    kind: CallKind::Function,
                });
            }
            "custom" => {
                let custom = call.field("custom")?;
                calls.push(ToolCall::custom(
                    id,
                    custom.field("name")?.str()?,
                    custom.field("input")?.str()?,
                ));
            }
            other => {
                return Err(call.field("type")?.invalid(&format!(
                    "expected a `function` or `custom` tool call, not `{other}`"
                )));
            }
        }
    }
    Ok(calls)
}

fn parse_responses(root: At<'_>) -> Result<Vec<ToolCall>, ParseError> {
    let output = if root.value.is_array() {
        root
    } else {
        root.field("output")?
    };
    let mut calls = Vec::new();
    for item in output.array()? {
        item.object()?;
        match item.get("type").and_then(|t| t.value.as_str()) {
            Some("function_call") => calls.push(ToolCall {
                id: item.field("call_id")?.str()?.to_string(),
                name: item.field("name")?.str()?.to_string(),
                arguments: item.field("arguments")?.arguments(),
                kind: CallKind::Function,
            }),
            Some("custom_tool_call") => calls.push(ToolCall::custom(
                item.field("call_id")?.str()?,
                item.field("name")?.str()?,
                item.field("input")?.str()?,
            )),
            _ => {}
        }
    }
    Ok(calls)
}

fn parse_anthropic(root: At<'_>) -> Result<Vec<ToolCall>, ParseError> {
    let content = if root.value.is_array() {
        root
    } else {
        root.field("content")?
    };
    let mut calls = Vec::new();
    for block in content.array()? {
        block.object()?;
        if block
            .get("type")
            .is_some_and(|t| t.value.as_str() == Some("tool_use"))
        {
            calls.push(ToolCall {
                id: block.field("id")?.str()?.to_string(),
                name: block.field("name")?.str()?.to_string(),
                arguments: Arguments::Value(block.field("input")?.value.clone()),
                kind: CallKind::Function,
            });
        }
    }
    Ok(calls)
}

fn parse_mcp(root: At<'_>) -> Result<Vec<ToolCall>, ParseError> {
    let requests = if root.value.is_array() {
        root.array()?
    } else {
        vec![root]
    };
    let mut calls = Vec::new();
    for request in requests {
        request.object()?;
        let method = request.field("method")?;
        if method.str()? != "tools/call" {
            return Err(method.invalid(&format!(
                "only `tools/call` requests can be run, not `{}`",
                method.str()?
            )));
        }
        let id = request.field("id")?;
        let id = match id.value {
            Value::String(id) => id.clone(),
            Value::Number(id) => id.to_string(),
            _ => {
                return Err(id.invalid(&format!(
                    "expected a string or a number, found {}",
                    kind(id.value)
                )));
            }
        };
        let params = request.field("params")?;
        params.object()?;
        let arguments = params
            .get("arguments")
            .map_or_else(|| json!({}), |a| a.value.clone());
        calls.push(ToolCall {
            id,
            name: params.field("name")?.str()?.to_string(),
            arguments: Arguments::Value(arguments),
            kind: CallKind::Function,
        });
    }
    Ok(calls)
}

/// A value inside a parsed document, and where it is.
struct At<'a> {
    value: &'a Value,
    path: String,
    format: Format,
}

impl<'a> At<'a> {
    fn invalid(&self, message: &str) -> ParseError {
        ParseError::Invalid {
            format: self.format,
            path: self.path.clone(),
            message: message.to_string(),
        }
    }

    fn expected(&self, what: &str) -> ParseError {
        self.invalid(&format!("expected {what}, found {}", kind(self.value)))
    }

    fn object(&self) -> Result<&'a Map<String, Value>, ParseError> {
        self.value
            .as_object()
            .ok_or_else(|| self.expected("an object"))
    }

    /// The field `key`, when present and not null.
    fn get(&self, key: &str) -> Option<At<'a>> {
        let value = self.value.as_object()?.get(key).filter(|v| !v.is_null())?;
        Some(At {
            value,
            path: format!("{}.{key}", self.path),
            format: self.format,
        })
    }

    /// The field `key`, which must be present and not null.
    fn field(&self, key: &str) -> Result<At<'a>, ParseError> {
        self.object()?;
        self.get(key)
            .ok_or_else(|| self.invalid(&format!("the field `{key}` is missing")))
    }

    fn array(&self) -> Result<Vec<At<'a>>, ParseError> {
        let items = self
            .value
            .as_array()
            .ok_or_else(|| self.expected("an array"))?;
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, value)| At {
                value,
                path: format!("{}[{i}]", self.path),
                format: self.format,
            })
            .collect())
    }

    fn str(&self) -> Result<&'a str, ParseError> {
        self.value.as_str().ok_or_else(|| self.expected("a string"))
    }

    /// OpenAI arguments: JSON text, kept as written; some compatible servers
    /// send an object instead, which is kept as a value.
    fn arguments(&self) -> Arguments {
        match self.value {
            Value::String(text) => Arguments::Json(text.clone()),
            other => Arguments::Value(other.clone()),
        }
    }
}

/// What a JSON value is, for a message: `null`, `a string`, `an object`…
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `results` in `format`, to send back to the model. Only each result's
/// `output` goes to the model (with its error flag where the format has
/// one); `details`, logs and metrics are for the embedder.
///
/// `calls` are the calls the results answer, as parsed: a result takes the
/// shape its call's [`CallKind`] needs, found by the call id. A result whose
/// id is not among them answers a function call.
///
/// - OpenAI Chat Completions: an array of messages
///   `{role: "tool", tool_call_id, content}`, one per result, for function
///   and custom calls alike;
/// - OpenAI Responses: an array of input items
///   `{type: "function_call_output", call_id, output}`, and
///   `{type: "custom_tool_call_output", call_id, output}` for a custom call;
/// - Anthropic Messages: ONE user message
///   `{role: "user", content: [{type: "tool_result", tool_use_id, content, is_error}]}`;
/// - MCP: an array of `CallToolResult` objects
///   `{content: [{type: "text", text}], structuredContent?, isError}`, in
///   call order, each to be sent as the result of its request's JSON-RPC
///   response; `structuredContent` is the `details` of a successful call,
///   as MCP requires of tools that declare an output schema.
///
/// No results (a response with no tool calls) is an empty array, or for
/// Anthropic a user message with an empty `content`: there is nothing to
/// send back, the model's turn is over.
pub fn render_results(format: Format, calls: &[ToolCall], results: &[CallResult]) -> Value {
    let kinds: std::collections::HashMap<&str, CallKind> = calls
        .iter()
        .map(|call| (call.id.as_str(), call.kind))
        .collect();
    let kind_of = |result: &CallResult| {
        kinds
            .get(result.call_id.as_str())
            .copied()
            .unwrap_or(CallKind::Function)
    };
    match format {
        Format::OpenAi => results
            .iter()
            .map(|r| json!({ "role": "tool", "tool_call_id": r.call_id, "content": r.output }))
            .collect(),
        Format::OpenAiResponses => results
            .iter()
            .map(|r| {
                let kind = match kind_of(r) {
                    CallKind::Function => "function_call_output",
                    CallKind::Custom => "custom_tool_call_output",
                };
                json!({ "type": kind, "call_id": r.call_id, "output": r.output })
            })
            .collect(),
        Format::Anthropic => {
            let content: Vec<Value> = results
                .iter()
                .map(|r| {
                    json!({ "type": "tool_result", "tool_use_id": r.call_id, "content": r.output, "is_error": r.is_error })
                })
                .collect();
            json!({ "role": "user", "content": content })
        }
        Format::Mcp => results
            .iter()
            .map(|r| {
                let mut result = Map::new();
                result.insert(
                    "content".into(),
                    json!([{ "type": "text", "text": r.output }]),
                );
                if let Some(details) = r.details.as_ref().filter(|_| !r.is_error) {
                    result.insert("structuredContent".into(), details.clone());
                }
                result.insert("isError".into(), json!(r.is_error));
                Value::Object(result)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            with_property(
                json!({ "type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 2 }),
            ),
            with_property(
                json!({ "type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1 }),
            ),
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
            with_property(
                json!({ "type": "object", "properties": {}, "additionalProperties": {} }),
            ),
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
}
