//! Durable code mode's costs over MCP 2026-07-28, in process (toolcage's
//! `McpServer` served to rmcp's client over an in-memory duplex, see
//! `support/mcp_client.rs`), with the real `code` component and the bundled
//! tools, interleaved so that both sides of each ratio see the same machine:
//! - a pause and its resume: a script making 10 calls (the first reads a
//!   100 KB file whole, so the run's log holds 100 KB), then a `write_file` under
//!   an `ask` rule, answered on the retry, against the same script under
//!   `allow` (no question): the overhead at the p50 (target ≤ 5 ms), and the
//!   size of the state (carried by the client, or held by the server with a
//!   handle past `inline_kib`);
//! - a session run reading one value back from a 1 MiB session, against the
//!   same script without a session: the overhead at the p50 (target ≤ 1 ms).
//!
//! Run with `cargo bench -p toolcage-tests --bench durable`.

#[path = "support/latency.rs"]
mod latency;
#[path = "support/mcp_client.rs"]
mod mcp_client;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use latency::{met, ms, p50, percentile};

use rmcp::model::CallToolResponse;
use serde_json::json;
use toolcage::agent::Permissions;
use toolcage::mcp::McpServer;
use toolcage::state::{MemoryStore, StateOptions};
use toolcage::{Mount, Registry};

const ROUNDS: usize = 40;
const WARM_UP: usize = 3;
const BIG_FILE: usize = 100_000;

/// Ten calls, the first reading the big file, then a write.
const PAUSED: &str = r#"data = (await read_file(path="/w/big.txt"))["output"]
n = len(data)
for i in range(9):
    await calc(expression="1 + 1")
    n += 1
await write_file(path="/w/out.txt", content=str(n))
n"#;

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let tree = tempfile::tempdir().expect("a temporary directory");
    let line = format!("{}\n", "abcdefghij".repeat(99));
    let text = line.repeat(BIG_FILE / line.len());
    std::fs::write(tree.path().join("big.txt"), text).unwrap();
    let registry = Arc::new(tokio.block_on(bundled(tree.path())));
    println!("{:<64} {:>9} {:>9}", "path", "p50 ms", "p90 ms");
    tokio.block_on(pause_and_resume(&registry));
    tokio.block_on(session_read(&registry));
}

/// The bundled tools, `tree` lent read-write at /w.
async fn bundled(tree: &Path) -> Registry {
    let mut registry = toolcage_tests::builder()
        .mount(Mount::read_write(tree, "/w"))
        .build()
        .expect("a registry");
    for report in registry.load_bundled().await {
        toolcage_tests::assert_loaded(&report);
    }
    registry
}

fn server(registry: &Arc<Registry>, write_file: &str, store: Arc<MemoryStore>) -> McpServer {
    let rules = Permissions::from_rules("allow", [("write_file", write_file)]).expect("rules");
    McpServer::new(registry.clone())
        .permissions(rules)
        .state(StateOptions::new().store(store))
}

async fn pause_and_resume(registry: &Arc<Registry>) {
    let store = Arc::new(MemoryStore::default());
    let asking = mcp_client::connect(&server(registry, "ask", store.clone())).await;
    let plain = mcp_client::connect(&server(registry, "allow", Arc::default())).await;
    let arguments = json!({ "code": PAUSED });
    let (mut paused, mut straight) = (Vec::new(), Vec::new());
    let mut state = (0, 0);
    for round in 0..WARM_UP + ROUNDS {
        let started = Instant::now();
        let response = mcp_client::call_once(&asking, "run_code", arguments.clone()).await;
        let CallToolResponse::InputRequired(asked) = response else {
            panic!("the script asked nothing: {response:?}");
        };
        state = (
            asked.request_state.as_ref().map_or(0, String::len),
            store.bytes(),
        );
        let result = mcp_client::approve(&asking, "run_code", arguments.clone(), asked).await;
        let took = started.elapsed();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let started = Instant::now();
        let result = mcp_client::call(&plain, "run_code", arguments.clone()).await;
        let plain_took = started.elapsed();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        if round >= WARM_UP {
            paused.push(took);
            straight.push(plain_took);
        }
    }
    row(
        "run_code, 10 calls (100 KB read) + a question, paused and resumed",
        &mut paused,
    );
    row("the same script under `allow`, no question", &mut straight);
    let overhead = p50(&mut paused).saturating_sub(p50(&mut straight));
    println!(
        "  pause and resume overhead at the p50: {:.2} ms (target <= 5 ms: {})",
        ms(overhead),
        met(overhead <= Duration::from_millis(5))
    );
    let how = match state.0 < 1024 {
        true => "a handle: the state is past inline_kib and stays in the server's store",
        false => "the sealed state itself, within inline_kib",
    };
    println!(
        "  state: the client carried {} bytes ({how}); the server's store held {} bytes while the run was paused",
        state.0, state.1
    );
}

async fn session_read(registry: &Arc<Registry>) {
    let server = McpServer::new(registry.clone()).permissions(Permissions::allow_all());
    let client = mcp_client::connect(&server).await;
    let seed = json!({ "code": "big = 'x' * (1 << 20)\nsmall = 1\nsmall", "session": "s" });
    let seeded = mcp_client::call(&client, "run_code", seed).await;
    let kept = seeded
        .structured_content
        .as_ref()
        .map(|details| details["session"].clone());
    let session = json!({ "code": "small", "session": "s" });
    let alone = json!({ "code": "small = 1\nsmall" });
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..WARM_UP + ROUNDS {
        let started = Instant::now();
        let result = mcp_client::call(&client, "run_code", session.clone()).await;
        let took = started.elapsed();
        assert_eq!(mcp_client::text_bytes(&result), 1, "{result:?}");
        let started = Instant::now();
        let result = mcp_client::call(&client, "run_code", alone.clone()).await;
        let alone_took = started.elapsed();
        assert_eq!(mcp_client::text_bytes(&result), 1, "{result:?}");
        if round >= WARM_UP {
            with.push(took);
            without.push(alone_took);
        }
    }
    println!();
    row(
        "run_code reading a value back from a 1 MiB session",
        &mut with,
    );
    row("the same script without a session", &mut without);
    let overhead = p50(&mut with).saturating_sub(p50(&mut without));
    println!(
        "  session overhead at the p50: {:.2} ms (target <= 1 ms: {}); the session: {}",
        ms(overhead),
        met(overhead <= Duration::from_millis(1)),
        kept.unwrap_or_default()
    );
}

fn row(label: &str, latencies: &mut [Duration]) {
    let p90 = percentile(latencies, 0.9);
    println!("{label:<64} {:>9.2} {:>9.2}", ms(p50(latencies)), ms(p90));
}
