//! The agent integration library: provider formats (against golden files),
//! batches, permissions, events, cancellation and the result cache, all
//! through real guests.
//!
//! Golden files live in `tests/golden/`; run with `BLESS=1` to rewrite them
//! after an intended change, and review the diff.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcage::agent::{
    self, AgentEvent, Approval, ApprovalRequest, CallKind, Format, OnDenial, ParseError,
    Permission, Permissions, PermissionsError, ResultCache, Runner, ToolCall,
};
use toolcage::{Arguments, CancelToken, ErrorKind, Limits, Mount, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

mod batches;
mod cache;
mod cancellation;
mod documents;
mod events;
mod formats;
mod permissions;

async fn echo_registry() -> Arc<Registry> {
    Arc::new(registry(builder().limits(quick_limits()), &[guests::FIXTURE_ECHO]).await)
}

async fn echo_and_misbehave() -> Arc<Registry> {
    Arc::new(
        registry(
            builder().limits(quick_limits()),
            &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
        )
        .await,
    )
}

/// Compares `actual` with the golden file `name`, or rewrites it under `BLESS=1`.
fn golden(name: &str, actual: &Value) {
    let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
    toolcage_tests::assert_golden(&format!("golden/{name}"), &text);
}

/// Collects a runner's events.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<AgentEvent>>>);

impl Events {
    fn sink(&self) -> impl Fn(AgentEvent) + Send + Sync + 'static {
        let events = self.0.clone();
        move |event| events.lock().unwrap().push(event)
    }

    fn all(&self) -> Vec<AgentEvent> {
        self.0.lock().unwrap().clone()
    }

    fn of(&self, call_id: &str) -> Vec<AgentEvent> {
        self.all()
            .into_iter()
            .filter(|e| e.call_id() == call_id)
            .collect()
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

// ---------------------------------------------------------------------------
// Realistic provider documents: each asks for a good call, a call of a tool
// that fails, a call with bad arguments, and a call of an unknown tool.

fn openai_completion() -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [
                    { "id": "call_Dp4yUjbV0TjZhVvBzLp0Ylsz", "type": "function",
                      "function": { "name": "echo", "arguments": "{\"text\":\"hi\",\"repeat\":2}" } },
                    { "id": "call_8Bq7nKpZrTgFvXw2mJ6sLh4c", "type": "function",
                      "function": { "name": "fail", "arguments": "{}" } },
                    { "id": "call_Qm3xWv9TzR1bNc5yHk7pLd2e", "type": "function",
                      "function": { "name": "echo", "arguments": "{\"text\": \"unterminated" } },
                    { "id": "call_Zr6tYh2KsJ8wMq4vBn1cXp9f", "type": "function",
                      "function": { "name": "ech0", "arguments": "{}" } }
                ],
                "refusal": null,
                "annotations": []
            },
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": { "prompt_tokens": 82, "completion_tokens": 77, "total_tokens": 159 },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}

fn responses_response() -> Value {
    json!({
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": [
            { "id": "rs_67ccd2bf1a3081908a8c6d0f3c1e5e1a", "type": "reasoning", "summary": [] },
            { "id": "fc_67ccd2c0d5a881909f1a0bd33cc71a8d", "type": "function_call", "status": "completed",
              "call_id": "call_ebP3Kk7YwMjZ5sQ8fRn2Xq1T", "name": "echo",
              "arguments": "{\"text\":\"hi\",\"repeat\":2}" },
            { "id": "fc_67ccd2c1e6b98190b4d7a2c3f1e08e9b", "type": "function_call", "status": "completed",
              "call_id": "call_Ux9Lq2Vd7Hs4Rk1Wm8Yt6Pb3", "name": "fail", "arguments": "{}" },
            { "id": "fc_67ccd2c2f7ca9190a5e8b3d4e2f19fac", "type": "function_call", "status": "completed",
              "call_id": "call_Gn5Cz8Jf3Ta1Xe6Qw9Ks2Mh7", "name": "echo", "arguments": "not json at all" },
            { "id": "fc_67ccd2c308db0190b6f9c4e5f3020abd", "type": "function_call", "status": "completed",
              "call_id": "call_Wb1Nm4Hx7Pq2Zs5Ld8Fj3Tv6", "name": "ech0", "arguments": "{}" }
        ],
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "usage": { "input_tokens": 291, "output_tokens": 23, "total_tokens": 314 }
    })
}

fn anthropic_message() -> Value {
    json!({
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            { "type": "text", "text": "I'll run the tools for you." },
            { "type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "echo",
              "input": { "text": "hi", "repeat": 2 } },
            { "type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "fail", "input": {} },
            { "type": "tool_use", "id": "toolu_01V2y2gK45rBnl3uOUsO8Vq7", "name": "echo",
              "input": { "repeat": 0 } },
            { "type": "tool_use", "id": "toolu_01W3z3hL56sCom4vPVtP9Wr8", "name": "ech0", "input": {} }
        ],
        "stop_reason": "tool_use",
        "stop_sequence": null,
        "usage": { "input_tokens": 472, "output_tokens": 95 }
    })
}

fn mcp_requests() -> Value {
    json!([
        { "jsonrpc": "2.0", "id": 1, "method": "tools/call",
          "params": { "name": "echo", "arguments": { "text": "hi", "repeat": 2 } } },
        { "jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": { "name": "fail" } },
        { "jsonrpc": "2.0", "id": 3, "method": "tools/call",
          "params": { "name": "echo", "arguments": { "text": 7 } } },
        { "jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": { "name": "ech0", "arguments": {} } }
    ])
}

fn sample(format: Format) -> Value {
    match format {
        Format::OpenAi => openai_completion(),
        Format::OpenAiResponses => responses_response(),
        Format::Anthropic => anthropic_message(),
        Format::Mcp => mcp_requests(),
    }
}
