//! Cancelling a batch: the running calls stop and the rest are skipped.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_batch_stops_the_running_call_and_skips_the_rest() {
    let limits = Limits {
        fuel: None,
        timeout: Duration::from_secs(30),
        ..quick_limits()
    };
    let registry = Arc::new(
        registry(
            builder().limits(limits),
            &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
        )
        .await,
    );
    let token = CancelToken::new();
    let events = Events::default();
    let runner = Runner::new(registry)
        .permissions(Permissions::allow_all())
        .cancel_token(token.clone())
        .on_event(events.sink());
    let calls = vec![
        call("loop", "misbehave", json!({ "mode": "loop" })),
        call("next", "echo", json!({ "text": "x" })),
    ];
    let batch = tokio::spawn(async move { runner.run(calls).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cancelled_at = Instant::now();
    token.cancel();
    let results = batch.await.unwrap();
    let latency = cancelled_at.elapsed();
    assert!(latency < Duration::from_millis(100), "took {latency:?}");
    assert_eq!(
        results[0].error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        results[0].output
    );
    assert!(results[0].fuel_used > 0, "it ran");
    assert_eq!(results[1].error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        results[1].output,
        "The call was cancelled before it started."
    );
    assert_eq!(results[1].fuel_used, 0);
    let kinds: Vec<&str> = events.of("next").iter().map(AgentEvent::kind).collect();
    assert_eq!(kinds, ["tool_call", "tool_result"], "no guest ran: no logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_concurrent_batch_cancels_every_call() {
    let token = CancelToken::new();
    let runner = Runner::new(echo_registry().await)
        .permissions(Permissions::allow_all())
        .concurrency(2)
        .cancel_token(token.clone());
    let calls: Vec<ToolCall> = (0..3)
        .map(|i| {
            call(
                &i.to_string(),
                "echo",
                json!({ "text": "x", "sleep_ms": 1500 }),
            )
        })
        .collect();
    assert!(runner.runs_concurrently(&calls));
    let started = Instant::now();
    let batch = tokio::spawn(async move { runner.run(calls).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    token.cancel();
    let results = batch.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        results
            .iter()
            .all(|r| r.error_kind == Some(ErrorKind::Cancelled)),
        "{results:?}"
    );
    let not_started = results
        .iter()
        .filter(|r| r.output == "The call was cancelled before it started.")
        .count();
    assert_eq!(
        not_started, 1,
        "the call waiting for a slot never started: {results:?}"
    );
}
