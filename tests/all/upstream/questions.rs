//! A server's questions to the user (elicitation): forwarded to the
//! caller's asker, declined saying why when there is none, given up at the
//! call's timeout, and asked of a script's caller too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{CallOptions, Elicitation, ElicitationRequest, GuestEvent};
use toolcage_tests::{assert_loaded, builder};

use super::{everything, hostile, registry_with};

#[tokio::test]
async fn a_servers_question_goes_to_the_callers_asker_or_is_declined_saying_so() {
    let registry = registry_with(&hostile("h")).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question);
        async { Elicitation::Accept(json!({ "name": "Ada" })) }
    });
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert_eq!(result.output, "hello Ada", "{result:?}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "mcp__h__ask");
    assert_eq!(asked[0].message, "What is your name?");
    assert_eq!(asked[0].schema["properties"]["name"]["type"], "string");

    // Nobody to ask: declined, and the call's events say why.
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let options = CallOptions::new().on_event(move |event| sink.lock().unwrap().push(event));
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert_eq!(result.output, "decline", "{result:?}");
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|event| matches!(event, GuestEvent::Log { message, .. }
            if message.contains("toolcage declined: its caller cannot ask the user"))),
        "{events:?}"
    );
}

#[tokio::test]
async fn everythings_question_is_forwarded_to_the_asker_or_declined() {
    let registry = registry_with(&everything()).await;
    let tool = "mcp__everything__trigger-elicitation-request";
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question);
        async { Elicitation::Accept(json!({ "name": "Ada Lovelace", "check": true })) }
    });
    let result = registry.call_with(tool, json!({}), options).await;
    assert!(!result.is_error, "{result:?}");
    assert!(
        result.output.contains("- Name: Ada Lovelace") && result.output.contains("terms: true"),
        "{}",
        result.output
    );
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, tool);
    assert_eq!(asked[0].schema["required"], json!(["name"]));

    let result = registry.call(tool, json!({})).await;
    assert!(result.output.contains("User declined"), "{}", result.output);
}

/// Set when dropped.
struct Dropped(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_question_waits_at_most_the_calls_timeout_and_a_scripts_reaches_the_asker() {
    let mut registry = builder().build().unwrap();
    for report in registry.load_bundled().await {
        assert_loaded(&report);
    }
    let server = hostile("h").timeout(Duration::from_secs(2));
    assert_loaded(&registry.load_mcp_server(&server).await);

    // Nobody answers: the question is dropped at the call's timeout, and
    // the server serves the next call.
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = dropped.clone();
    let options = CallOptions::new().on_elicitation(move |_| {
        let guard = Dropped(flag.clone());
        async move {
            let _guard = guard;
            std::future::pending::<Elicitation>().await
        }
    });
    let started = Instant::now();
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert!(result.is_error || result.output == "cancel", "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "{result:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the question still waits"
    );
    let result = registry
        .call("mcp__h__echo", json!({ "text": "after" }))
        .await;
    assert_eq!(result.output, "after", "{result:?}");

    // A script's call of an upstream tool: its question goes to the asker
    // of the script's call, naming the upstream tool.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question.tool);
        async { Elicitation::Accept(json!({ "name": "Ada" })) }
    });
    let code = "(await mcp__h__ask())['output']";
    let result = registry
        .call_with("run_code", json!({ "code": code }), options)
        .await;
    assert!(!result.is_error, "{result:?}");
    assert_eq!(result.details.expect("details")["result"], "hello Ada");
    assert_eq!(*asked.lock().unwrap(), ["mcp__h__ask"]);
}
