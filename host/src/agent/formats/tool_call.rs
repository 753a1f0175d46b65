//! A parsed tool call, its kind, and why a document could not be parsed.

use serde_json::Value;

use super::Format;
use crate::call::Arguments;

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
    /// as, and the only kind a [`Runner`](crate::agent::Runner) runs.
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
