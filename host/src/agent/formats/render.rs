//! Tool results in each format, to send back to the model.

use serde_json::{Map, Value, json};

use super::Format;
use super::tool_call::{CallKind, ToolCall};
use crate::call::CallResult;

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
