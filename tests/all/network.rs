//! The network as a tool sees it. Every component is linked with `wasi:http`,
//! and no destination is granted: each request is refused with
//! `HTTP-request-denied` before anything is resolved or connected, and the
//! call's logs (stderr, its events, the tracing log) say what was refused.
//! A listener on loopback sees that nothing reached it; every destination
//! is that listener, so even a wrong sender would send nothing off this
//! machine.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolcage::{CallOptions, GuestEvent, LogLevel, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

/// A listener on loopback that nothing is expected to reach: its address,
/// and a check that no connection came.
struct Untouched(TcpListener);

impl Untouched {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Untouched(listener)
    }

    fn authority(&self) -> String {
        self.0.local_addr().unwrap().to_string()
    }

    fn assert_untouched(&self) {
        assert!(self.0.accept().is_err(), "a request reached the server");
    }
}

async fn probe(registry: &Registry, requests: Value) -> (toolcage::CallResult, Vec<GuestEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let options = CallOptions::new().on_event(move |event| seen.lock().unwrap().push(event));
    let result = registry
        .call_with("netprobe", json!({ "requests": requests }), options)
        .await;
    let events = events.lock().unwrap().clone();
    (result, events)
}

#[tokio::test]
async fn a_component_importing_wasi_http_loads_and_every_request_is_refused_and_noted() {
    let server = Untouched::new();
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let authority = server.authority();
    let (result, events) = probe(
        &registry,
        json!([
            { "scheme": "http", "authority": authority, "path": "/first" },
            { "method": "POST", "scheme": "https", "authority": authority, "path": "/upload",
              "headers": [["x-note", "from the tool"]] },
        ]),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.unwrap();
    for outcome in details.as_array().unwrap() {
        let error = outcome["error"].as_str().unwrap_or_default();
        assert!(error.contains("HttpRequestDenied"), "{details}");
    }
    // The call's logs name each destination and why it was refused.
    let first = format!(
        "toolcage: GET http://{authority}/first refused: the operator granted this tool no network access"
    );
    let second = format!(
        "toolcage: POST https://{authority}/upload refused: the operator granted this tool no network access"
    );
    assert_eq!(result.logs.stderr, format!("{first}\n{second}\n"));
    let warnings: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            GuestEvent::Log {
                level: LogLevel::Warn,
                message,
            } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings, [first.as_str(), second.as_str()]);
    server.assert_untouched();
}

#[tokio::test]
async fn refusals_noted_in_a_call_are_bounded() {
    let server = Untouched::new();
    let authority = server.authority();
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let requests: Vec<Value> = (0..150)
        .map(|i| json!({ "scheme": "https", "authority": authority, "path": format!("/{i}") }))
        .collect();
    let (result, events) = probe(&registry, json!(requests)).await;
    assert!(!result.is_error, "{}", result.output);
    let lines: Vec<&str> = result.logs.stderr.lines().collect();
    assert_eq!(lines.len(), 101, "{}", result.logs.stderr);
    assert!(
        lines[99].contains(&format!("GET https://{authority}/99 refused")),
        "{}",
        lines[99]
    );
    assert_eq!(
        lines[100],
        "toolcage: more than 100 network refusals in this call; the rest are not noted"
    );
    assert_eq!(events.len(), 101);
    server.assert_untouched();
}
