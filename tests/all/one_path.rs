//! The one call path: every entry (the library's `Registry::call` given the
//! rules, a `Runner`, a batch, and the CLI's `call` and `run-calls`) checks
//! the same rules the same way, so one `deny` rule refuses the call through
//! each of them with the same answer. (Over MCP, the same rule refuses
//! `counter` in `tests/clients/test_mcp.py`, through the MCP Python SDK.)

use std::sync::Arc;

use serde_json::{Value, json};
use toolcage::agent::{Format, Permission, Permissions, Runner, ToolCall};
use toolcage::{CallOptions, CallPolicy, ErrorKind, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry, toolcage};

const REFUSAL: &str = "The operator does not allow calls to `echo` (permission denied).";

async fn echo_registry() -> Arc<Registry> {
    Arc::new(registry(builder().limits(quick_limits()), &[guests::FIXTURE_ECHO]).await)
}

fn rules() -> Arc<Permissions> {
    let rules = Permissions::allow_all().rule("echo", Permission::Deny);
    Arc::new(rules.expect("a valid rule"))
}

fn hi() -> Value {
    json!({ "text": "hi" })
}

#[tokio::test]
async fn one_deny_rule_refuses_the_call_through_the_library_a_runner_and_a_batch() {
    let registry = echo_registry().await;

    // The embedder's own call, with no rules given: allowed.
    let result = registry.call("echo", hi()).await;
    assert_eq!(result.output, "hi", "{result:?}");
    // Given the rules, the same call is refused, before it runs.
    let options = CallOptions::new().policy(CallPolicy::new(rules()));
    let result = registry.call_with("echo", hi(), options).await;
    assert_eq!(result.error_kind, Some(ErrorKind::PermissionDenied));
    assert!(result.output.starts_with(REFUSAL), "{}", result.output);
    assert_eq!(result.fuel_used, 0);

    let runner = Runner::new(registry.clone()).permissions(rules());
    let result = runner
        .run([ToolCall::new("c1", "echo", hi())])
        .await
        .remove(0);
    assert_eq!(result.error_kind, Some(ErrorKind::PermissionDenied));
    assert!(result.output.starts_with(REFUSAL), "{}", result.output);

    // A batch in a provider's format: the denied call is refused, the one
    // beside it runs.
    let response = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "m",
        "content": [
            { "type": "tool_use", "id": "toolu_1", "name": "echo", "input": hi() },
            { "type": "tool_use", "id": "toolu_2", "name": "counter", "input": {} }
        ],
        "stop_reason": "tool_use"
    });
    let (format, reply) = runner
        .run_document(&response, Some(Format::Anthropic))
        .await
        .expect("an Anthropic response");
    assert_eq!(format, Format::Anthropic);
    let content = &reply["content"];
    assert_eq!(content[0]["is_error"], true, "{reply}");
    let text = content[0]["content"].as_str().expect("text");
    assert!(text.starts_with(REFUSAL), "{text}");
    assert_ne!(content[1]["is_error"], true, "{reply}");
}

#[test]
fn one_deny_rule_refuses_the_call_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    std::fs::write(
        dir.path().join("toolcage.toml"),
        "[permissions]\ndefault = \"allow\"\necho = \"deny\"\n",
    )
    .unwrap();
    let cli = |args: &[&str]| {
        let output = toolcage()
            .args(["--no-bundled", "--tools"])
            .arg(dir.path())
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let json: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code(), json)
    };
    let arguments = hi().to_string();

    // The operator's own call: allowed, as documented.
    let (status, result) = cli(&["--json", "call", "echo", &arguments]);
    assert_eq!(
        (status, &result["output"]),
        (Some(0), &json!("hi")),
        "{result}"
    );
    // Asked to check the rules, the same call is refused.
    let (status, result) = cli(&["--json", "call", "--check-permissions", "echo", &arguments]);
    assert_eq!(status, Some(1), "{result}");
    assert_eq!(result["error_kind"], "permission_denied", "{result}");
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.starts_with(REFUSAL), "{output}");

    // A model's batch always is.
    let response = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "m",
        "content": [{ "type": "tool_use", "id": "toolu_1", "name": "echo", "input": hi() }],
        "stop_reason": "tool_use"
    });
    let file = dir.path().join("response.json");
    std::fs::write(&file, response.to_string()).unwrap();
    let (_, report) = cli(&["--json", "run-calls", file.to_str().unwrap()]);
    assert_eq!(
        report["calls"][0]["error_kind"], "permission_denied",
        "{report}"
    );
}
