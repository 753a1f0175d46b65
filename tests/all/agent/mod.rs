//! The agent integration library: provider formats (against golden files),
//! batches, permissions, events, cancellation and the result cache, all
//! through real guests.
//!
//! Golden files live in `tests/golden/`; run with `BLESS=1` to rewrite them
//! after an intended change, and review the diff.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcage::agent::{
    self, AgentEvent, Approval, ApprovalRequest, CallKind, Format, OnDenial, ParseError,
    Permission, Permissions, PermissionsError, ResultCache, Runner, ToolCall,
};
use toolcage::{Arguments, CancelToken, ErrorKind, Limits, Mount, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

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
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with BLESS=1 to create it", path.display()));
    assert!(
        expected == text,
        "{} differs from the output; run with BLESS=1 to update it if the change is intended.\n--- expected\n{expected}\n--- actual\n{text}",
        path.display()
    );
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

// ---------------------------------------------------------------------------
// Formats

#[test]
fn format_names_round_trip() {
    for format in Format::ALL {
        assert_eq!(format.to_string().parse::<Format>(), Ok(format));
        assert_eq!(
            serde_json::to_value(format).unwrap(),
            json!(format.as_str())
        );
    }
    assert_eq!(
        "openai-responses".parse::<Format>(),
        Ok(Format::OpenAiResponses)
    );
    let error = "gemini".parse::<Format>().unwrap_err();
    assert!(error.to_string().contains("\"gemini\""), "{error}");
    assert!(
        error
            .to_string()
            .contains("openai, openai-responses, anthropic, mcp"),
        "{error}"
    );
}

#[tokio::test]
async fn definitions_match_the_golden_files() {
    let registry = echo_registry().await;
    for format in Format::ALL {
        let definitions = agent::definitions(&registry, format);
        assert_eq!(
            definitions.as_array().unwrap().len(),
            4,
            "echo, counter, fail, bad_details"
        );
        golden(&format!("definitions.{format}.json"), &definitions);
    }
    // Spot checks of each shape, beyond the golden files.
    let openai = agent::definitions(&registry, Format::OpenAi);
    assert_eq!(openai[0]["function"]["name"], "echo");
    assert_eq!(
        openai[0]["function"]["parameters"]["required"],
        json!(["text"])
    );
    let responses = agent::definitions(&registry, Format::OpenAiResponses);
    let keys: Vec<&String> = responses[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["type", "name", "description", "parameters", "strict"]
    );
    // `strict` is explicit: echo has optional arguments and a `maxLength`,
    // and the others' schemas have no `properties`, so none qualifies.
    for (chat, responses) in openai
        .as_array()
        .unwrap()
        .iter()
        .zip(responses.as_array().unwrap())
    {
        assert_eq!(chat["function"]["strict"], false, "{chat}");
        assert_eq!(responses["strict"], false, "{responses}");
    }
    let anthropic = agent::definitions(&registry, Format::Anthropic);
    let keys: Vec<&String> = anthropic[1].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "description", "input_schema"]);
    let mcp = agent::definitions(&registry, Format::Mcp);
    assert_eq!(mcp[0]["title"], "Echo");
    assert_eq!(mcp[0]["outputSchema"]["required"], json!(["length"]));
    assert_eq!(
        mcp[0]["annotations"],
        json!({ "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false })
    );
    assert!(
        mcp[1].get("title").is_none() && mcp[1].get("outputSchema").is_none(),
        "{}",
        mcp[1]
    );
}

#[tokio::test]
async fn rendered_results_match_the_golden_files() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    for format in Format::ALL {
        let (detected, rendered) = runner.run_document(&sample(format), None).await.unwrap();
        assert_eq!(detected, format);
        golden(&format!("results.{format}.json"), &rendered);
    }
}

