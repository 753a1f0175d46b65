//! Provider formats: names, definitions and results against the golden files,
//! and parsing each provider's documents, or saying where one is invalid.

use super::*;

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
        let definitions = agent::definitions(&registry, &Permissions::allow_all(), format);
        assert_eq!(
            definitions.as_array().unwrap().len(),
            4,
            "echo, counter, fail, bad_details"
        );
        golden(&format!("definitions.{format}.json"), &definitions);
    }
    // Spot checks of each shape, beyond the golden files.
    let openai = agent::definitions(&registry, &Permissions::allow_all(), Format::OpenAi);
    assert_eq!(openai[0]["function"]["name"], "echo");
    assert_eq!(
        openai[0]["function"]["parameters"]["required"],
        json!(["text"])
    );
    let responses = agent::definitions(
        &registry,
        &Permissions::allow_all(),
        Format::OpenAiResponses,
    );
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
    let anthropic = agent::definitions(&registry, &Permissions::allow_all(), Format::Anthropic);
    let keys: Vec<&String> = anthropic[1].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "description", "input_schema"]);
    let mcp = agent::definitions(&registry, &Permissions::allow_all(), Format::Mcp);
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
