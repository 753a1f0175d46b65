//! Pooled sandbox slots: every call gets a fresh instance in a slot that an
//! earlier call used, so nothing may cross between them; and when every slot
//! is taken, calls wait for one within their own timeout.

use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{ErrorKind, Limits, Registry, Runtime};
use toolcage_tests::{assert_error, assert_loaded, builder, guests, quick_limits, registry};

async fn assert_clean(registry: &Registry) {
    let result = registry.call("leftovers", json!({})).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.details,
        Some(json!({ "static": false, "heap": false, "stack": false })),
        "a call found what an earlier call left in its slot"
    );
}

#[tokio::test]
async fn no_state_crosses_calls_through_a_reused_slot() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_LEFTOVERS],
    )
    .await;
    for _ in 0..20 {
        assert_clean(&registry).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_state_crosses_concurrent_calls() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_LEFTOVERS],
    )
    .await;
    for _ in 0..10 {
        let calls = (0..8).map(|_| assert_clean(&registry));
        futures::future::join_all(calls).await;
    }
}

/// A registry of the `echo` fixture on a runtime of `slots` slots.
async fn echo_on(runtime: &Runtime, limits: Limits) -> Registry {
    let mut registry = Registry::builder()
        .runtime(runtime)
        .limits(limits)
        .build()
        .unwrap();
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_calls_than_slots_all_complete_the_surplus_waiting() {
    let runtime = Runtime::builder().max_concurrent_calls(2).build().unwrap();
    assert_eq!(runtime.max_concurrent_calls(), 2);
    let registry = echo_on(&runtime, quick_limits()).await;
    let started = Instant::now();
    let calls = (0..6).map(|i| {
        let registry = &registry;
        async move {
            let text = format!("call {i}");
            let result = registry
                .call("echo", json!({ "text": text, "sleep_ms": 150 }))
                .await;
            assert!(!result.is_error, "{}", result.output);
            assert_eq!(result.output, text);
        }
    });
    futures::future::join_all(calls).await;
    // Six calls of 150 ms through two slots take three rounds.
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}: more calls ran at once than there are slots",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_slot_past_its_timeout_gets_a_busy_timeout() {
    let runtime = Runtime::builder().max_concurrent_calls(1).build().unwrap();
    let patient = echo_on(&runtime, quick_limits()).await;
    let hasty = echo_on(
        &runtime,
        Limits {
            timeout: Duration::from_millis(100),
            ..quick_limits()
        },
    )
    .await;
    let long = patient.call("echo", json!({ "text": "long", "sleep_ms": 600 }));
    let short = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let result = hasty.call("echo", json!({ "text": "short" })).await;
        (result, started.elapsed())
    };
    let (long, (short, waited)) = tokio::join!(long, short);
    assert!(!long.is_error, "{}", long.output);
    assert_error(&short, ErrorKind::Timeout);
    assert!(short.output.contains("host was busy"), "{}", short.output);
    assert!(waited < Duration::from_millis(400), "waited {waited:?}");
    // Its whole time went to waiting for the slot, and the result says so.
    assert!(
        short.slot_wait >= Duration::from_millis(90) && short.slot_wait <= short.duration,
        "{:?} of {:?}",
        short.slot_wait,
        short.duration
    );
    // Once the slot is free, the same registry serves again, at once.
    let result = hasty.call("echo", json!({ "text": "again" })).await;
    assert_eq!(result.output, "again");
    assert!(
        result.slot_wait < Duration::from_millis(50),
        "{:?}",
        result.slot_wait
    );
}
