//! The result cache: it serves repeated read-only idempotent calls, and a
//! changed component misses it.

use super::*;

#[tokio::test]
async fn the_cache_serves_repeated_read_only_idempotent_calls() {
    let cache = ResultCache::new(16);
    let events = Events::default();
    let registry = echo_and_misbehave().await;
    let runner = Runner::new(registry)
        .permissions(Permissions::allow_all())
        .cache(cache.clone())
        .on_event(events.sink());

    let first = runner
        .run_reports(vec![ToolCall::new(
            "1",
            "echo",
            r#"{"text": "ab", "repeat": 2}"#,
        )])
        .await;
    assert!(!first[0].metrics.cached);
    assert!(first[0].result.fuel_used > 0);
    assert_eq!(cache.len(), 1);

    // The same arguments with the keys the other way round: a hit.
    let second = runner
        .run_reports(vec![call(
            "2",
            "echo",
            json!({ "repeat": 2, "text": "ab" }),
        )])
        .await;
    assert!(second[0].metrics.cached, "a hit");
    assert_eq!(second[0].result.output, "abab");
    assert_eq!(second[0].result.details, first[0].result.details);
    assert_eq!(
        second[0].result.call_id, "2",
        "the hit carries its own call id"
    );
    assert_eq!(second[0].result.fuel_used, 0);
    assert_eq!(second[0].metrics.fuel_used, 0);
    let result_event = serde_json::to_value(events.of("2").last().unwrap()).unwrap();
    assert_eq!(result_event["metrics"]["cached"], true);
    assert_eq!(events.of("2").len(), 2, "no guest ran: no logs or progress");

    // Different arguments: a miss.
    let third = runner
        .run_reports(vec![call("3", "echo", json!({ "text": "ab" }))])
        .await;
    assert!(!third[0].metrics.cached);
    assert_eq!(third[0].result.output, "ab");
    assert_eq!(cache.len(), 2);

    // Not cached: a tool that is not read-only, one without hints, errors.
    let uncached = vec![
        call("m", "misbehave", json!({ "mode": "spin", "amount": 10 })),
        call("c", "counter", json!({})),
        call("e", "echo", json!({ "text": "ab", "repeat": 0 })),
    ];
    for _ in 0..2 {
        let reports = runner.run_reports(uncached.clone()).await;
        assert!(reports.iter().all(|r| !r.metrics.cached), "{reports:?}");
    }
    assert_eq!(cache.len(), 2);

    // The cache is opt-in.
    let plain = Runner::new(echo_and_misbehave().await).permissions(Permissions::allow_all());
    for _ in 0..2 {
        let reports = plain
            .run_reports(vec![call("p", "echo", json!({ "text": "ab" }))])
            .await;
        assert!(!reports[0].metrics.cached);
    }
}

#[tokio::test]
async fn a_changed_component_misses_the_cache() {
    let original = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let changed = toolcage_tests::with_custom_section(
        original.clone(),
        "toolcage-test",
        b"a different build",
    );
    let cache = ResultCache::new(16);
    let mut runs = Vec::new();
    for bytes in [original, changed] {
        let mut registry = builder().limits(quick_limits()).build().unwrap();
        let report = registry.load_bytes("echo", bytes).await;
        assert!(report.is_ok(), "{:?}", report.error);
        let registry = Arc::new(registry);
        let runner = Runner::new(registry.clone())
            .permissions(Permissions::allow_all())
            .cache(cache.clone());
        let echo = || vec![call("x", "echo", json!({ "text": "same" }))];
        let first = runner.run_reports(echo()).await.remove(0);
        let second = runner.run_reports(echo()).await.remove(0);
        assert_eq!(first.result.output, "same");
        assert_eq!(second.result.output, "same");
        runs.push((
            registry.tool("echo").unwrap().component_hash.clone(),
            first.metrics.cached,
            second.metrics.cached,
        ));
    }
    assert_ne!(runs[0].0, runs[1].0, "the custom section changes the hash");
    assert_eq!((runs[0].1, runs[0].2), (false, true), "miss, then hit");
    assert_eq!(
        (runs[1].1, runs[1].2),
        (false, true),
        "the changed component misses, then hits its own entry"
    );
    assert_eq!(cache.len(), 2);
}
