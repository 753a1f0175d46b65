//! What a [`Runner`](super::Runner) reports while it runs a batch, for user
//! interfaces and logs.
//!
//! Threat model: event contents (arguments, log lines, progress messages,
//! outputs) come from a model or a tool and are untrusted text; the core caps
//! guest events at 1,000 per call and 4 KiB each. Every call of a batch
//! produces exactly one [`AgentEvent::ToolCall`] first and one
//! [`AgentEvent::ToolResult`] last, with its guest's logs and progress in
//! between; events of different calls of a concurrent batch interleave.
//! A nested call (a tool calling a tool) produces the same events, with
//! its caller's id as `parent_call_id`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::call::Metrics;
use crate::sandbox::outcome::{ErrorKind, LogLevel};

/// An event of a batch. Serialized as an object with a `type` of
/// `tool_call`, `tool_progress`, `tool_log` or `tool_result`, then
/// `call_id`, `tool`, `timestamp_ms` (Unix time in milliseconds) and the
/// event's own fields.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The runner took up a call: the first event of every call (for an
    /// [`on_event`](super::Runner::on_event) subscriber).
    ToolCall {
        /// The call's id.
        call_id: String,
        /// The id of the call whose tool made this call, for a nested call
        /// (a tool calling a tool); absent for the batch's own calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<String>,
        /// The tool's name, as the model wrote it.
        tool: String,
        /// When, in milliseconds since the Unix epoch.
        timestamp_ms: u64,
        /// The arguments: parsed, or the model's text as a string when it is
        /// not JSON.
        arguments: Value,
    },
    /// The guest reported progress.
    ToolProgress {
        /// The call's id.
        call_id: String,
        /// The id of the call whose tool made this call, for a nested call
        /// (a tool calling a tool); absent for the batch's own calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<String>,
        /// The tool's name.
        tool: String,
        /// When, in milliseconds since the Unix epoch.
        timestamp_ms: u64,
        /// What is happening.
        message: String,
        /// How far along, in `0.0..=1.0`, when known.
        fraction: Option<f32>,
    },
    /// The guest logged a line.
    ToolLog {
        /// The call's id.
        call_id: String,
        /// The id of the call whose tool made this call, for a nested call
        /// (a tool calling a tool); absent for the batch's own calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<String>,
        /// The tool's name.
        tool: String,
        /// When, in milliseconds since the Unix epoch.
        timestamp_ms: u64,
        /// Its severity.
        level: LogLevel,
        /// The text.
        message: String,
    },
    /// The call finished, ran or not: the last event of every call (for an
    /// [`on_event`](super::Runner::on_event) subscriber).
    ToolResult {
        /// The call's id.
        call_id: String,
        /// The id of the call whose tool made this call, for a nested call
        /// (a tool calling a tool); absent for the batch's own calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<String>,
        /// The tool's name.
        tool: String,
        /// When, in milliseconds since the Unix epoch.
        timestamp_ms: u64,
        /// Whether the call failed.
        is_error: bool,
        /// Why it failed.
        error_kind: Option<ErrorKind>,
        /// The text for the model.
        output: String,
        /// Structured details.
        details: Option<Value>,
        /// What it cost.
        metrics: Metrics,
    },
}

impl AgentEvent {
    /// The id of the call the event is about.
    pub fn call_id(&self) -> &str {
        match self {
            AgentEvent::ToolCall { call_id, .. }
            | AgentEvent::ToolProgress { call_id, .. }
            | AgentEvent::ToolLog { call_id, .. }
            | AgentEvent::ToolResult { call_id, .. } => call_id,
        }
    }

    /// The id of the call whose tool made the call the event is about,
    /// when a tool made it.
    pub fn parent_call_id(&self) -> Option<&str> {
        match self {
            AgentEvent::ToolCall { parent_call_id, .. }
            | AgentEvent::ToolProgress { parent_call_id, .. }
            | AgentEvent::ToolLog { parent_call_id, .. }
            | AgentEvent::ToolResult { parent_call_id, .. } => parent_call_id.as_deref(),
        }
    }

    /// The name of the tool the event is about.
    pub fn tool(&self) -> &str {
        match self {
            AgentEvent::ToolCall { tool, .. }
            | AgentEvent::ToolProgress { tool, .. }
            | AgentEvent::ToolLog { tool, .. }
            | AgentEvent::ToolResult { tool, .. } => tool,
        }
    }

    /// The event's type as serialized: `tool_call`, `tool_progress`,
    /// `tool_log` or `tool_result`.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentEvent::ToolCall { .. } => "tool_call",
            AgentEvent::ToolProgress { .. } => "tool_progress",
            AgentEvent::ToolLog { .. } => "tool_log",
            AgentEvent::ToolResult { .. } => "tool_result",
        }
    }

    /// When it happened, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        match self {
            AgentEvent::ToolCall { timestamp_ms, .. }
            | AgentEvent::ToolProgress { timestamp_ms, .. }
            | AgentEvent::ToolLog { timestamp_ms, .. }
            | AgentEvent::ToolResult { timestamp_ms, .. } => *timestamp_ms,
        }
    }
}

/// Now, in milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
