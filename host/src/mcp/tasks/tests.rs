//! The tasks' own tests: bounds, owners, routes, and tasks shared by
//! replicas through one store.

use super::*;
use rmcp::model::{CallToolResult, ContentBlock};

fn answer(text: &str) -> Result<CallToolResponse, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
}

async fn start<F>(tasks: &Tasks, work: F, owner: Option<Owner>) -> CallToolResponse
where
    F: Future<Output = Result<CallToolResponse, McpError>> + Send + 'static,
{
    let promoted = Arc::default();
    tasks
        .run(work, CancelToken::new(), owner, promoted, None)
        .await
        .unwrap()
}

fn id(response: &CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(task) => task.task.task_id.clone(),
        _ => panic!("not a task"),
    }
}

#[tokio::test]
async fn a_full_store_answers_in_line() {
    let tasks = Tasks::new(TaskOptions::default().after(Duration::ZERO).max_tasks(1));
    let slow = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        answer("slow")
    };
    let first = start(&tasks, slow, None).await;
    assert!(matches!(first, CallToolResponse::Task(_)));
    // The one place is taken by a running task: the next call waits.
    let second = start(&tasks, async { answer("quick") }, None).await;
    assert!(matches!(second, CallToolResponse::Complete(_)));
    // Once the first has finished, it gives its place up to a new one.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let third = start(&tasks, async { answer("again") }, None).await;
    assert!(matches!(third, CallToolResponse::Task(_)));
    assert!(
        tasks.get(&id(&first), None).await.is_err(),
        "the oldest was forgotten"
    );
}

