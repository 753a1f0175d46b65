//! Tools that call tools (`toolcage:tool/tools`): each nested call takes the
//! one call path with the callee's own grants, under its tree's budget, and
//! every refusal is a value the caller reads. Real guests built from
//! source, real servers on loopback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcage::agent::{AgentEvent, Permission, Permissions, Runner, ToolCall};
use toolcage::{
    CallOptions, CallPolicy, CallResult, CancelToken, ErrorKind, Grant, Injection, Limits,
    MAX_LISTED_NESTED, Mount, NestedEvent, Registry, Runtime, Secret,
};
use toolcage_tests::net::Server;
use toolcage_tests::{builder, guests, quick_limits, registry};

const COMPOSER: &str = "fixture_composer";

/// The composer, granted `calls`, beside echo.
async fn composer(calls: &[&str], limits: Limits) -> Registry {
    let mut builder = builder().limits(limits);
    for pattern in calls {
        builder = builder.component_calls(COMPOSER, *pattern);
    }
    registry(builder, &[guests::FIXTURE_COMPOSER, guests::FIXTURE_ECHO]).await
}

/// `compose` of `calls` (tool, arguments), one by one or together.
fn compose(calls: &[(&str, Value)], together: bool) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(tool, arguments)| json!({ "tool": tool, "arguments": arguments }))
        .collect();
    json!({ "calls": calls, "together": together })
}

/// What the composer's callees returned, as it saw them.
fn seen(result: &CallResult) -> Vec<Value> {
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.as_ref().expect("details");
    details["results"].as_array().expect("results").clone()
}

fn echo(text: &str) -> (&'static str, Value) {
    ("echo", json!({ "text": text }))
}

#[tokio::test]
async fn a_nested_call_is_a_call_listed_on_its_caller() {
    let registry = composer(&["echo", "nope"], quick_limits()).await;
    let result = registry
        .call("compose", compose(&[echo("one"), echo("two")], false))
        .await;
    let results = seen(&result);
    assert_eq!(results[0]["output"], "one");
    assert_eq!(results[0]["details"], json!({ "length": 3 }));
    assert_eq!(results[1]["output"], "two");
    assert_eq!(result.nested.len(), 2, "{:?}", result.nested);
    for (n, (listed, returned)) in result.nested.iter().zip(&results).enumerate() {
        // Ids unique in the tree, whatever id the root was given.
        assert_eq!(listed.call_id, format!("{}.{}", result.call_id, n + 1));
        assert_eq!(listed.tool, "echo");
        assert_eq!(listed.call_id, returned["call_id"].as_str().unwrap());
        assert_eq!(listed.parent_call_id, result.call_id);
        assert_eq!(listed.depth, 1);
        assert!(!listed.is_error);
        assert!(listed.fuel_used > 0 && listed.duration > Duration::ZERO);
    }
    // Validation is the callee's: its errors reach the caller to act on.
    let result = registry
        .call("compose", compose(&[("echo", json!({ "txt": 1 }))], false))
        .await;
    let refused = &seen(&result)[0];
    assert_eq!(refused["error_kind"], "invalid_arguments");
    assert!(
        refused["output"]
            .as_str()
            .unwrap()
            .contains("\"text\" is a required property"),
        "{refused}"
    );
    // So is an unknown name.
    let result = registry
        .call("compose", compose(&[("nope", json!({}))], false))
        .await;
    assert_eq!(seen(&result)[0]["error_kind"], "not_found");
    let output = seen(&result)[0]["output"].as_str().unwrap().to_string();
    assert!(
        output.ends_with("Tools this tool may call: echo."),
        "{output}"
    );
    // In JSON (`--json`, MCP `_meta`), the list is `nested`.
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["nested"][0]["tool"], "nope");
    assert_eq!(json["nested"][0]["error_kind"], "not_found");
}