#[test]
fn parses_an_openai_chat_completion() {
    let (format, calls) = agent::parse_calls(&openai_completion(), None).unwrap();
    assert_eq!(format, Format::OpenAi);
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].id, "call_Dp4yUjbV0TjZhVvBzLp0Ylsz");
    assert_eq!(calls[0].name, "echo");
    assert_eq!(
        calls[0].arguments,
        Arguments::Json(r#"{"text":"hi","repeat":2}"#.into()),
        "kept as written"
    );
    assert_eq!(
        calls[2].arguments,
        Arguments::Json(r#"{"text": "unterminated"#.into()),
        "malformed is not an error"
    );
    assert_eq!(calls[3].name, "ech0");

    // The assistant message alone, and its tool_calls array alone.
    let message = openai_completion()["choices"][0]["message"].clone();
    assert_eq!(
        agent::parse_calls(&message, None).unwrap(),
        (Format::OpenAi, calls.clone())
    );
    let tool_calls = message["tool_calls"].clone();
    assert_eq!(
        agent::parse_calls(&tool_calls, None).unwrap(),
        (Format::OpenAi, calls)
    );

    // A message without tool calls has none.
    let text_only = json!({ "role": "assistant", "content": "Done!", "tool_calls": null });
    assert_eq!(
        agent::parse_calls(&text_only, None).unwrap(),
        (Format::OpenAi, vec![])
    );
    let text_only = json!({ "role": "assistant", "content": "Done!" });
    assert_eq!(
        agent::parse_calls(&text_only, None).unwrap(),
        (Format::OpenAi, vec![])
    );
}

#[test]
fn parses_an_openai_responses_output() {
    let (format, calls) = agent::parse_calls(&responses_response(), None).unwrap();
    assert_eq!(format, Format::OpenAiResponses);
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "call_ebP3Kk7YwMjZ5sQ8fRn2Xq1T",
            "call_Ux9Lq2Vd7Hs4Rk1Wm8Yt6Pb3",
            "call_Gn5Cz8Jf3Ta1Xe6Qw9Ks2Mh7",
            "call_Wb1Nm4Hx7Pq2Zs5Ld8Fj3Tv6"
        ],
        "call_id, not the item id; the reasoning item is skipped"
    );
    assert_eq!(
        calls[0].arguments,
        Arguments::Json(r#"{"text":"hi","repeat":2}"#.into())
    );
    let output = responses_response()["output"].clone();
    assert_eq!(
        agent::parse_calls(&output, None).unwrap(),
        (Format::OpenAiResponses, calls)
    );
}

#[test]
fn parses_an_anthropic_message() {
    let (format, calls) = agent::parse_calls(&anthropic_message(), None).unwrap();
    assert_eq!(format, Format::Anthropic);
    assert_eq!(calls.len(), 4, "the text block is skipped");
    assert_eq!(
        calls[0],
        call(
            "toolu_01A09q90qw90lq917835lq9",
            "echo",
            json!({ "text": "hi", "repeat": 2 })
        )
    );
    assert!(matches!(calls[1].arguments, Arguments::Value(_)));
    let content = anthropic_message()["content"].clone();
    assert_eq!(
        agent::parse_calls(&content, None).unwrap(),
        (Format::Anthropic, calls)
    );
}

#[test]
fn parses_mcp_tools_call_requests() {
    let (format, calls) = agent::parse_calls(&mcp_requests(), None).unwrap();
    assert_eq!(format, Format::Mcp);
    assert_eq!(
        calls[0],
        call("1", "echo", json!({ "text": "hi", "repeat": 2 }))
    );
    assert_eq!(
        calls[1],
        call("two", "fail", json!({})),
        "missing arguments are {{}}"
    );
    let single = mcp_requests()[0].clone();
    assert_eq!(agent::parse_calls(&single, None).unwrap().1, calls[..1]);
}

#[test]
fn detection_recognises_each_format_and_names_what_it_cannot() {
    for format in Format::ALL {
        assert_eq!(agent::detect(&sample(format)), Ok(format));
    }
    for unknown in [
        json!({}),
        json!(42),
        json!([]),
        json!([{ "foo": 1 }]),
        json!({ "content": "text" }),
    ] {
        let error = agent::detect(&unknown).unwrap_err();
        assert!(
            matches!(error, ParseError::Undetected(_)),
            "{unknown}: {error:?}"
        );
        assert!(
            error.to_string().contains("name the format explicitly"),
            "{error}"
        );
        assert!(agent::parse_calls(&unknown, None).is_err());
    }
}

#[test]
fn a_structurally_invalid_document_is_an_error_naming_the_path() {
    let mut document = openai_completion();
    document["choices"][0]["message"]["tool_calls"][1]["function"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let error = agent::parse_calls(&document, None).unwrap_err();
    assert_eq!(
        error,
        ParseError::Invalid {
            format: Format::OpenAi,
            path: "$.choices[0].message.tool_calls[1].function".into(),
            message: "the field `name` is missing".into(),
        }
    );
    assert_eq!(
        error.to_string(),
        "not a valid OpenAI Chat Completions document: at `$.choices[0].message.tool_calls[1].function`, the field `name` is missing"
    );

    let cases = [
        (
            json!({ "choices": [] }),
            Some(Format::OpenAi),
            "$.choices",
            "at least one choice",
        ),
        (
            json!([{ "id": "c", "type": "mystery", "mystery": {} }]),
            Some(Format::OpenAi),
            "$[0].type",
            "expected a `function` or `custom` tool call, not `mystery`",
        ),
        (
            json!([{ "id": "c", "type": "custom", "custom": { "name": "x" } }]),
            Some(Format::OpenAi),
            "$[0].custom",
            "`input` is missing",
        ),
        (
            json!({ "output": "nope" }),
            None,
            "$.output",
            "expected an array, found a string",
        ),
        (
            json!([{ "type": "function_call", "name": "echo", "arguments": "{}" }]),
            None,
            "$[0]",
            "`call_id` is missing",
        ),
        (
            json!({ "content": [{ "type": "tool_use", "id": "t", "name": 5, "input": {} }] }),
            None,
            "$.content[0].name",
            "expected a string, found a number",
        ),
        (
            json!({ "role": "assistant", "content": [1] }),
            Some(Format::Anthropic),
            "$.content[0]",
            "expected an object",
        ),
        (
            json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }),
            None,
            "$.method",
            "only `tools/call`",
        ),
        (
            json!({ "jsonrpc": "2.0", "method": "tools/call", "params": { "name": "x" } }),
            None,
            "$",
            "`id` is missing",
        ),
        (
            json!({ "text": "hi" }),
            Some(Format::Anthropic),
            "$",
            "`content` is missing",
        ),
    ];
    for (document, format, path, message) in cases {
        match agent::parse_calls(&document, format) {
            Err(ParseError::Invalid {
                path: p,
                message: m,
                ..
            }) => {
                assert_eq!(p, path, "{document}");
                assert!(m.contains(message), "{document}: {m}");
            }
            other => panic!("{document}: {other:?}"),
        }
    }

    let duplicate = json!({ "content": [
        { "type": "tool_use", "id": "same", "name": "echo", "input": {} },
        { "type": "tool_use", "id": "same", "name": "echo", "input": {} }
    ] });
    let error = agent::parse_calls(&duplicate, None).unwrap_err();
    assert_eq!(
        error,
        ParseError::DuplicateId {
            format: Format::Anthropic,
            id: "same".into()
        }
    );
}

