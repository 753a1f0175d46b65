//! Model responses through `toolcage run-calls`' parser: bytes → JSON →
//! [`parse_calls`] with the format detected and with each format named, then
//! [`render_results`] of results for the parsed calls.
//!
//! Checks: nothing panics; auto-detection parses exactly as naming the
//! detected format does; the parsed calls have distinct, stable ids; and the
//! rendered results answer every call, by its id, in order, in the shape of
//! the format.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use toolcage::agent::{
    CallKind, Format, ParseError, ToolCall, detect, parse_calls, render_results,
};
use toolcage::{CallResult, ErrorKind, Logs, NetUsage};

fuzz_target!(|data: &[u8]| {
    // As `run-calls` reads its input: UTF-8 text, then JSON.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(document) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let auto = parse_calls(&document, None);
    match detect(&document) {
        Ok(format) => assert_eq!(
            auto,
            parse_calls(&document, Some(format)),
            "auto-detection and naming the detected format disagree"
        ),
        Err(error) => assert_eq!(auto, Err(error)),
    }
    if let Ok((format, calls)) = &auto {
        check_calls(*format, calls);
    }
    for format in Format::ALL {
        match parse_calls(&document, Some(format)) {
            Ok((parsed_as, calls)) => {
                assert_eq!(parsed_as, format);
                check_calls(format, &calls);
            }
            Err(ParseError::Invalid {
                format: named,
                path,
                message,
            }) => {
                assert_eq!(named, format);
                assert!(path.starts_with('$'), "{path}");
                assert!(!message.is_empty());
            }
            Err(ParseError::DuplicateId { format: named, id }) => {
                assert_eq!(named, format);
                let _ = id;
            }
            Err(error) => panic!("{format}: a named format cannot be undetected: {error}"),
        }
    }
});

/// The calls of one document, with results for them rendered back.
fn check_calls(format: Format, calls: &[ToolCall]) {
    let mut ids = std::collections::HashSet::new();
    for call in calls {
        assert!(ids.insert(&call.id), "duplicate id {:?} parsed", call.id);
        if call.kind == CallKind::Custom {
            assert!(
                matches!(format, Format::OpenAi | Format::OpenAiResponses),
                "{format} has no custom tool calls"
            );
        }
    }
    // Alternate successes (with details) and failures.
    let results: Vec<CallResult> = calls
        .iter()
        .enumerate()
        .map(|(i, call)| CallResult {
            tool: call.name.clone(),
            call_id: call.id.clone(),
            is_error: i % 2 == 1,
            error_kind: (i % 2 == 1).then_some(ErrorKind::ToolError),
            output: format!("result {i} of {}", call.name),
            details: Some(json!({ "i": i })),
            duration: Duration::from_millis(1),
            fuel_used: 1,
            peak_memory_bytes: 0,
            slot_wait: Duration::ZERO,
            net: NetUsage::default(),
            logs: Logs::default(),
            nested: Vec::new(),
            nested_usage: None,
        })
        .collect();
    let rendered = render_results(format, calls, &results);
    let items = match format {
        Format::Anthropic => {
            assert_eq!(rendered["role"], "user");
            rendered["content"].as_array().expect("content").clone()
        }
        _ => rendered.as_array().expect("an array of results").clone(),
    };
    assert_eq!(items.len(), calls.len(), "a result per call");
    for ((item, call), result) in items.iter().zip(calls).zip(&results) {
        let id_key = match format {
            Format::OpenAi => "tool_call_id",
            Format::OpenAiResponses => "call_id",
            Format::Anthropic => "tool_use_id",
            // MCP results go in the JSON-RPC responses, which carry the id.
            Format::Mcp => {
                assert_eq!(item["isError"], result.is_error);
                continue;
            }
        };
        assert_eq!(item[id_key], call.id.as_str(), "results in call order");
        if format == Format::OpenAiResponses {
            let kind = match call.kind {
                CallKind::Custom => "custom_tool_call_output",
                _ => "function_call_output",
            };
            assert_eq!(item["type"], kind);
        }
    }
    // What is sent back is JSON again.
    let text = serde_json::to_string(&rendered).expect("the results serialise");
    let _: Value = serde_json::from_str(&text).expect("the results parse back");
}