#[tokio::test]
async fn without_a_grant_every_call_is_refused_naming_the_grant() {
    let registry = composer(&[], quick_limits()).await;
    let result = registry.call("compose", compose(&[echo("x")], false)).await;
    let refused = &seen(&result)[0];
    assert_eq!(refused["is_error"], true);
    assert_eq!(refused["error_kind"], "permission_denied");
    let output = refused["output"].as_str().unwrap();
    assert!(
        output.contains("granted it no calls") && output.contains("[components.fixture_composer]"),
        "{output}"
    );
    // A grant of other tools names them.
    let registry = composer(&["read_*"], quick_limits()).await;
    let result = registry.call("compose", compose(&[echo("x")], false)).await;
    let output = seen(&result)[0]["output"].as_str().unwrap().to_string();
    assert!(output.contains("calls to read_* only"), "{output}");
}

/// The tools an unknown name's answer lists are those the rules leave
/// callable: a denied tool's name is not given away (issue 52, item 3).
#[tokio::test]
async fn an_unknown_names_answer_lists_only_what_the_rules_allow() {
    let registry = composer(&["*"], quick_limits()).await;
    let rules = Permissions::allow_all()
        .rule("echo", Permission::Deny)
        .unwrap();
    let options = CallOptions::new().policy(CallPolicy::new(rules));
    let result = registry
        .call_with("compose", compose(&[("nope", json!({}))], false), options)
        .await;
    let output = seen(&result)[0]["output"].as_str().unwrap().to_string();
    assert!(
        output.starts_with("There is no tool named `nope`"),
        "{output}"
    );
    assert!(
        !output.contains("echo"),
        "a denied tool is not listed: {output}"
    );
    assert!(output.contains("compose"), "{output}");
    // Without rules, the same answer lists it.
    let result = registry
        .call("compose", compose(&[("nope", json!({}))], false))
        .await;
    let output = seen(&result)[0]["output"].as_str().unwrap().to_string();
    assert!(output.contains("echo"), "{output}");
}

#[tokio::test]
async fn the_operators_rules_refuse_a_nested_call_as_they_refuse_a_direct_one() {
    let registry = composer(&["*"], quick_limits()).await;
    let rules = Permissions::allow_all()
        .rule("echo", Permission::Deny)
        .unwrap();
    let options = || CallOptions::new().policy(CallPolicy::new(rules.clone()));
    let direct = registry
        .call_with("echo", json!({ "text": "x" }), options())
        .await;
    assert_eq!(direct.error_kind, Some(ErrorKind::PermissionDenied));
    let result = registry
        .call_with("compose", compose(&[echo("x")], false), options())
        .await;
    let refused = &seen(&result)[0];
    assert_eq!(refused["error_kind"], "permission_denied");
    assert_eq!(refused["output"], direct.output.as_str());
    assert_eq!(
        result.nested[0].error_kind,
        Some(ErrorKind::PermissionDenied)
    );

    // `ask`: the policy's approver is asked about the nested call itself;
    // with none, the refusal says no one can approve it.
    let asks = Permissions::allow_all()
        .rule("echo", Permission::Ask)
        .unwrap();
    let result = registry
        .call_with(
            "compose",
            compose(&[echo("x")], false),
            CallOptions::new().policy(CallPolicy::new(asks.clone())),
        )
        .await;
    let output = seen(&result)[0]["output"].as_str().unwrap().to_string();
    assert!(output.contains("no one can approve them here"), "{output}");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let noted = asked.clone();
    let approver = move |request: toolcage::agent::ApprovalRequest| {
        noted.lock().unwrap().push(request.arguments.clone());
        let text = request.arguments["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        async move {
            match text.as_str() {
                "yes" => toolcage::agent::Approval::Approve,
                _ => toolcage::agent::Approval::Refuse { reason: None },
            }
        }
    };
    let policy = CallPolicy::new(asks).approver(approver);
    let result = registry
        .call_with(
            "compose",
            compose(&[echo("yes"), echo("no")], false),
            CallOptions::new().policy(policy),
        )
        .await;
    let results = seen(&result);
    assert_eq!(results[0]["output"], "yes");
    assert_eq!(results[1]["error_kind"], "permission_denied");
    assert_eq!(
        *asked.lock().unwrap(),
        [json!({ "text": "yes" }), json!({ "text": "no" })]
    );
    assert_eq!(result.nested.len(), 2, "both attempts are listed");
    // Read-only calls started together are asked about in turn, in order.
    asked.lock().unwrap().clear();
    let texts = ["a", "b", "c", "d"];
    let calls: Vec<_> = texts.iter().map(|text| echo(text)).collect();
    let policy = CallPolicy::new(
        Permissions::allow_all()
            .rule("echo", Permission::Ask)
            .unwrap(),
    )
    .approver({
        let asked = asked.clone();
        move |request: toolcage::agent::ApprovalRequest| {
            assert_eq!(request.caller.as_deref(), Some("compose"));
            asked.lock().unwrap().push(request.arguments.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                toolcage::agent::Approval::Approve
            }
        }
    });
    let result = registry
        .call_with(
            "compose",
            compose(&calls, true),
            CallOptions::new().policy(policy),
        )
        .await;
    assert!(seen(&result).iter().all(|r| r["is_error"] == false));
    let order: Vec<Value> = texts.iter().map(|text| json!({ "text": text })).collect();
    assert_eq!(*asked.lock().unwrap(), order);
}

