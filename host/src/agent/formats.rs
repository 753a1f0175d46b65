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
/// - OpenAI Chat Completions: `{type: "function", function: {name, description, parameters}}`;
/// - OpenAI Responses: `{type: "function", name, description, parameters}`;
/// - Anthropic Messages: `{name, description, input_schema}`;
/// - MCP: `Tool` objects `{name, title?, description, inputSchema,
///   outputSchema?, annotations: {readOnlyHint, destructiveHint,
///   idempotentHint, openWorldHint}}`, the `tools` of a `tools/list` result.
///
/// Only MCP carries the title, output schema and hints: the provider formats
/// have no place for them.
pub fn definitions(registry: &Registry, format: Format) -> Value {
    Value::Array(
        registry
            .tools()
            .map(|tool| definition(&tool.descriptor, format))
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
            "function": { "name": name, "description": description, "parameters": input_schema },
        }),
        Format::OpenAiResponses => json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": input_schema,
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

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in its result.
    pub id: String,
    /// The tool's name, as the model wrote it.
    pub name: String,
    /// The arguments: JSON text as the model wrote it (OpenAI's formats), or
    /// a value (Anthropic's `input`, MCP's `arguments`).
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call with id `id` of tool `name`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<Arguments>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
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
/// - an array: by its first item with a telling shape (`function`:
///   OpenAI's `tool_calls`; `type` `function_call`, `message` or
///   `reasoning`: a Responses `output`; `type` `tool_use`, `text` or
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
    if object.contains_key("function") {
        return Some(Format::OpenAi);
    }
    if object.contains_key("jsonrpc") || object.contains_key("method") {
        return Some(Format::Mcp);
    }
    match object.get("type").and_then(Value::as_str)? {
        "function_call" | "message" | "reasoning" | "function_call_output" => {
            Some(Format::OpenAiResponses)
        }
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
/// - OpenAI Chat Completions: a chat completion (its `choices[0].message`),
///   an assistant message, or its `tool_calls` array; each call is
///   `{id, type: "function", function: {name, arguments}}`, and `arguments`
///   is kept as the JSON text the model wrote;
/// - OpenAI Responses: a response object (its `output`) or the `output`
///   array; its `function_call` items `{call_id, name, arguments}` are the
///   calls, other items (messages, reasoning) are skipped;
/// - Anthropic Messages: a message or its `content` array; its `tool_use`
///   blocks `{id, name, input}` are the calls, other blocks are skipped;
/// - MCP: a JSON-RPC `tools/call` request or an array of them; `params`
///   `{name, arguments?}` (missing `arguments` is `{}`), and the call's id is
///   the request's `id` as text.
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
        if let Some(kind) = call.get("type") {
            let kind = kind.str()?;
            if kind != "function" {
                return Err(call.field("type")?.invalid(&format!(
                    "only `function` tool calls can be run, not `{kind}`"
                )));
            }
        }
        let function = call.field("function")?;
        calls.push(ToolCall {
            id: call.field("id")?.str()?.to_string(),
            name: function.field("name")?.str()?.to_string(),
            arguments: function.field("arguments")?.arguments(),
        });
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
        if item
            .get("type")
            .is_some_and(|t| t.value.as_str() == Some("function_call"))
        {
            calls.push(ToolCall {
                id: item.field("call_id")?.str()?.to_string(),
                name: item.field("name")?.str()?.to_string(),
                arguments: item.field("arguments")?.arguments(),
            });
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

fn kind(value: &Value) -> &'static str {
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
/// - OpenAI Chat Completions: an array of messages
///   `{role: "tool", tool_call_id, content}`, one per result;
/// - OpenAI Responses: an array of input items
///   `{type: "function_call_output", call_id, output}`;
/// - Anthropic Messages: ONE user message
///   `{role: "user", content: [{type: "tool_result", tool_use_id, content, is_error}]}`;
/// - MCP: an array of `CallToolResult` objects
///   `{content: [{type: "text", text}], structuredContent?, isError}`, in
///   call order, each to be sent as the result of its request's JSON-RPC
///   response; `structuredContent` is the `details` of a successful call,
///   as MCP requires of tools that declare an output schema.
pub fn render_results(format: Format, results: &[CallResult]) -> Value {
    match format {
        Format::OpenAi => results
            .iter()
            .map(|r| json!({ "role": "tool", "tool_call_id": r.call_id, "content": r.output }))
            .collect(),
        Format::OpenAiResponses => results
            .iter()
            .map(|r| json!({ "type": "function_call_output", "call_id": r.call_id, "output": r.output }))
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
                result.insert("content".into(), json!([{ "type": "text", "text": r.output }]));
                if let Some(details) = r.details.as_ref().filter(|_| !r.is_error) {
                    result.insert("structuredContent".into(), details.clone());
                }
                result.insert("isError".into(), json!(r.is_error));
                Value::Object(result)
            })
            .collect(),
    }
}
