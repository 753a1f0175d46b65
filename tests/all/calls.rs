//! The call path: lookup, argument parsing and validation, outcomes, events,
//! cancellation, and isolation between calls.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{CallOptions, CancelToken, ErrorKind, GuestEvent, Limits, Registry};
use toolcage_tests::{assert_error, builder, guests, quick_limits, registry};

async fn echo() -> Registry {
    registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
    )
    .await
}

#[tokio::test]
async fn a_good_call_returns_output_and_details() {
    let registry = echo().await;
    let result = registry
        .call("echo", r#"{"text": "hi", "repeat": 3}"#)
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.error_kind, None);
    assert_eq!(result.output, "hihihi");
    assert_eq!(result.details, Some(json!({ "length": 6 })));
    assert!(result.fuel_used > 0);
    assert_eq!(result.tool, "echo");
    assert!(result.call_id.starts_with("call-"));
}

#[tokio::test]
async fn validation_reports_every_failing_path() {
    let registry = echo().await;
    let result = registry
        .call(
            "echo",
            json!({ "repeat": 0, "sleep_ms": "soon", "extra": true }),
        )
        .await;
    assert_eq!(result.error_kind, Some(ErrorKind::InvalidArguments));
    let lines: Vec<&str> = result
        .output
        .lines()
        .filter(|l| l.starts_with("- "))
        .collect();
    assert_eq!(lines.len(), 4, "{}", result.output);
    assert!(
        result
            .output
            .contains(r#"- /: "text" is a required property"#),
        "{}",
        result.output
    );
    assert!(
        result
            .output
            .contains("- /repeat: 0 is less than the minimum of 1"),
        "{}",
        result.output
    );
    assert!(
        result
            .output
            .contains(r#"- /sleep_ms: "soon" is not of type "integer""#),
        "{}",
        result.output
    );
    assert!(result.output.contains("extra"), "{}", result.output);
    assert_eq!(result.fuel_used, 0, "the guest never ran");
}

#[tokio::test]
async fn malformed_json_is_invalid_arguments() {
    let registry = echo().await;
    for bad in [r#"{"text": "#, "not json", ""] {
        let result = registry.call("echo", bad).await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::InvalidArguments),
            "{bad}"
        );
        assert!(
            result.output.contains("not valid JSON"),
            "{}",
            result.output
        );
    }
    let result = registry.call("echo", "[1, 2]").await;
    assert_eq!(result.error_kind, Some(ErrorKind::InvalidArguments));
    assert!(
        result.output.contains(r#"is not of type "object""#),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn an_unknown_tool_lists_the_available_ones() {
    let registry = echo().await;
    let result = registry.call("ech0", "{}").await;
    assert_eq!(result.error_kind, Some(ErrorKind::NotFound));
    assert!(result.output.contains("`ech0`"), "{}", result.output);
    assert!(
        result
            .output
            .contains("echo, counter, fail, bad_details, misbehave"),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn a_tool_error_keeps_its_output_and_details() {
    let registry = echo().await;
    let result = registry.call("fail", "{}").await;
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert!(result.is_error);
    assert_eq!(result.output, "The thing is missing: create it first.");
    assert_eq!(result.details, Some(json!({ "reason": "missing" })));
}

#[tokio::test]
async fn details_that_break_the_output_schema_are_refused() {
    let registry = echo().await;
    let result = registry.call("bad_details", "{}").await;
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert!(result.output.contains("output schema"), "{}", result.output);
    assert!(
        result.output.contains(r#""length" is a required property"#),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn no_state_crosses_calls() {
    let registry = echo().await;
    for _ in 0..3 {
        assert_eq!(registry.call("counter", "{}").await.output, "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_calls_do_not_cross_talk() {
    let registry = Arc::new(echo().await);
    let calls = (0..100).map(|i| {
        let registry = registry.clone();
        tokio::spawn(async move {
            let text = format!("call number {i};");
            let result = registry
                .call("echo", json!({ "text": text, "repeat": 2 }))
                .await;
            (text, result)
        })
    });
    for call in futures_join(calls).await {
        let (text, result) = call.unwrap();
        assert!(!result.is_error, "{}", result.output);
        assert_eq!(result.output, text.repeat(2));
        assert_eq!(result.details, Some(json!({ "length": text.len() * 2 })));
    }
}

async fn futures_join<T>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut results = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        results.push(handle.await);
    }
    results
}

#[tokio::test]
async fn guest_logs_and_progress_reach_the_event_callback() {
    let registry = echo().await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let options = CallOptions::new()
        .call_id("abc")
        .on_event(move |event| sink.lock().unwrap().push(event));
    let result = registry
        .call_with("echo", json!({ "text": "hey", "sleep_ms": 1 }), options)
        .await;
    assert_eq!(result.call_id, "abc");
    let events = events.lock().unwrap();
    assert!(
        matches!(&events[0], GuestEvent::Log { message, .. } if message == "echoing 3 bytes"),
        "{events:?}"
    );
    assert!(
        matches!(&events[1], GuestEvent::Progress { fraction: Some(f), .. } if *f == 0.5),
        "{events:?}"
    );
}

#[tokio::test]
async fn cancelling_stops_a_looping_guest_promptly() {
    let limits = Limits {
        fuel: None,
        timeout: Duration::from_secs(30),
        ..quick_limits()
    };
    let registry = Arc::new(registry(builder().limits(limits), &[guests::FIXTURE_MISBEHAVE]).await);
    let token = CancelToken::new();
    let call = {
        let (registry, token) = (registry.clone(), token.clone());
        tokio::spawn(async move {
            registry
                .call_with(
                    "misbehave",
                    json!({ "mode": "loop" }),
                    CallOptions::new().cancel_token(token),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cancelled_at = Instant::now();
    token.cancel();
    let result = call.await.unwrap();
    let latency = cancelled_at.elapsed();
    assert_error(&result, ErrorKind::Cancelled);
    assert!(latency < Duration::from_millis(100), "took {latency:?}");
}

#[tokio::test]
async fn the_call_is_not_run_when_already_cancelled() {
    let registry = echo().await;
    let token = CancelToken::new();
    token.cancel();
    let result = registry
        .call_with("counter", "{}", CallOptions::new().cancel_token(token))
        .await;
    assert_eq!(result.error_kind, Some(ErrorKind::Cancelled));
}

/// The `zoo` tool's schema uses every validation keyword: a valid call comes
/// back unchanged, and breaking any one keyword is an `InvalidArguments`
/// result naming the path that broke it.
#[tokio::test]
async fn every_schema_keyword_is_enforced() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_SCHEMA_ZOO],
    )
    .await;
    let valid = json!({
        "name": "disc", "kind": "circle", "version": 1, "count": 15, "ratio": 0.5,
        "tags": ["main", "b-2"], "center": [0, 1.5], "radius": 2, "text": "hi",
        "id": "0a1b2c3d", "parity": 4, "note": null, "meta": { "x-a": "1" },
        "range": { "lo": 1, "hi": 2 }
    });
    let result = registry.call("zoo", valid.clone()).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.details.as_ref(), Some(&valid));
    let echoed: serde_json::Value = serde_json::from_str(&result.output).unwrap();
    assert_eq!(echoed, valid);
    // `format` is an annotation in draft 2020-12, not an assertion.
    let mut unformatted = valid.clone();
    unformatted["name"] = json!("not a hostname!");
    let result = registry.call("zoo", unformatted).await;
    assert!(!result.is_error, "{}", result.output);

    let with = |path: &[&str], value: Option<serde_json::Value>| {
        let mut args = valid.clone();
        let (last, parents) = path.split_last().unwrap();
        let mut object = &mut args;
        for key in parents {
            object = &mut object[*key];
        }
        let object = object.as_object_mut().unwrap();
        match value {
            Some(value) => object.insert(last.to_string(), value),
            None => object.remove(*last),
        };
        args
    };
    let nine_tags: Vec<String> = std::iter::once("main".to_string())
        .chain((1..9).map(|i| format!("t{i}")))
        .collect();
    let five_meta: serde_json::Map<String, serde_json::Value> =
        (0..5).map(|i| (format!("x-{i}"), json!("v"))).collect();
    let cases = [
        ("type", json!([1]), "/"),
        ("required", with(&["name"], None), "/"),
        (
            "additionalProperties",
            with(&["extra"], Some(json!(1))),
            "/",
        ),
        ("enum", with(&["kind"], Some(json!("square"))), "/kind"),
        ("const", with(&["version"], Some(json!(2))), "/version"),
        ("minimum", with(&["count"], Some(json!(-5))), "/count"),
        ("maximum", with(&["count"], Some(json!(1005))), "/count"),
        ("multipleOf", with(&["count"], Some(json!(7))), "/count"),
        (
            "exclusiveMinimum",
            with(&["ratio"], Some(json!(0))),
            "/ratio",
        ),
        (
            "exclusiveMaximum",
            with(&["ratio"], Some(json!(1))),
            "/ratio",
        ),
        ("minLength", with(&["name"], Some(json!(""))), "/name"),
        (
            "maxLength",
            with(&["name"], Some(json!("x".repeat(41)))),
            "/name",
        ),
        (
            "pattern ($ref)",
            with(&["tags"], Some(json!(["main", "Bad"]))),
            "/tags/1",
        ),
        (
            "type ($ref)",
            with(&["tags"], Some(json!(["main", 5]))),
            "/tags/1",
        ),
        (
            "uniqueItems",
            with(&["tags"], Some(json!(["main", "a", "a"]))),
            "/tags",
        ),
        ("maxItems", with(&["tags"], Some(json!(nine_tags))), "/tags"),
        ("contains", with(&["tags"], Some(json!(["a"]))), "/tags"),
        (
            "prefixItems",
            with(&["center"], Some(json!(["x", 1]))),
            "/center/0",
        ),
        (
            "items: false",
            with(&["center"], Some(json!([0, 1, 2]))),
            "/center/2",
        ),
        ("minItems", with(&["center"], Some(json!([0]))), "/center"),
        ("anyOf", with(&["id"], Some(json!("xyz"))), "/id"),
        ("oneOf", with(&["parity"], Some(json!(6))), "/parity"),
        ("not", with(&["note"], Some(json!(""))), "/note"),
        ("type list", with(&["note"], Some(json!(5))), "/note"),
        (
            "patternProperties",
            with(&["meta"], Some(json!({ "x-a": 1 }))),
            "/meta/x-a",
        ),
        (
            "additionalProperties (nested)",
            with(&["meta"], Some(json!({ "y": "1" }))),
            "/meta",
        ),
        (
            "propertyNames",
            with(
                &["meta"],
                Some(json!({ format!("x-{}", "n".repeat(30)): "1" })),
            ),
            "/meta",
        ),
        (
            "maxProperties",
            with(&["meta"], Some(json!(five_meta))),
            "/meta",
        ),
        (
            "dependentRequired",
            with(&["range"], Some(json!({ "lo": 1 }))),
            "/range",
        ),
        (
            "dependentSchemas",
            with(&["range"], Some(json!({ "hi": 1 }))),
            "/range",
        ),
        ("minProperties", with(&["range"], Some(json!({}))), "/range"),
        ("dependentRequired (root)", with(&["center"], None), "/"),
        ("if/then", with(&["radius"], None), "/"),
        ("if/else", with(&["kind"], Some(json!("label"))), "/"),
        (
            "if/then (polygon)",
            with(&["kind"], Some(json!("polygon"))),
            "/",
        ),
        (
            "items ($ref)",
            with(&["points"], Some(json!([[0, 0], [1, 1], [2]]))),
            "/points/2",
        ),
    ];
    for (keyword, args, path) in cases {
        let result = registry.call("zoo", args.clone()).await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::InvalidArguments),
            "{keyword}: {args} passed: {}",
            result.output
        );
        assert!(
            result.output.contains(&format!("\n- {path}: ")),
            "{keyword}: no error at {path}: {}",
            result.output
        );
    }
}

/// Found by the `call_arguments` fuzz target: a number the host parsed and
/// validated reached the tool one unit in the last place off, since neither
/// side's JSON parser read floats exactly.
#[tokio::test]
async fn numbers_reach_the_tool_exactly_as_validated() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_SCHEMA_ZOO],
    )
    .await;
    for (text, number) in [
        ("184467074437009551615", 184467074437009551615f64),
        ("1.8446707443700954e20", 1.8446707443700954e20),
        ("0.30000000000000004", 0.30000000000000004),
        ("2.2250738585072011e-308", 2.225_073_858_507_201e-308),
    ] {
        let arguments =
            format!(r#"{{"name": "n", "kind": "label", "range": {{"lo": {text}, "hi": 0}}}}"#);
        let result = registry.call("zoo", arguments.as_str()).await;
        assert!(!result.is_error, "{}", result.output);
        let details = result.details.unwrap();
        assert_eq!(
            details["range"]["lo"].as_f64(),
            Some(number),
            "{text}: {details}"
        );
    }
}