#[tokio::test]
async fn a_composer_reaches_files_and_the_network_only_through_its_callees() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "granted to fs only").unwrap();
    let server = Server::http("127.0.0.1").await;
    let origin = format!("http://{}", server.authority());
    let builder = builder()
        .limits(quick_limits())
        .component_calls(COMPOSER, "read_file")
        .component_calls(COMPOSER, "fetch")
        .component_mount("toolcage_fs", Mount::read_only(dir.path(), "/workspace"))
        .component_allow_net("toolcage_fetch", Grant::parse(&origin).unwrap());
    let registry = registry(
        builder,
        &[
            guests::FIXTURE_COMPOSER,
            guests::TOOLCAGE_FS,
            guests::TOOLCAGE_FETCH,
        ],
    )
    .await;
    let arguments = json!({
        "calls": [
            { "tool": "read_file", "arguments": { "path": "/workspace/notes.txt" } },
            { "tool": "fetch", "arguments": { "url": format!("{origin}/hello") } },
        ],
        "read": "/workspace/notes.txt",
        "connect": server.authority(),
    });
    let result = registry.call("compose", arguments).await;
    let results = seen(&result);
    let read = results[0]["output"].as_str().unwrap();
    assert!(read.contains("granted to fs only"), "{}", results[0]);
    assert_eq!(results[1]["is_error"], false, "{}", results[1]);
    let fetched = results[1]["output"].as_str().unwrap();
    assert!(fetched.contains("hello from"), "{}", results[1]);
    assert_eq!(server.seen().len(), 1, "only the callee's request arrived");
    // The composer's own file and socket access is still refused.
    let details = result.details.unwrap();
    assert!(details["read"]["error"].is_string(), "{details}");
    assert!(details["connect"]["error"].is_string(), "{details}");
    assert_eq!(server.accepted(), 1, "the composer's connect never arrived");
}