#[tokio::test]
async fn the_oldest_results_go_first_past_the_byte_bound() {
    let text = "x".repeat(200);
    let tasks = Tasks::new(
        TaskOptions::default()
            .after(Duration::ZERO)
            .max_retained_bytes(600),
    );
    let mut ids = Vec::new();
    for _ in 0..3 {
        let text = text.clone();
        ids.push(id(&start(&tasks, async move { answer(&text) }, None).await));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(tasks.get(&ids[0], None).await.is_err());
    for id in &ids[1..] {
        let task = tasks.get(id, None).await.unwrap();
        assert!(matches!(task.payload, TaskPayload::Completed { .. }));
    }
    assert!(tasks.lock().retained_bytes <= 600);
}

#[tokio::test]
async fn a_call_dropped_before_it_becomes_a_task_stops() {
    struct Stopped(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let tasks = Tasks::new(TaskOptions::default().after(Duration::from_secs(5)));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let guard = Stopped(stopped.clone());
    let work = async move {
        let _guard = guard;
        tokio::time::sleep(Duration::from_secs(10)).await;
        answer("late")
    };
    tokio::select! {
        _ = start(&tasks, work, None) => panic!("the call ended"),
        () = tokio::time::sleep(Duration::from_millis(50)) => {}
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(stopped.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn progress_from_before_the_task_is_its_status() {
    let tasks = Tasks::new(TaskOptions::default().after(Duration::from_millis(50)));
    let promotion: Arc<Promotion> = Arc::default();
    assert!(!promotion.report("napping"), "not a task yet");
    let work = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        answer("awake")
    };
    let handle = tasks
        .run(work, CancelToken::new(), None, promotion.clone(), None)
        .await
        .unwrap();
    let CallToolResponse::Task(handle) = handle else {
        panic!("not a task")
    };
    assert_eq!(handle.task.status_message.as_deref(), Some("napping"));
    let id = handle.task.task_id;
    assert_eq!(
        tasks
            .get(&id, None)
            .await
            .unwrap()
            .task
            .status_message
            .as_deref(),
        Some("napping")
    );
    assert!(promotion.report("stretching"), "a task now");
    assert_eq!(
        tasks
            .get(&id, None)
            .await
            .unwrap()
            .task
            .status_message
            .as_deref(),
        Some("stretching")
    );
}

#[tokio::test]
async fn a_task_is_seen_only_by_its_owner() {
    let tasks = Tasks::new(TaskOptions::default().after(Duration::ZERO));
    let (mine, theirs) = (Owner([1; 32]), Owner([2; 32]));
    let task = id(&start(&tasks, async { answer("mine") }, Some(mine)).await);
    assert!(tasks.get(&task, Some(mine)).await.is_ok());
    for owner in [Some(theirs), None] {
        let error = tasks.get(&task, owner).await.unwrap_err();
        assert!(error.message.contains("there is no task"), "{error:?}");
        assert!(tasks.cancel(&task, owner).await.is_err());
    }
}

#[tokio::test]
async fn ids_are_random_and_carry_the_route() {
    let options = TaskOptions::default().after(Duration::ZERO);
    let tasks = Tasks::new(options.clone().route("r-1").unwrap());
    let a = id(&start(&tasks, async { answer("a") }, None).await);
    let b = id(&start(&tasks, async { answer("b") }, None).await);
    assert!(
        a.starts_with("r-1.") && a.len() == 4 + 32 && a != b,
        "{a} {b}"
    );
    let error = Tasks::new(options.route("r-2").unwrap())
        .get(&a, None)
        .await
        .unwrap_err();
    assert!(error.message.contains("route `r-1`"), "{error:?}");
    for bad in ["", "a.b", "a b", &"x".repeat(65)] {
        assert!(TaskOptions::default().route(bad).is_err(), "{bad:?}");
    }
}

/// Two replicas' tasks sharing one store.
fn replicas(store: &Arc<crate::state::MemoryStore>) -> (Tasks, Tasks) {
    let options = TaskOptions::default()
        .after(Duration::ZERO)
        .heartbeat(Duration::from_millis(20))
        .shared(store.clone());
    (Tasks::new(options.clone()), Tasks::new(options))
}

#[tokio::test]
async fn another_replica_answers_for_a_shared_task() {
    let store = Arc::new(crate::state::MemoryStore::default());
    let (a, b) = replicas(&store);
    let owner = Some(Owner([7; 32]));
    let work = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        answer("made on a")
    };
    let task = id(&start(&a, work, owner).await);
    let seen = b.get(&task, owner).await.unwrap();
    assert!(matches!(seen.payload, TaskPayload::Working), "{seen:?}");
    let error = b.get(&task, Some(Owner([8; 32]))).await.unwrap_err();
    assert!(error.message.contains("there is no task"), "{error:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = b.get(&task, owner).await.unwrap();
    let TaskPayload::Completed { result } = done.payload else {
        panic!("{done:?}")
    };
    assert_eq!(result["content"][0]["text"], "made on a");
}

#[tokio::test]
async fn a_cancel_through_another_replica_reaches_the_one_running_the_task() {
    let store = Arc::new(crate::state::MemoryStore::default());
    let (a, b) = replicas(&store);
    let cancel = CancelToken::new();
    let stopped = cancel.clone();
    let work = async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(10)) => answer("late"),
            () = stopped.cancelled() => Ok(CallToolResult::error(vec![ContentBlock::text("stopped")]).into()),
        }
    };
    let handle = a
        .run(work, cancel, None, Arc::default(), None)
        .await
        .unwrap();
    let task = id(&handle);
    b.cancel(&task, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for replica in [&a, &b] {
        let seen = replica.get(&task, None).await.unwrap();
        assert!(matches!(seen.payload, TaskPayload::Cancelled), "{seen:?}");
    }
}

#[test]
fn a_task_whose_replica_died_fails_after_its_heartbeats_stop() {
    let store = Arc::new(crate::state::MemoryStore::default());
    let (a, b) = replicas(&store);
    let dying = tokio::runtime::Runtime::new().unwrap();
    let work = async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        answer("never")
    };
    let task = dying.block_on(async { id(&start(&a, work, None).await) });
    drop(dying); // the replica's runtime and every task on it are gone
    let alive = tokio::runtime::Runtime::new().unwrap();
    alive.block_on(async {
        let seen = b.get(&task, None).await.unwrap();
        assert!(matches!(seen.payload, TaskPayload::Working), "{seen:?}");
        tokio::time::sleep(Duration::from_millis(20 * u64::from(shared::BEATS) + 100)).await;
        let seen = b.get(&task, None).await.unwrap();
        assert!(
            matches!(seen.payload, TaskPayload::Failed { .. }),
            "{seen:?}"
        );
        let message = seen.task.status_message.unwrap_or_default();
        assert!(
            message.contains("the replica running it stopped"),
            "{message}"
        );
        // Settled once, it stays failed.
        let again = b.get(&task, None).await.unwrap();
        assert!(matches!(again.payload, TaskPayload::Failed { .. }));
    });
}

#[tokio::test]
async fn a_shared_store_that_forgot_a_task_says_so() {
    let store = Arc::new(crate::state::MemoryStore::default());
    let (_, b) = replicas(&store);
    let error = b.get("r.0123", None).await.unwrap_err();
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(
        error.message.contains("a store restarted empty"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_task_failed_by_another_replica_stays_failed_everywhere() {
    let store = Arc::new(crate::state::MemoryStore::default());
    let (a, b) = replicas(&store);
    let cancel = CancelToken::new();
    let stopped = cancel.clone();
    let work = async move {
        stopped.cancelled().await;
        Ok(CallToolResult::error(vec![ContentBlock::text("stopped")]).into())
    };
    let handle = a.run(work, cancel.clone(), None, Arc::default(), None);
    let task = id(&handle.await.unwrap());
    // Its owner late: its liveness lapsed before its next beat.
    store.delete(&format!("task-alive:{task}")).await.unwrap();
    let seen = b.get(&task, None).await.unwrap();
    assert!(
        matches!(seen.payload, TaskPayload::Failed { .. }),
        "{seen:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(cancel.is_cancelled(), "the owner stopped its guest");
    for replica in [&a, &b] {
        let seen = replica.get(&task, None).await.unwrap();
        assert!(
            matches!(seen.payload, TaskPayload::Failed { .. }),
            "{seen:?}"
        );
        let message = seen.task.status_message.unwrap_or_default();
        assert!(
            message.contains("the replica running it stopped"),
            "{message}"
        );
    }
}
