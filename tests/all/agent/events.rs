//! A runner's events, in order for each call, and a subscriber that gets
//! only what the guest reports.

use super::*;

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