#[tokio::test]
async fn a_secret_injected_for_a_callee_never_reaches_its_caller() {
    const TOKEN: &str = "s3cret-token-for-the-callee";
    let server = Server::http("127.0.0.1").await;
    let origin = format!("http://{}", server.authority());
    let injection = Injection::new(&origin, "Authorization", "Bearer {{ secrets.API }}").unwrap();
    let builder = builder()
        .limits(quick_limits())
        .secret(Secret::new("API", TOKEN).unwrap())
        .component_calls(COMPOSER, "netprobe")
        .component_allow_net("fixture_netprobe", Grant::parse(&origin).unwrap())
        .component_inject("fixture_netprobe", injection);
    let registry = registry(
        builder,
        &[guests::FIXTURE_COMPOSER, guests::FIXTURE_NETPROBE],
    )
    .await;
    // The API echoes the token back; the callee leaks it into its output.
    let probe = json!({ "leak": true, "requests": [{
        "scheme": "http", "authority": server.authority(), "path": "/reflect",
        "report_headers": true
    }] });
    let result = registry
        .call("compose", compose(&[("netprobe", probe)], false))
        .await;
    let seen = &seen(&result)[0];
    assert_eq!(seen["is_error"], false, "{seen}");
    let everything = format!("{result:?}");
    assert!(!everything.contains(TOKEN), "{everything}");
    assert!(everything.contains("[redacted secret API]"), "{everything}");
    assert!(
        server.seen()[0]
            .headers
            .iter()
            .any(|(k, v)| k == "authorization" && v.contains(TOKEN)),
        "the callee's request carried the secret"
    );
}

#[tokio::test]
async fn a_tool_calling_itself_stops_at_the_depth_cap() {
    let registry = composer(&["recurse"], quick_limits()).await;
    let result = registry.call("recurse", json!({})).await;
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.unwrap();
    assert_eq!(details["deepest"], 4, "{details}");
    assert_eq!(details["stopped"]["error_kind"], "nested_limit");
    let why = details["stopped"]["output"].as_str().unwrap();
    assert!(why.contains("`nested_depth` = 4"), "{why}");
    assert_eq!(result.nested.len(), 5, "4 calls ran, the fifth was refused");
    // The deepest call let through: the refused fifth did not run.
    assert_eq!(result.nested_usage.unwrap().depth, 4);
    assert_eq!(
        result.nested.iter().map(|n| n.depth).max(),
        Some(5),
        "{:?}",
        result.nested
    );
    // A deeper cap is obeyed as far as it goes.
    let limits = Limits {
        nested_depth: 6,
        ..quick_limits()
    };
    let registry = composer(&["recurse"], limits).await;
    let result = registry.call("recurse", json!({})).await;
    assert_eq!(result.details.unwrap()["deepest"], 6);
}

#[tokio::test]
async fn a_tree_makes_at_most_its_nested_calls() {
    let limits = Limits {
        nested_calls: 3,
        ..quick_limits()
    };
    let registry = composer(&["echo"], limits).await;
    let calls: Vec<_> = (0..5)
        .map(|n| echo(if n < 3 { "ok" } else { "over" }))
        .collect();
    let result = registry.call("compose", compose(&calls, false)).await;
    let kinds: Vec<Value> = seen(&result)
        .iter()
        .map(|r| r["error_kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            Value::Null,
            Value::Null,
            Value::Null,
            json!("nested_limit"),
            json!("nested_limit")
        ]
    );
    let why = seen(&result)[3]["output"].as_str().unwrap().to_string();
    assert!(why.contains("made its 3 nested calls"), "{why}");
    let usage = result
        .nested_usage
        .expect("the root reports its tree's usage");
    assert_eq!((usage.calls, usage.depth), (3, 1));
}

#[tokio::test]
async fn refused_calls_count_too_and_a_flood_of_them_is_refused_silently() {
    let limits = Limits {
        nested_calls: 3,
        ..quick_limits()
    };
    let registry = composer(&[], limits).await;
    let calls: Vec<_> = (0..6).map(|_| echo("x")).collect();
    let result = registry.call("compose", compose(&calls, false)).await;
    let kinds: Vec<Value> = seen(&result)
        .iter()
        .map(|r| r["error_kind"].clone())
        .collect();
    let (denied, over) = (json!("permission_denied"), json!("nested_limit"));
    assert_eq!(
        kinds,
        [
            denied.clone(),
            denied.clone(),
            denied,
            over.clone(),
            over.clone(),
            over
        ]
    );
    // Listed: the 3 within the budget and the first past it.
    assert_eq!(result.nested.len(), 4, "{:?}", result.nested);
    assert_eq!(result.nested_usage.unwrap().calls, 3);
}