#[tokio::test]
async fn malformed_arguments_fail_only_their_own_call() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let document = json!({ "role": "assistant", "tool_calls": [
        { "id": "a", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"one\"}" } },
        { "id": "b", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":" } },
        { "id": "c", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"three\"}" } }
    ] });
    let (_, calls) = agent::parse_calls(&document, None).unwrap();
    let results = runner.run(calls).await;
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(results[0].output, "one");
    assert_eq!(results[1].error_kind, Some(ErrorKind::InvalidArguments));
    assert!(
        results[1].output.contains("not valid JSON"),
        "{}",
        results[1].output
    );
    assert_eq!(results[2].output, "three");
    assert!(!results[0].is_error && !results[2].is_error);
}

#[tokio::test]
async fn a_custom_tool_call_gets_an_error_result_of_its_own() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());

    // Chat Completions: a custom call between two function calls.
    let chat = json!({ "role": "assistant", "content": null, "tool_calls": [
        { "id": "a", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"one\"}" } },
        { "id": "b", "type": "custom", "custom": { "name": "echo", "input": "free text" } },
        { "id": "c", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"three\"}" } }
    ] });
    let (format, calls) = agent::parse_calls(&chat, None).unwrap();
    assert_eq!(format, Format::OpenAi);
    assert_eq!(calls[1], ToolCall::custom("b", "echo", "free text"));
    assert_eq!(calls[1].kind, CallKind::Custom);
    assert_eq!(calls[1].arguments, Arguments::Value(json!("free text")));
    assert_eq!(calls[0].kind, CallKind::Function);
    let results = runner.run(calls.clone()).await;
    assert_eq!(results[0].output, "one");
    assert_eq!(results[1].error_kind, Some(ErrorKind::Unsupported));
    assert!(results[1].is_error);
    assert!(
        results[1].output.contains("custom tool"),
        "{}",
        results[1].output
    );
    assert_eq!(results[2].output, "three");
    let rendered = agent::render_results(format, &calls, &results);
    assert_eq!(
        rendered[1],
        json!({ "role": "tool", "tool_call_id": "b", "content": results[1].output })
    );

    // Responses: a custom_tool_call item is answered with a custom_tool_call_output.
    let responses = json!({ "object": "response", "output": [
        { "type": "custom_tool_call", "id": "ctc_1", "call_id": "call_custom", "name": "patch", "input": "*** Begin Patch" },
        { "type": "function_call", "id": "fc_1", "call_id": "call_fn", "name": "echo", "arguments": "{\"text\":\"hi\"}" }
    ] });
    let (format, rendered) = runner.run_document(&responses, None).await.unwrap();
    assert_eq!(format, Format::OpenAiResponses);
    assert_eq!(rendered[0]["type"], "custom_tool_call_output");
    assert_eq!(rendered[0]["call_id"], "call_custom");
    assert!(
        rendered[0]["output"].as_str().unwrap().contains("`patch`"),
        "{rendered}"
    );
    assert_eq!(
        rendered[1],
        json!({ "type": "function_call_output", "call_id": "call_fn", "output": "hi" })
    );

    // A custom call does not make a read-only batch serial, even when it
    // names a tool that writes.
    let batch = [
        call("x", "echo", json!({ "text": "x" })),
        ToolCall::custom("y", "counter", ""),
    ];
    assert!(runner.runs_concurrently(&batch));
}

