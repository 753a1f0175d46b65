//! What a provider document holds besides good calls: malformed arguments,
//! custom tool calls, no calls at all; each gets a result of its own.

use super::*;

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
