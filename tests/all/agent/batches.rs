//! Batches: read-only calls run concurrently (within the cap), a writing
//! tool makes a batch serial, results come back in order.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_batch_runs_concurrently_in_order() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let calls: Vec<ToolCall> = ["a", "b", "c"]
        .into_iter()
        .map(|text| call(text, "echo", json!({ "text": text, "sleep_ms": 500 })))
        .collect();
    assert!(runner.runs_concurrently(&calls));
    let started = Instant::now();
    let results = runner.run(calls).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1200),
        "three 500 ms calls took {elapsed:?}"
    );
    let outputs: Vec<&str> = results.iter().map(|r| r.output.as_str()).collect();
    assert_eq!(outputs, ["a", "b", "c"]);
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_cap_bounds_a_read_only_batch() {
    let runner = Runner::new(echo_registry().await)
        .permissions(Permissions::allow_all())
        .concurrency(2);
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| {
            call(
                &format!("c{i}"),
                "echo",
                json!({ "text": i.to_string(), "sleep_ms": 300 }),
            )
        })
        .collect();
    let started = Instant::now();
    let results = runner.run(calls.clone()).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(600),
        "two rounds of 300 ms took {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1100),
        "two rounds of 300 ms took {elapsed:?}"
    );
    assert!(results.iter().all(|r| !r.is_error));
    assert!(
        !runner.clone().concurrency(0).runs_concurrently(&calls),
        "a cap of 0 counts as 1: serial"
    );
}

#[tokio::test]
async fn a_batch_with_a_writing_tool_runs_serially_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let builder = builder()
        .limits(quick_limits())
        .mount(Mount::read_write(dir.path(), "/scratch"));
    let registry =
        Arc::new(registry(builder, &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE]).await);
    let runner = Runner::new(registry).permissions(Permissions::allow_all());
    let calls = vec![
        call(
            "w",
            "misbehave",
            json!({ "mode": "write", "path": "/scratch/note.txt", "content": "written first" }),
        ),
        call(
            "r",
            "misbehave",
            json!({ "mode": "read", "path": "/scratch/note.txt" }),
        ),
        call(
            "e",
            "echo",
            json!({ "text": "read-only, but in a mixed batch" }),
        ),
    ];
    assert!(!runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "written", "{}", results[0].output);
    assert_eq!(
        results[1].output, "written first",
        "the read sees the write"
    );
    assert!(!results[2].is_error);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "written first"
    );

    // Serial means one after the other: two 300 ms calls take 600 ms.
    let calls = vec![
        call("s1", "echo", json!({ "text": "x", "sleep_ms": 300 })),
        call("s2", "misbehave", json!({ "mode": "sleep", "amount": 300 })),
    ];
    let started = Instant::now();
    let results = runner.run(calls).await;
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(results[1].output, "woke up");
}

#[tokio::test]
async fn an_unknown_tool_does_not_make_a_batch_serial() {
    let runner = Runner::new(echo_registry().await).permissions(Permissions::allow_all());
    let calls = vec![
        call("1", "echo", json!({ "text": "x" })),
        call("2", "nope", json!({})),
    ];
    assert!(runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "x");
    assert_eq!(results[1].error_kind, Some(ErrorKind::NotFound));
    assert_eq!(results[1].call_id, "2");
    assert!(runner.run(Vec::new()).await.is_empty());
}