#[tokio::test]
async fn a_response_with_no_tool_calls_has_an_empty_result_list() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let final_answers = [
        (
            Format::OpenAi,
            json!({ "object": "chat.completion", "choices": [{ "index": 0, "finish_reason": "stop",
                "message": { "role": "assistant", "content": "Done.", "refusal": null } }] }),
            json!([]),
        ),
        (
            Format::OpenAiResponses,
            json!({ "object": "response", "output": [{ "type": "message", "id": "msg_1", "role": "assistant",
                "status": "completed", "content": [{ "type": "output_text", "text": "Done.", "annotations": [] }] }] }),
            json!([]),
        ),
        (
            Format::Anthropic,
            json!({ "type": "message", "role": "assistant", "content": [{ "type": "text", "text": "Done." }],
                "stop_reason": "end_turn" }),
            json!({ "role": "user", "content": [] }),
        ),
    ];
    for (format, document, expected) in final_answers {
        assert_eq!(
            agent::parse_calls(&document, None).unwrap(),
            (format, vec![])
        );
        let (detected, rendered) = runner.run_document(&document, None).await.unwrap();
        assert_eq!((detected, rendered), (format, expected));
    }
    assert_eq!(
        runner
            .run_document(&json!([]), Some(Format::Mcp))
            .await
            .unwrap(),
        (Format::Mcp, json!([]))
    );
}

#[test]
fn only_the_first_choice_of_a_chat_completion_is_read() {
    let mut completion = openai_completion();
    let mut second = completion["choices"][0].clone();
    second["index"] = json!(1);
    second["message"]["tool_calls"] = json!([
        { "id": "call_other", "type": "function", "function": { "name": "counter", "arguments": "{}" } }
    ]);
    completion["choices"].as_array_mut().unwrap().push(second);
    let (_, calls) = agent::parse_calls(&completion, None).unwrap();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.id != "call_other"));
}

// ---------------------------------------------------------------------------
// Batches

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_batch_runs_concurrently_in_order() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let calls: Vec<ToolCall> = ["a", "b", "c"]
        .into_iter()
        .map(|text| call(text, "echo", json!({ "text": text, "sleep_ms": 500 })))
        .collect();
    assert!(runner.runs_concurrently(&calls));
    let started = Instant::now();
    let results = runner.run(calls).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1200),
        "three 500 ms calls took {elapsed:?}"
    );
    let outputs: Vec<&str> = results.iter().map(|r| r.output.as_str()).collect();
    assert_eq!(outputs, ["a", "b", "c"]);
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_cap_bounds_a_read_only_batch() {
    let runner = Runner::new(echo_registry().await)
        .permissions(Permissions::allow_all())
        .concurrency(2);
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| {
            call(
                &format!("c{i}"),
                "echo",
                json!({ "text": i.to_string(), "sleep_ms": 300 }),
            )
        })
        .collect();
    let started = Instant::now();
    let results = runner.run(calls.clone()).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(600),
        "two rounds of 300 ms took {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1100),
        "two rounds of 300 ms took {elapsed:?}"
    );
    assert!(results.iter().all(|r| !r.is_error));
    assert!(
        !runner.clone().concurrency(0).runs_concurrently(&calls),
        "a cap of 0 counts as 1: serial"
    );
}

#[tokio::test]
async fn a_batch_with_a_writing_tool_runs_serially_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let builder = builder()
        .limits(quick_limits())
        .mount(Mount::read_write(dir.path(), "/scratch"));
    let registry =
        Arc::new(registry(builder, &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE]).await);
    let runner = Runner::new(registry).permissions(Permissions::allow_all());
    let calls = vec![
        call(
            "w",
            "misbehave",
            json!({ "mode": "write", "path": "/scratch/note.txt", "content": "written first" }),
        ),
        call(
            "r",
            "misbehave",
            json!({ "mode": "read", "path": "/scratch/note.txt" }),
        ),
        call(
            "e",
            "echo",
            json!({ "text": "read-only, but in a mixed batch" }),
        ),
    ];
    assert!(!runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "written", "{}", results[0].output);
    assert_eq!(
        results[1].output, "written first",
        "the read sees the write"
    );
    assert!(!results[2].is_error);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "written first"
    );

    // Serial means one after the other: two 300 ms calls take 600 ms.
    let calls = vec![
        call("s1", "echo", json!({ "text": "x", "sleep_ms": 300 })),
        call("s2", "misbehave", json!({ "mode": "sleep", "amount": 300 })),
    ];
    let started = Instant::now();
    let results = runner.run(calls).await;
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(results[1].output, "woke up");
}

#[tokio::test]
async fn an_unknown_tool_does_not_make_a_batch_serial() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let calls = vec![
        call("1", "echo", json!({ "text": "x" })),
        call("2", "nope", json!({})),
    ];
    assert!(runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "x");
    assert_eq!(results[1].error_kind, Some(ErrorKind::NotFound));
    assert_eq!(results[1].call_id, "2");
    assert!(runner.run(Vec::new()).await.is_empty());
}

// ---------------------------------------------------------------------------
// Permissions

