//! A stdio server's tools answer through the one call path: registered
//! under its prefix, validated, cancelled or timed out, permission-checked,
//! callable from code mode, with its progress and logs as the call's events;
//! a server that never starts is reported while the others serve.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::agent::{Permission, Permissions, Runner, ToolCall};
use toolcage::upstream::UpstreamServer;
use toolcage::{CallOptions, CallPolicy, CancelToken, ErrorKind, GuestEvent};
use toolcage_tests::{assert_error, assert_loaded, builder};

use super::{everything, hostile, registry_with};

#[tokio::test]
async fn everythings_tools_are_registered_under_its_prefix_and_answer() {
    let registry = registry_with(&everything()).await;
    let echo = registry.tool("mcp__everything__echo").expect("echo");
    assert_eq!(echo.component, "mcp:everything");
    assert_eq!(echo.source.to_string(), "mcp:everything");
    assert!(echo.descriptor.hints.read_only && echo.descriptor.hints.idempotent);
    assert!(!echo.descriptor.hints.destructive);

    let result = registry
        .call("mcp__everything__echo", json!({ "message": "hi" }))
        .await;
    assert_eq!(result.output, "Echo: hi", "{result:?}");
    let result = registry
        .call("mcp__everything__get-sum", json!({ "a": 2, "b": 3 }))
        .await;
    assert_eq!(result.output, "The sum of 2 and 3 is 5.", "{result:?}");

    // Structured content is the details, checked against the tool's own
    // output schema.
    let result = registry
        .call(
            "mcp__everything__get-structured-content",
            json!({ "location": "Chicago" }),
        )
        .await;
    assert!(!result.is_error, "{result:?}");
    let details = result.details.expect("structured content");
    assert!(details["temperature"].is_number(), "{details}");

    // An image is named in the output and kept whole in the details.
    let result = registry
        .call("mcp__everything__get-tiny-image", json!({}))
        .await;
    assert!(
        result.output.contains("[image: image/png, "),
        "{}",
        result.output
    );
    let content = &result.details.expect("details")["content"];
    assert_eq!(content[0]["type"], "image", "{content}");

    // Its long-running operation's progress notifications are the call's
    // progress events.
    let progress = Arc::new(Mutex::new(Vec::new()));
    let sink = progress.clone();
    let options = CallOptions::new().on_event(move |event| {
        if let GuestEvent::Progress { fraction, .. } = event {
            sink.lock().unwrap().push(fraction);
        }
    });
    let result = registry
        .call_with(
            "mcp__everything__trigger-long-running-operation",
            json!({ "duration": 1, "steps": 4 }),
            options,
        )
        .await;
    assert!(!result.is_error, "{result:?}");
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 4, "{progress:?}");
    assert_eq!(progress.last(), Some(&Some(1.0)), "{progress:?}");

    // Bad arguments never reach the server: the model gets every error.
    let result = registry
        .call("mcp__everything__get-sum", json!({ "a": "two" }))
        .await;
    assert_error(&result, ErrorKind::InvalidArguments);
    assert!(
        result.output.contains("\"b\" is a required property"),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn a_long_call_is_cancelled_or_timed_out_and_the_server_keeps_serving() {
    let server = everything().timeout(Duration::from_millis(800));
    let registry = registry_with(&server).await;
    let long = json!({ "duration": 30, "steps": 30 });

    let cancel = CancelToken::new();
    let options = CallOptions::new().cancel_token(cancel.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let result = registry
        .call_with(
            "mcp__everything__trigger-long-running-operation",
            long.clone(),
            options,
        )
        .await;
    canceller.await.unwrap();
    assert_error(&result, ErrorKind::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(5));

    let result = registry
        .call("mcp__everything__trigger-long-running-operation", long)
        .await;
    assert_error(&result, ErrorKind::Timeout);
    assert!(
        result.output.contains("did not answer within"),
        "{}",
        result.output
    );

    let result = registry
        .call("mcp__everything__echo", json!({ "message": "still here" }))
        .await;
    assert_eq!(result.output, "Echo: still here", "{result:?}");
}

#[tokio::test]
async fn upstreams_that_never_start_are_reported_and_the_others_serve() {
    let silent = hostile("silent")
        .args(["silent"])
        .startup_timeout(Duration::from_millis(1500));
    let missing = UpstreamServer::stdio("missing", "no-such-program-anywhere").unwrap();
    let server = hostile("h");
    let mut registry = builder().build().unwrap();
    let started = Instant::now();
    let reports = registry.load_mcp_servers(&[silent, missing, server]).await;
    // Started at once: the silent one costs its start-up timeout, once.
    assert!(started.elapsed() < Duration::from_secs(10));
    let error = reports[0].error.as_ref().expect("silent").to_string();
    assert!(error.contains("did not initialize within"), "{error}");
    let error = reports[1].error.as_ref().expect("missing").to_string();
    assert!(error.contains("is not on PATH"), "{error}");
    assert_loaded(&reports[2]);
    // The tool with a broken schema is skipped; the others load and serve.
    assert!(registry.tool("mcp__h__bad_schema").is_none());
    let result = registry.call("mcp__h__echo", json!({ "text": "x" })).await;
    assert_eq!(result.output, "x", "{result:?}");
}

#[tokio::test]
async fn permission_rules_and_code_mode_reach_upstream_tools() {
    let mut registry = builder().build().unwrap();
    for report in registry.load_bundled().await {
        assert_loaded(&report);
    }
    assert_loaded(&registry.load_mcp_server(&everything()).await);
    let registry = Arc::new(registry);

    let rules = Permissions::allow_all()
        .rule("mcp__everything__get-sum", Permission::Deny)
        .unwrap();
    let rules = Arc::new(rules);
    let runner = Runner::new(registry.clone()).permissions(rules.clone());
    let results = runner
        .run([
            ToolCall::new("c1", "mcp__everything__get-sum", json!({ "a": 1, "b": 2 })),
            ToolCall::new("c2", "mcp__everything__echo", json!({ "message": "ok" })),
        ])
        .await;
    assert_error(&results[0], ErrorKind::PermissionDenied);
    assert_eq!(results[1].output, "Echo: ok", "{:?}", results[1]);

    // A script calls upstream tools as functions (a kebab-case name with
    // `_`), through the same rules: a denied tool is not even there.
    let code = "a = await mcp__everything__echo(message='from a script')\n\
                w = await mcp__everything__get_structured_content(location='Chicago')\n\
                try:\n    await mcp__everything__get_sum(a=1, b=2)\n    c = 'ran'\n\
                except NameError:\n    c = 'hidden'\n\
                [a, 'temperature' in w, c]";
    let options = CallOptions::new().policy(CallPolicy::new(rules));
    let result = registry
        .call_with("run_code", json!({ "code": code }), options)
        .await;
    assert!(!result.is_error, "{result:?}");
    let value = &result.details.expect("details")["result"];
    assert_eq!(
        value,
        &json!(["Echo: from a script", true, "hidden"]),
        "{value}"
    );
}

#[tokio::test]
async fn progress_and_log_notifications_become_the_calls_events() {
    let registry = registry_with(&hostile("h")).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = CallOptions::new().on_event(move |event| sink.lock().unwrap().push(event));
    let result = registry
        .call_with("mcp__h__steps", json!({ "count": 3 }), options)
        .await;
    assert_eq!(result.output, "done", "{result:?}");
    let seen = seen.lock().unwrap();
    let progress: Vec<_> = seen
        .iter()
        .filter_map(|event| match event {
            GuestEvent::Progress { message, fraction } => Some((message.clone(), *fraction)),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        [1, 2, 3].map(|i| (format!("step {i}"), Some(i as f32 / 3.0))),
        "{seen:?}"
    );
    let logs = seen
        .iter()
        .filter(|event| matches!(event, GuestEvent::Log { message, .. } if message.contains("did step")))
        .count();
    assert_eq!(logs, 3, "{seen:?}");
}