#[tokio::test]
async fn a_result_lists_at_most_its_cap_of_nested_calls() {
    let limits = Limits {
        nested_calls: 1_100,
        timeout: Duration::from_secs(60),
        fuel: None,
        ..quick_limits()
    };
    let registry = composer(&["echo"], limits).await;
    let calls: Vec<_> = (0..MAX_LISTED_NESTED + 1).map(|_| echo("x")).collect();
    let result = registry.call("compose", compose(&calls, false)).await;
    assert_eq!(seen(&result).len(), MAX_LISTED_NESTED + 1);
    assert_eq!(
        result.nested.len(),
        MAX_LISTED_NESTED,
        "listed up to the cap"
    );
    let usage = result.nested_usage.unwrap();
    assert_eq!(
        usage.calls as usize,
        MAX_LISTED_NESTED + 1,
        "every call counted"
    );
    assert_eq!(usage.unlisted, 1, "the record says it is not whole");
}

#[tokio::test]
async fn a_tree_passes_at_most_its_bytes() {
    let limits = Limits {
        nested_bytes: 4 << 10,
        ..quick_limits()
    };
    let registry = composer(&["echo"], limits).await;
    let kib = "k".repeat(1 << 10);
    // Within the budget: 1 KiB out, 1 KiB back (and a little).
    let result = registry
        .call("compose", compose(&[echo(&kib)], false))
        .await;
    assert_eq!(seen(&result)[0]["output"], kib.as_str());
    let used = result.nested_usage.unwrap().bytes;
    assert!(used > 2 << 10 && used <= 4 << 10, "{used}");
    // Arguments past it are not sent.
    let big = "b".repeat(5 << 10);
    let result = registry
        .call("compose", compose(&[echo(&big)], false))
        .await;
    let refused = &seen(&result)[0];
    assert_eq!(refused["error_kind"], "nested_limit");
    assert!(
        refused["output"].as_str().unwrap().contains("of arguments"),
        "{refused}"
    );
    // A result past it is withheld.
    let repeated = ("echo", json!({ "text": kib, "repeat": 3 }));
    let result = registry.call("compose", compose(&[repeated], false)).await;
    let withheld = &seen(&result)[0];
    assert_eq!(withheld["error_kind"], "nested_limit");
    assert!(
        withheld["output"]
            .as_str()
            .unwrap()
            .contains("was withheld"),
        "{withheld}"
    );
    assert!(!withheld["output"].as_str().unwrap().contains(&kib));
}

#[tokio::test]
async fn a_nested_call_ends_when_its_caller_must() {
    let limits = Limits {
        timeout: Duration::from_millis(800),
        ..quick_limits()
    };
    let registry = composer(&["echo"], limits).await;
    // Within the caller's time: done.
    let quick = ("echo", json!({ "text": "x", "sleep_ms": 50 }));
    let result = registry.call("compose", compose(&[quick], false)).await;
    assert_eq!(seen(&result)[0]["output"], "x");
    // Past it: the callee stops when its caller's time runs out, not its own.
    let slow = ("echo", json!({ "text": "x", "sleep_ms": 5_000 }));
    let started = Instant::now();
    let result = registry.call("compose", compose(&[slow], false)).await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    match result.error_kind {
        // The callee timed out first, and the caller reported it.
        None => {
            let callee = &seen(&result)[0];
            assert_eq!(callee["error_kind"], "timeout", "{callee}");
            assert!(
                callee["output"]
                    .as_str()
                    .unwrap()
                    .contains("its caller had left"),
                "{callee}"
            );
        }
        // Or the caller's own deadline stopped them both.
        Some(kind) => assert_eq!(kind, ErrorKind::Timeout, "{}", result.output),
    }
}

