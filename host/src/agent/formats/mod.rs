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

mod definitions;
mod parse;
mod render;
mod strict;
#[cfg(test)]
mod tests;
mod tool_call;

use std::fmt;
use std::str::FromStr;

pub use definitions::{definition, definitions};
#[cfg(feature = "mcp")]
pub(crate) use parse::kind;
pub use parse::{detect, parse_calls};
pub use render::render_results;
pub use strict::strict_compatible;
pub use tool_call::{CallKind, ParseError, ToolCall};

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