#[test]
fn the_most_specific_rule_wins() {
    let rules = Permissions::from_rules(
        "allow",
        [
            ("default", "ask"),
            ("*", "allow"),
            ("write_*", "ask"),
            ("write_file*", "deny"),
            ("write_file_safe", "allow"),
            ("*_file", "allow"),
            ("edit_file", "deny"),
            ("*tmp", "allow"),
            ("rm_*", "deny"),
        ],
    )
    .unwrap();
    assert_eq!(
        rules.default_permission(),
        Permission::Ask,
        "the `default` key sets the default"
    );
    assert_eq!(
        rules.permission_for("read_file"),
        Permission::Allow,
        "`*_file`"
    );
    assert_eq!(
        rules.permission_for("write_log"),
        Permission::Ask,
        "`write_*` beats `*`"
    );
    assert_eq!(
        rules.permission_for("write_files"),
        Permission::Deny,
        "`write_file*` beats `write_*`"
    );
    assert_eq!(
        rules.permission_for("write_file_safe"),
        Permission::Allow,
        "exact beats every wildcard"
    );
    assert_eq!(
        rules.permission_for("edit_file"),
        Permission::Deny,
        "exact beats `*_file`"
    );
    assert_eq!(
        rules.permission_for("rm_tmp"),
        Permission::Deny,
        "a tie between `rm_*` and `*tmp`: deny wins"
    );
    assert_eq!(
        rules.permission_for("anything"),
        Permission::Allow,
        "`*` beats the default"
    );

    let no_star = Permissions::from_rules("deny", [("echo", "allow")]).unwrap();
    assert_eq!(no_star.permission_for("echo"), Permission::Allow);
    assert_eq!(
        no_star.permission_for("echo2"),
        Permission::Deny,
        "no rule: the default"
    );
    assert_eq!(no_star.default_permission(), Permission::Deny);

    let replaced = Permissions::allow_all()
        .rule("x", Permission::Deny)
        .unwrap()
        .rule("x", Permission::Ask)
        .unwrap();
    assert_eq!(
        replaced.permission_for("x"),
        Permission::Ask,
        "a later rule for the same pattern replaces it"
    );
}

#[test]
fn bad_rules_are_errors_naming_the_key() {
    let error = Permissions::from_rules("allow", [("edit_file", "nope")]).unwrap_err();
    assert_eq!(
        error,
        PermissionsError::Value {
            key: "edit_file".into(),
            value: "nope".into()
        }
    );
    assert!(
        error.to_string().contains("`edit_file`") && error.to_string().contains("\"nope\""),
        "{error}"
    );
    let error = Permissions::from_rules("sometimes", Vec::<(String, String)>::new()).unwrap_err();
    assert!(
        matches!(&error, PermissionsError::Value { key, .. } if key == "default"),
        "{error:?}"
    );
    let error = Permissions::from_rules("allow", [("default", "Allow")]).unwrap_err();
    assert!(
        matches!(&error, PermissionsError::Value { key, .. } if key == "default"),
        "{error:?}"
    );
    for pattern in ["", "write file", "fs/*", "écrire", "a?b"] {
        let error = Permissions::from_rules("allow", [(pattern, "deny")]).unwrap_err();
        assert_eq!(
            error,
            PermissionsError::Pattern {
                pattern: pattern.into()
            }
        );
    }
    assert_eq!("ask".parse::<Permission>(), Ok(Permission::Ask));
    assert!("ASK".parse::<Permission>().is_err());
}