#[tokio::test]
async fn cancelling_the_caller_stops_its_callees_at_once() {
    let registry = composer(&["echo"], quick_limits()).await;
    let token = CancelToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let slow = ("echo", json!({ "text": "x", "sleep_ms": 1_900 }));
    let started = Instant::now();
    let options = CallOptions::new().cancel_token(token);
    let result = registry
        .call_with("compose", compose(&[slow], false), options)
        .await;
    let took = started.elapsed();
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        result.output
    );
    assert!(took < Duration::from_millis(600), "{took:?}");
}

#[tokio::test]
async fn read_only_calls_started_together_run_at_once() {
    let registry = composer(&["echo"], quick_limits()).await;
    let nap = ("echo", json!({ "text": "z", "sleep_ms": 300 }));
    let calls = [nap.clone(), nap.clone(), nap.clone(), nap];
    let started = Instant::now();
    let result = registry.call("compose", compose(&calls, true)).await;
    let together = started.elapsed();
    assert_eq!(seen(&result).len(), 4);
    assert!(seen(&result).iter().all(|r| r["output"] == "z"));
    assert!(together < Duration::from_millis(1_000), "{together:?}");
    // A tool that may write is not: one after another, in order.
    let registry = composer(&["compose"], quick_limits()).await;
    let inner = ("compose", compose(&[], false));
    let result = registry
        .call("compose", compose(&[inner.clone(), inner], true))
        .await;
    assert_eq!(seen(&result).len(), 2);
}

