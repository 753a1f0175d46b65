//! Reading the tool calls out of a provider's document: detecting its
//! format, then each format's envelope, walked with paths for the errors.

use serde_json::{Map, Value, json};

use super::Format;
use super::tool_call::{CallKind, ParseError, ToolCall};
use crate::call::Arguments;

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