#[tokio::test]
async fn a_runner_denies_everything_by_default() {
    let runner = Runner::new(echo_registry().await);
    let results = runner
        .run(vec![call("1", "echo", json!({ "text": "x" }))])
        .await;
    assert_eq!(results[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(results[0].is_error);
    assert_eq!(results[0].fuel_used, 0, "the tool never ran");
}

#[tokio::test]
async fn allow_deny_and_ask_decide_which_calls_run() {
    let permissions = Permissions::deny_all()
        .rule("echo", Permission::Allow)
        .unwrap()
        .rule("fail", Permission::Deny)
        .unwrap()
        .rule("count*", Permission::Ask)
        .unwrap();
    let asked: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let approver = {
        let asked = asked.clone();
        move |request: ApprovalRequest| {
            asked.lock().unwrap().push(request.clone());
            async move {
                match request.call_id.as_str() {
                    "yes" => Approval::Approve,
                    _ => Approval::Refuse {
                        reason: Some("not now".into()),
                    },
                }
            }
        }
    };
    let runner = Runner::new(echo_registry().await)
        .permissions(permissions.clone())
        .approver(approver);
    let calls = vec![
        call("allowed", "echo", json!({ "text": "ok" })),
        call("denied", "fail", json!({})),
        call("yes", "counter", json!({})),
        call("no", "counter", json!({ "why": 1 })),
        call("default", "bad_details", json!({})),
        call("unknown", "ech0", json!({})),
        ToolCall::new("not-json", "counter", "{oops"),
    ];
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "ok");

    assert_eq!(results[1].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(
        results[1].output.contains("does not allow calls to `fail`"),
        "{}",
        results[1].output
    );
    assert!(
        results[1].output.contains("Do not retry"),
        "{}",
        results[1].output
    );
    assert_eq!(results[1].fuel_used, 0);

    assert_eq!(results[2].output, "1", "approved");
    assert_eq!(
        results[3].error_kind,
        Some(ErrorKind::PermissionDenied),
        "refused"
    );
    assert!(
        results[3].output.contains("The user refused"),
        "{}",
        results[3].output
    );
    assert!(
        results[3].output.contains("They said: not now"),
        "{}",
        results[3].output
    );

    assert_eq!(
        results[4].error_kind,
        Some(ErrorKind::PermissionDenied),
        "the default is deny"
    );
    assert_eq!(
        results[5].error_kind,
        Some(ErrorKind::NotFound),
        "an unknown tool is not found, not asked about"
    );
    assert_eq!(
        results[6].error_kind,
        Some(ErrorKind::InvalidArguments),
        "not JSON: not asked about"
    );

    let asked = asked.lock().unwrap().clone();
    let ids: Vec<&str> = asked.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(
        ids,
        ["yes", "no"],
        "asked in order, and only about `ask` calls"
    );
    assert_eq!(asked[1].tool, "counter");
    assert_eq!(asked[1].arguments, json!({ "why": 1 }));
    assert_eq!(asked[1].info.descriptor.name, "counter");
    assert_eq!(asked[1].info.component, "fixture_echo");

    // Without an approver, `ask` denies.
    let runner = Runner::new(echo_registry().await).permissions(permissions);
    let results = runner.run(vec![call("1", "counter", json!({}))]).await;
    assert_eq!(results[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(
        results[0].output.contains("no one can approve"),
        "{}",
        results[0].output
    );
}

#[tokio::test]
async fn after_a_denial_the_rest_of_the_batch_can_be_skipped() {
    let permissions = Permissions::allow_all()
        .rule("fail", Permission::Deny)
        .unwrap();
    let calls = vec![
        call("1", "echo", json!({ "text": "before" })),
        call("2", "fail", json!({})),
        call("3", "echo", json!({ "text": "after" })),
        call("4", "counter", json!({})),
    ];
    let runner = Runner::new(echo_registry().await).permissions(permissions);

    let results = runner.run(calls.clone()).await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [None, Some(ErrorKind::PermissionDenied), None, None],
        "continue is the default"
    );

    let results = runner
        .clone()
        .on_denial(OnDenial::SkipRest)
        .run(calls)
        .await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::Cancelled),
            Some(ErrorKind::Cancelled)
        ]
    );
    assert!(
        results[2].output.contains("call to `fail` (id 2)"),
        "{}",
        results[2].output
    );
    assert_eq!(results[3].fuel_used, 0);

    // The same in a concurrent (read-only) batch: later calls are skipped.
    let permissions = Permissions::allow_all()
        .rule("echo", Permission::Ask)
        .unwrap();
    let runner = Runner::new(echo_registry().await)
        .permissions(permissions)
        .on_denial(OnDenial::SkipRest)
        .approver(|request: ApprovalRequest| async move {
            if request.arguments["text"] == "refuse me" {
                Approval::Refuse { reason: None }
            } else {
                Approval::Approve
            }
        });
    let calls = vec![
        call("a", "echo", json!({ "text": "fine" })),
        call("b", "echo", json!({ "text": "refuse me" })),
        call("c", "echo", json!({ "text": "fine too" })),
    ];
    assert!(runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::Cancelled)
        ]
    );
    assert_eq!(results[0].output, "fine");
}