#[tokio::test]
async fn callers_filling_the_pool_get_clean_answers_never_a_hang() {
    let runtime = Runtime::builder().max_concurrent_calls(2).build().unwrap();
    let builder = Registry::builder()
        .runtime(&runtime)
        .limits(quick_limits())
        .component_calls(COMPOSER, "*");
    let registry =
        Arc::new(registry(builder, &[guests::FIXTURE_COMPOSER, guests::FIXTURE_ECHO]).await);
    // Two callers hold both slots, each calling echo.
    let started = Instant::now();
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let registry = registry.clone();
            tokio::spawn(async move {
                let slow = ("echo", json!({ "text": "x", "sleep_ms": 100 }));
                registry.call("compose", compose(&[slow], false)).await
            })
        })
        .collect();
    for caller in callers {
        let result = caller.await.unwrap();
        let callee = &seen(&result)[0];
        // Done, or refused at once because the pool could never free.
        if callee["is_error"] == true {
            assert_eq!(callee["error_kind"], "timeout", "{callee}");
            let output = callee["output"].as_str().unwrap();
            assert!(
                output.contains("waiting on the tools they called"),
                "{output}"
            );
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A chain deeper than the pool is refused cleanly where it runs out.
    let result = registry.call("recurse", json!({})).await;
    let details = result.details.expect("the root answered");
    assert_eq!(details["deepest"], 1, "{details}");
    assert_eq!(details["stopped"]["error_kind"], "timeout");
}

#[tokio::test]
async fn a_thousand_nested_calls_over_fifty_callers_are_each_answered_once() {
    let registry = Arc::new(composer(&["echo"], quick_limits()).await);
    let callers: Vec<_> = (0..50)
        .map(|caller| {
            let registry = registry.clone();
            tokio::spawn(async move {
                let calls: Vec<_> = (0..20)
                    .map(|n| ("echo", json!({ "text": format!("{caller}-{n}") })))
                    .collect();
                let result = registry
                    .call("compose", compose(&calls, caller % 2 == 0))
                    .await;
                (caller, result)
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for caller in callers {
        let (caller, result) = caller.await.unwrap();
        let results = seen(&result);
        assert_eq!(results.len(), 20);
        for (n, seen) in results.iter().enumerate() {
            assert_eq!(seen["output"], format!("{caller}-{n}"), "{seen}");
            assert!(ids.insert(seen["call_id"].as_str().unwrap().to_string()));
        }
        assert_eq!(result.nested.len(), 20);
    }
    assert_eq!(ids.len(), 1_000);
}

#[tokio::test]
async fn nested_calls_send_the_usual_events_with_their_callers_id() {
    let registry = Arc::new(composer(&["echo"], quick_limits()).await);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen_events = events.clone();
    let runner = Runner::new(registry.clone())
        .permissions(Arc::new(Permissions::allow_all()))
        .on_event(move |event| seen_events.lock().unwrap().push(event));
    let call = ToolCall::new("c1", "compose", compose(&[echo("hi")], false));
    let result = runner.run([call]).await.remove(0);
    assert!(!result.is_error, "{}", result.output);
    let events = events.lock().unwrap().clone();
    let nested: Vec<&AgentEvent> = events
        .iter()
        .filter(|e| e.parent_call_id() == Some("c1"))
        .collect();
    let kinds: Vec<&str> = nested.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        ["tool_call", "tool_log", "tool_result"],
        "{events:?}"
    );
    assert!(nested.iter().all(|e| e.tool() == "echo"));
    assert_eq!(nested[0].call_id(), result.nested[0].call_id);
    // The library's own hook sees the same.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    let options = CallOptions::new().on_nested(move |event| noted.lock().unwrap().push(event));
    registry
        .call_with("compose", compose(&[echo("hi")], false), options)
        .await;
    let seen = seen.lock().unwrap();
    assert!(matches!(&seen[0], NestedEvent::Call { tool, .. } if tool == "echo"));
    assert!(
        matches!(seen.last(), Some(NestedEvent::Result { result, .. }) if result.output == "hi")
    );
}

#[tokio::test]
async fn a_component_of_the_previous_contract_loads_and_runs() {
    // Built against toolcage:tool@0.1.0, from before `tools` existed.
    let registry = registry(builder(), &[guests::FIXTURE_LEFTOVERS_WAT]).await;
    let result = registry.call("leftovers_wat", json!({})).await;
    assert!(!result.is_error, "{}", result.output);
    assert!(result.nested.is_empty());
}

#[test]
fn the_cli_grants_calls_and_lists_them_in_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_COMPOSER, dir.path().join("composer.wasm")).unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    let arguments = compose(&[echo("hi")], false).to_string();
    let run = |flags: &[&str]| {
        let output = toolcage_tests::toolcage()
            .args(["--no-bundled", "--tools"])
            .arg(dir.path())
            .args(flags)
            .args(["--json", "call", "compose", &arguments])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let result: Value = serde_json::from_slice(&output.stdout).expect(&stderr);
        result
    };
    // Granted on the command line (`composer` is the file's stem).
    let result = run(&["--calls", "ech*"]);
    assert_eq!(result["details"]["results"][0]["output"], "hi", "{result}");
    assert_eq!(result["nested"][0]["tool"], "echo");
    assert_eq!(result["nested"][0]["parent_call_id"], result["call_id"]);
    assert_eq!(result["nested"][0]["depth"], 1);
    assert_eq!(result["nested_usage"]["calls"], 1);
    // Not granted: refused, and still listed.
    let result = run(&[]);
    assert_eq!(
        result["details"]["results"][0]["error_kind"],
        "permission_denied"
    );
    assert_eq!(result["nested"][0]["error_kind"], "permission_denied");
    // Granted in the config file; a grant for a component not loaded is
    // named on stderr.
    let config = dir.path().join("toolcage.toml");
    std::fs::write(
        &config,
        "[components.composer]\ncalls = [\"echo\"]\n[components.ghost]\ncalls = [\"echo\"]\n",
    )
    .unwrap();
    let output = toolcage_tests::toolcage()
        .args(["--no-bundled", "--tools"])
        .arg(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["--json", "call", "compose", &arguments])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let result: Value = serde_json::from_slice(&output.stdout).expect(&stderr);
    assert_eq!(result["details"]["results"][0]["output"], "hi", "{result}");
    assert!(
        stderr.contains("the config has a calls grant for component `ghost`"),
        "{stderr}"
    );
    // The tree's budget, from a flag.
    let result = run(&["--calls", "*", "--nested-calls", "0"]);
    assert_eq!(
        result["details"]["results"][0]["error_kind"],
        "nested_limit"
    );
}
