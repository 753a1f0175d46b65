//! Load through the library: a thousand calls at once on one registry, each
//! answered exactly once with its own result (and its own guest events); and
//! well-behaved calls mixed with calls that loop, hog memory and flood
//! output, where every good call succeeds and every bad one is stopped with
//! its own kind of error.
//!
//! Each test has a runtime of its own, so its load does not take the sandbox
//! slots of the other tests in this binary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolcage::{
    CallOptions, CallResult, ErrorKind, GuestEvent, LimitOverrides, Limits, Registry, Runtime,
};
use toolcage_tests::{assert_error, assert_loaded, guests};

const CALLS: usize = 1_000;
const SLOTS: usize = 32;

/// A registry of `components` on a runtime of its own with [`SLOTS`] slots.
async fn loaded(limits: Limits, misbehave: LimitOverrides, components: &[&str]) -> Arc<Registry> {
    let runtime = Runtime::builder()
        .max_concurrent_calls(SLOTS)
        .build()
        .unwrap();
    let mut registry = Registry::builder()
        .runtime(&runtime)
        .limits(limits)
        .component_limits("fixture_misbehave", misbehave)
        .build()
        .unwrap();
    for component in components {
        assert_loaded(&registry.load_file(component).await);
    }
    Arc::new(registry)
}

/// Generous limits for the good calls: they may wait behind many others for
/// a slot, and that wait counts against their timeout.
fn patient() -> Limits {
    Limits {
        timeout: Duration::from_secs(60),
        ..Limits::default()
    }
}

/// The text of call `i`: unique, and of a length of its own.
fn text(i: usize) -> String {
    format!("call {i} {}", "#".repeat(i % 37))
}

/// Calls `echo` as call `i`, recording its guest events as `(i, event)`.
async fn echo(
    registry: &Registry,
    i: usize,
    sleep_ms: u64,
    events: &Arc<Mutex<Vec<(usize, String)>>>,
) -> CallResult {
    let sink = events.clone();
    let options = CallOptions::default()
        .call_id(format!("load-{i}"))
        .on_event(move |event| {
            if let GuestEvent::Log { message, .. } = event {
                sink.lock().unwrap().push((i, message));
            }
        });
    registry
        .call_with(
            "echo",
            json!({ "text": text(i), "repeat": 2, "sleep_ms": sleep_ms }),
            options,
        )
        .await
}

/// Checks that call `i`'s result is its own.
fn assert_own(i: usize, result: &CallResult) {
    assert!(!result.is_error, "call {i}: {}", result.output);
    assert_eq!(result.call_id, format!("load-{i}"));
    assert_eq!(result.output, text(i).repeat(2), "call {i} got another's");
    assert_eq!(
        result.details,
        Some(json!({ "length": 2 * text(i).len() })),
        "call {i}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_each_get_their_own_result_once() {
    let registry = loaded(
        patient(),
        LimitOverrides::default(),
        &[guests::FIXTURE_ECHO],
    )
    .await;
    let events = Arc::new(Mutex::new(Vec::new()));
    // Every task is running before any call starts: all 1,000 are in flight
    // at once, 32 in slots and the rest waiting for one.
    let start = Arc::new(tokio::sync::Barrier::new(CALLS));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let (registry, events, start) = (registry.clone(), events.clone(), start.clone());
            let (in_flight, most) = (in_flight.clone(), most_in_flight.clone());
            tokio::spawn(async move {
                start.wait().await;
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // A short sleep keeps every slot busy while the rest queue.
                let result = echo(&registry, i, 5, &events).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                (i, result)
            })
        })
        .collect();
    let mut answered = vec![0; CALLS];
    for task in tasks {
        let (i, result) = task.await.expect("the call's task ends");
        assert_own(i, &result);
        answered[i] += 1;
    }
    assert!(answered.iter().all(|&n| n == 1), "a call answered twice");
    assert!(
        most_in_flight.load(Ordering::SeqCst) > SLOTS,
        "only {} calls were in flight at once",
        most_in_flight.load(Ordering::SeqCst)
    );
    // Each call's log line reached its own caller, once.
    let events = events.lock().unwrap();
    assert_eq!(events.len(), CALLS, "one log line per call");
    let mut logged = vec![0; CALLS];
    for (i, message) in events.iter() {
        assert_eq!(*message, format!("echoing {} bytes", text(*i).len()));
        logged[*i] += 1;
    }
    assert!(logged.iter().all(|&n| n == 1));
}

/// What a misbehaving call does, and how it must end.
#[derive(Debug, Clone, Copy)]
enum Bad {
    /// Computes forever: out of fuel.
    Loop,
    /// Grows memory without end: memory limit.
    Hog,
    /// Returns 1 MiB: output limit.
    HugeOutput,
    /// Writes 2 MiB to stdout: cut, and the call succeeds.
    Flood,
}

impl Bad {
    fn arguments(self) -> serde_json::Value {
        match self {
            Bad::Loop => json!({ "mode": "loop" }),
            Bad::Hog => json!({ "mode": "hog" }),
            Bad::HugeOutput => json!({ "mode": "huge_output", "amount": 1 << 20 }),
            Bad::Flood => json!({ "mode": "print", "amount": 2 << 20 }),
        }
    }

    fn check(self, result: &CallResult) {
        match self {
            Bad::Loop => assert_error(result, ErrorKind::OutOfFuel),
            Bad::Hog => assert_error(result, ErrorKind::MemoryLimit),
            Bad::HugeOutput => assert_error(result, ErrorKind::OutputLimit),
            Bad::Flood => {
                assert!(!result.is_error, "{}", result.output);
                assert_eq!(result.output, "printed");
                assert!(result.logs.truncated);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_calls_all_succeed_among_loops_memory_hogs_and_floods() {
    // The misbehaving component gets tight limits; the good calls the
    // patient defaults.
    let tight = LimitOverrides {
        fuel: Some(Some(100_000_000)),
        timeout: Some(Duration::from_secs(20)),
        memory_bytes: Some(16 << 20),
        output_bytes: Some(64 << 10),
        ..LimitOverrides::default()
    };
    let registry = loaded(
        patient(),
        tight,
        &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
    )
    .await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(tokio::sync::Barrier::new(CALLS));
    // One call in five misbehaves, the four kinds in turn, spread through
    // the good ones.
    let bad = [Bad::Loop, Bad::Hog, Bad::HugeOutput, Bad::Flood];
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let (registry, events, start) = (registry.clone(), events.clone(), start.clone());
            let misdeed = (i % 5 == 4).then(|| bad[(i / 5) % bad.len()]);
            tokio::spawn(async move {
                start.wait().await;
                match misdeed {
                    Some(misdeed) => {
                        let result = registry.call("misbehave", misdeed.arguments()).await;
                        (i, Some(misdeed), result)
                    }
                    None => (i, None, echo(&registry, i, 0, &events).await),
                }
            })
        })
        .collect();
    let (mut good, mut stopped) = (0, [0; 4]);
    for task in tasks {
        match task.await.expect("the call's task ends") {
            (i, None, result) => {
                assert_own(i, &result);
                good += 1;
            }
            (i, Some(misdeed), result) => {
                misdeed.check(&result);
                stopped[(i / 5) % bad.len()] += 1;
            }
        }
    }
    assert_eq!(good, 800);
    assert_eq!(stopped, [50; 4]);
    assert_eq!(events.lock().unwrap().len(), good);
    // And the registry still serves.
    let result = echo(&registry, 7, 0, &events).await;
    assert_own(7, &result);
}
