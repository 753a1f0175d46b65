//! What keeping tasks in Redis costs, over MCP 2026-07-28 in process
//! (toolcage's `McpServer` served to rmcp's client over an in-memory
//! duplex, see `support/mcp_client.rs`), against tasks in the process's
//! memory, interleaved so that both sides of each ratio see the same
//! machine. Redis is Debian's `redis-server` on 127.0.0.1 (fetched into
//! target/ as the tests fetch it). Every call of the client becomes a task
//! at once (`after` zero); the tool is the bundled `calc`.
//! - `tasks/get` of a finished task: from this server's memory, against a
//!   second server sharing the Redis (so it reads the task's record), p50
//!   and p99;
//! - a task's whole life: the `tools/call` making it, three polls and the
//!   poll bringing its result, on one server with tasks in memory, against
//!   made on one server and polled on another through Redis: the overhead
//!   at the p50 (target ≤ 2 ms).
//!
//! Run with `cargo bench -p toolcage-tests --bench tasks`.

#[path = "support/latency.rs"]
mod latency;
#[path = "support/mcp_client.rs"]
mod mcp_client;

use std::sync::Arc;
use std::time::{Duration, Instant};

use latency::{met, ms, p50, percentile};

use rmcp::model::{CallToolRequestParams, CallToolResponse, GetTaskParams, TaskStatus};
use serde_json::json;
use toolcage::Registry;
use toolcage::agent::Permissions;
use toolcage::mcp::{McpServer, TaskOptions};
use toolcage::state::{RedisOptions, RedisStore, StateOptions, StateStore};

const GETS: usize = 2000;
const LIVES: usize = 300;
const WARM_UP: usize = 20;

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let redis = toolcage_tests::Redis::start();
    let registry = Arc::new(tokio.block_on(bundled()));
    println!("{:<64} {:>9} {:>9}", "path", "p50 ms", "p99 ms");
    tokio.block_on(async {
        let options = RedisOptions::new(redis.url()).password(&redis.password);
        let store: Arc<dyn StateStore> =
            Arc::new(RedisStore::connect(&options).await.expect("Redis answers"));
        let memory = mcp_client::connect_with_tasks(&server(&registry, None)).await;
        let a = mcp_client::connect_with_tasks(&server(&registry, Some(&store))).await;
        let b = mcp_client::connect_with_tasks(&server(&registry, Some(&store))).await;
        gets(&memory, &a, &b).await;
        lives(&memory, &a, &b).await;
    });
}

async fn bundled() -> Registry {
    let mut registry = toolcage_tests::builder().build().expect("a registry");
    for report in registry.load_bundled().await {
        toolcage_tests::assert_loaded(&report);
    }
    registry
}

/// A server making every call of a client declaring tasks a task, its
/// tasks in `shared` when given.
fn server(registry: &Arc<Registry>, shared: Option<&Arc<dyn StateStore>>) -> McpServer {
    let mut tasks = TaskOptions::default().after(Duration::ZERO);
    let mut state = StateOptions::new();
    if let Some(store) = shared {
        tasks = tasks.shared(store.clone());
        state = state.store(store.clone());
    }
    McpServer::new(registry.clone())
        .permissions(Permissions::from_rules("allow", [("calc", "allow")]).expect("rules"))
        .state(state)
        .tasks(Some(tasks))
}

/// Makes a task of `calc` on `client`'s server: its id.
async fn create(client: &mcp_client::Client) -> String {
    let arguments = json!({ "expression": "6 * 7" });
    let serde_json::Value::Object(arguments) = arguments else {
        unreachable!()
    };
    let params = CallToolRequestParams::new("calc").with_arguments(arguments);
    match client
        .peer()
        .call_tool_once(params)
        .await
        .expect("answered")
    {
        CallToolResponse::Task(task) => task.task.task_id,
        other => panic!("not a task: {other:?}"),
    }
}

async fn get(client: &mcp_client::Client, id: &str) -> TaskStatus {
    let got = client.peer().get_task(GetTaskParams::new(id)).await;
    got.expect("tasks/get answered").task.task.status
}

/// Polls `id` on `client` until it ends.
async fn finished(client: &mcp_client::Client, id: &str) {
    while matches!(get(client, id).await, TaskStatus::Working) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn gets(memory: &mcp_client::Client, a: &mcp_client::Client, b: &mcp_client::Client) {
    let local = create(memory).await;
    finished(memory, &local).await;
    let shared = create(a).await;
    finished(b, &shared).await;
    let (mut here, mut there) = (Vec::new(), Vec::new());
    for round in 0..WARM_UP + GETS {
        let started = Instant::now();
        assert_eq!(get(memory, &local).await, TaskStatus::Completed);
        let in_memory = started.elapsed();
        let started = Instant::now();
        assert_eq!(get(b, &shared).await, TaskStatus::Completed);
        let in_redis = started.elapsed();
        if round >= WARM_UP {
            here.push(in_memory);
            there.push(in_redis);
        }
    }
    row("tasks/get, the task in this server's memory", &mut here);
    row(
        "tasks/get, the task in Redis (made by another server)",
        &mut there,
    );
}

async fn lives(memory: &mcp_client::Client, a: &mcp_client::Client, b: &mcp_client::Client) {
    let (mut here, mut there) = (Vec::new(), Vec::new());
    for round in 0..WARM_UP + LIVES {
        let in_memory = life(memory, memory).await;
        let in_redis = life(a, b).await;
        if round >= WARM_UP {
            here.push(in_memory);
            there.push(in_redis);
        }
    }
    let overhead = ms(p50(&mut there)) - ms(p50(&mut here));
    row(
        "a task's life (call, 3 polls, result), in memory",
        &mut here,
    );
    row(
        "a task's life, made on one server, polled on another via Redis",
        &mut there,
    );
    println!(
        "Redis's overhead on a task's life at the p50: {overhead:.2} ms (target <= 2 ms: {})",
        met(overhead <= 2.0)
    );
}

/// One task's life: made on `maker`, polled three times and then until
/// its result on `poller`.
async fn life(maker: &mcp_client::Client, poller: &mcp_client::Client) -> Duration {
    let started = Instant::now();
    let id = create(maker).await;
    for _ in 0..3 {
        get(poller, &id).await;
    }
    finished(poller, &id).await;
    started.elapsed()
}

fn row(label: &str, latencies: &mut [Duration]) {
    let p99 = percentile(latencies, 0.99);
    println!("{label:<64} {:>9.3} {:>9.3}", ms(p50(latencies)), ms(p99));
}