// ---------------------------------------------------------------------------
// Cancellation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_batch_stops_the_running_call_and_skips_the_rest() {
    let limits = Limits {
        fuel: None,
        timeout: Duration::from_secs(30),
        ..quick_limits()
    };
    let registry = Arc::new(
        registry(
            builder().limits(limits),
            &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
        )
        .await,
    );
    let token = CancelToken::new();
    let events = Events::default();
    let runner = Runner::new(registry)
        .permissions(Permissions::allow_all())
        .cancel_token(token.clone())
        .on_event(events.sink());
    let calls = vec![
        call("loop", "misbehave", json!({ "mode": "loop" })),
        call("next", "echo", json!({ "text": "x" })),
    ];
    let batch = tokio::spawn(async move { runner.run(calls).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cancelled_at = Instant::now();
    token.cancel();
    let results = batch.await.unwrap();
    let latency = cancelled_at.elapsed();
    assert!(latency < Duration::from_millis(100), "took {latency:?}");
    assert_eq!(
        results[0].error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        results[0].output
    );
    assert!(results[0].fuel_used > 0, "it ran");
    assert_eq!(results[1].error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        results[1].output,
        "The call was cancelled before it started."
    );
    assert_eq!(results[1].fuel_used, 0);
    let kinds: Vec<&str> = events.of("next").iter().map(AgentEvent::kind).collect();
    assert_eq!(kinds, ["tool_call", "tool_result"], "no guest ran: no logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_concurrent_batch_cancels_every_call() {
    let token = CancelToken::new();
    let runner = Runner::new(echo_registry().await)
        .permissions(Permissions::allow_all())
        .concurrency(2)
        .cancel_token(token.clone());
    let calls: Vec<ToolCall> = (0..3)
        .map(|i| {
            call(
                &i.to_string(),
                "echo",
                json!({ "text": "x", "sleep_ms": 1500 }),
            )
        })
        .collect();
    assert!(runner.runs_concurrently(&calls));
    let started = Instant::now();
    let batch = tokio::spawn(async move { runner.run(calls).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    token.cancel();
    let results = batch.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        results
            .iter()
            .all(|r| r.error_kind == Some(ErrorKind::Cancelled)),
        "{results:?}"
    );
    let not_started = results
        .iter()
        .filter(|r| r.output == "The call was cancelled before it started.")
        .count();
    assert_eq!(
        not_started, 1,
        "the call waiting for a slot never started: {results:?}"
    );
}

// ---------------------------------------------------------------------------
// Events

/// A runner of the echo registry that refuses calls to `fail`.
async fn runner_refusing_fail() -> Runner {
    let permissions = Permissions::allow_all()
        .rule("fail", Permission::Deny)
        .unwrap();
    Runner::new(echo_registry().await).permissions(permissions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_arrive_in_order_for_each_call() {
    let events = Events::default();
    let runner = runner_refusing_fail().await.on_event(events.sink());
    let calls = vec![
        call("a", "echo", json!({ "text": "a", "sleep_ms": 50 })),
        call("b", "echo", json!({ "text": "bb", "sleep_ms": 50 })),
        ToolCall::new("c", "echo", r#"{"text": "#),
    ];
    assert!(runner.runs_concurrently(&calls));
    runner.run(calls).await;
    for (id, text) in [("a", "a"), ("b", "bb")] {
        let mine = events.of(id);
        let kinds: Vec<&str> = mine.iter().map(AgentEvent::kind).collect();
        assert_eq!(
            kinds,
            ["tool_call", "tool_log", "tool_progress", "tool_result"],
            "{mine:?}"
        );
        assert!(
            mine.windows(2)
                .all(|w| w[0].timestamp_ms() <= w[1].timestamp_ms())
        );
        assert!(mine.iter().all(|e| e.tool() == "echo"));
        let call = serde_json::to_value(&mine[0]).unwrap();
        assert_eq!(call["type"], "tool_call");
        assert_eq!(call["call_id"], id);
        assert_eq!(call["arguments"], json!({ "text": text, "sleep_ms": 50 }));
        let log = serde_json::to_value(&mine[1]).unwrap();
        assert_eq!(log["level"], "info");
        assert_eq!(log["message"], format!("echoing {} bytes", text.len()));
        let progress = serde_json::to_value(&mine[2]).unwrap();
        assert_eq!(progress["message"], "sleeping");
        assert_eq!(progress["fraction"], 0.5);
        let result = serde_json::to_value(&mine[3]).unwrap();
        let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "type",
                "call_id",
                "tool",
                "timestamp_ms",
                "is_error",
                "error_kind",
                "output",
                "details",
                "metrics"
            ]
        );
        assert_eq!(result["output"], text);
        assert_eq!(result["metrics"]["cached"], false);
        assert!(
            result["metrics"]["duration_ms"].as_f64().unwrap() >= 50.0,
            "{result}"
        );
        assert!(
            result["metrics"]["fuel_used"].as_u64().unwrap() > 0,
            "{result}"
        );
    }
    let bad = events.of("c");
    assert_eq!(bad.len(), 2);
    assert_eq!(
        serde_json::to_value(&bad[0]).unwrap()["arguments"],
        r#"{"text": "#,
        "text that is not JSON"
    );
    assert_eq!(
        serde_json::to_value(&bad[1]).unwrap()["error_kind"],
        "invalid_arguments"
    );

    // A refused call has its two events too, in a serial batch.
    let events = Events::default();
    let runner = runner.on_event(events.sink());
    runner
        .run(vec![
            call("f", "fail", json!({})),
            call("e", "echo", json!({ "text": "e" })),
        ])
        .await;
    let order: Vec<String> = events
        .all()
        .iter()
        .map(|e| format!("{} {}", e.call_id(), e.kind()))
        .collect();
    assert_eq!(
        order,
        [
            "f tool_call",
            "f tool_result",
            "e tool_call",
            "e tool_log",
            "e tool_result"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_event_subscriber_gets_only_what_the_guest_reports() {
    let events = Events::default();
    let runner = runner_refusing_fail().await.on_guest_event(events.sink());
    let results = runner
        .run(vec![
            call("a", "echo", json!({ "text": "a", "sleep_ms": 10 })),
            call("f", "fail", json!({})),
            ToolCall::new("c", "echo", r#"{"text": "#),
        ])
        .await;
    assert_eq!(results[0].output, "a", "the call ran as usual");
    let order: Vec<String> = events
        .all()
        .iter()
        .map(|e| format!("{} {}", e.call_id(), e.kind()))
        .collect();
    // No call or result events: none at all for the refused call, nor for
    // the one whose arguments are not JSON (no guest ran for either).
    assert_eq!(order, ["a tool_log", "a tool_progress"]);

    // `on_event` replaces it, with every event again.
    let events = Events::default();
    let runner = runner.on_event(events.sink());
    runner
        .run(vec![call("a", "echo", json!({ "text": "a" }))])
        .await;
    let kinds: Vec<&str> = events.all().iter().map(AgentEvent::kind).collect();
    assert_eq!(kinds, ["tool_call", "tool_log", "tool_result"]);
}

// ---------------------------------------------------------------------------
// The result cache

#[tokio::test]
async fn the_cache_serves_repeated_read_only_idempotent_calls() {
    let cache = ResultCache::new(16);
    let events = Events::default();
    let registry = echo_and_misbehave().await;
    let runner = Runner::new(registry)
        .permissions(Permissions::allow_all())
        .cache(cache.clone())
        .on_event(events.sink());

    let first = runner
        .run_reports(vec![ToolCall::new(
            "1",
            "echo",
            r#"{"text": "ab", "repeat": 2}"#,
        )])
        .await;
    assert!(!first[0].metrics.cached);
    assert!(first[0].result.fuel_used > 0);
    assert_eq!(cache.len(), 1);

    // The same arguments with the keys the other way round: a hit.
    let second = runner
        .run_reports(vec![call(
            "2",
            "echo",
            json!({ "repeat": 2, "text": "ab" }),
        )])
        .await;
    assert!(second[0].metrics.cached, "a hit");
    assert_eq!(second[0].result.output, "abab");
    assert_eq!(second[0].result.details, first[0].result.details);
    assert_eq!(
        second[0].result.call_id, "2",
        "the hit carries its own call id"
    );
    assert_eq!(second[0].result.fuel_used, 0);
    assert_eq!(second[0].metrics.fuel_used, 0);
    let result_event = serde_json::to_value(events.of("2").last().unwrap()).unwrap();
    assert_eq!(result_event["metrics"]["cached"], true);
    assert_eq!(events.of("2").len(), 2, "no guest ran: no logs or progress");

    // Different arguments: a miss.
    let third = runner
        .run_reports(vec![call("3", "echo", json!({ "text": "ab" }))])
        .await;
    assert!(!third[0].metrics.cached);
    assert_eq!(third[0].result.output, "ab");
    assert_eq!(cache.len(), 2);

    // Not cached: a tool that is not read-only, one without hints, errors.
    let uncached = vec![
        call("m", "misbehave", json!({ "mode": "spin", "amount": 10 })),
        call("c", "counter", json!({})),
        call("e", "echo", json!({ "text": "ab", "repeat": 0 })),
    ];
    for _ in 0..2 {
        let reports = runner.run_reports(uncached.clone()).await;
        assert!(reports.iter().all(|r| !r.metrics.cached), "{reports:?}");
    }
    assert_eq!(cache.len(), 2);

    // The cache is opt-in.
    let plain = Runner::new(echo_and_misbehave().await).permissions(Permissions::allow_all());
    for _ in 0..2 {
        let reports = plain
            .run_reports(vec![call("p", "echo", json!({ "text": "ab" }))])
            .await;
        assert!(!reports[0].metrics.cached);
    }
}

#[tokio::test]
async fn a_changed_component_misses_the_cache() {
    let original = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let changed = toolcage_tests::with_custom_section(
        original.clone(),
        "toolcage-test",
        b"a different build",
    );
    let cache = ResultCache::new(16);
    let mut runs = Vec::new();
    for bytes in [original, changed] {
        let mut registry = builder().limits(quick_limits()).build().unwrap();
        let report = registry.load_bytes("echo", bytes).await;
        assert!(report.is_ok(), "{:?}", report.error);
        let registry = Arc::new(registry);
        let runner = Runner::new(registry.clone())
            .permissions(Permissions::allow_all())
            .cache(cache.clone());
        let echo = || vec![call("x", "echo", json!({ "text": "same" }))];
        let first = runner.run_reports(echo()).await.remove(0);
        let second = runner.run_reports(echo()).await.remove(0);
        assert_eq!(first.result.output, "same");
        assert_eq!(second.result.output, "same");
        runs.push((
            registry.tool("echo").unwrap().component_hash.clone(),
            first.metrics.cached,
            second.metrics.cached,
        ));
    }
    assert_ne!(runs[0].0, runs[1].0, "the custom section changes the hash");
    assert_eq!((runs[0].1, runs[0].2), (false, true), "miss, then hit");
    assert_eq!(
        (runs[1].1, runs[1].2),
        (false, true),
        "the changed component misses, then hits its own entry"
    );
    assert_eq!(cache.len(), 2);
}
