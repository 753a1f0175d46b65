//! What toolcage adds to a call of an upstream MCP server's tool, in one
//! process and one run: an `echo` tool called through `Registry::call`
//! (lookup, validation, the permission stage, the output checks and
//! redaction, rmcp's client), against the same call straight to a second
//! copy of the server through the same rmcp client, with 1 and with 8 calls
//! in flight. Target (issue 37): p50 overhead at most 100 µs.
//!
//! Two servers over stdio: `toolcage serve` itself serving the `echo`
//! fixture (a fast server, about 100 µs a call, so that toolcage's part
//! shows), and `tests/clients/upstream_server.py` (the official Python
//! SDK, about 900 µs a call, whose own spread hides a 100 µs difference).
//!
//! Run with `cargo build --release -p toolcage --bin toolcage`, then
//! `cargo bench -p toolcage-tests --bench upstream`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use serde_json::json;
use toolcage::Registry;
use toolcage::upstream::UpstreamServer;
use toolcage_tests::bench::{Figures, measure};
use toolcage_tests::guests;

const WARM_UP: usize = 200;
const CALLS: usize = 4_000;

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let target = target_dir();
    let toolcage = target.join("release/toolcage");
    assert!(
        toolcage.exists(),
        "{} is missing: cargo build --release -p toolcage --bin toolcage",
        toolcage.display()
    );
    let tools = tempfile::tempdir().expect("a directory");
    std::fs::copy(guests::FIXTURE_ECHO, tools.path().join("echo.wasm")).expect("echo");
    let tools_dir = tools.path().to_string_lossy().into_owned();
    let served: Vec<String> = ["--no-bundled", "--tools", &tools_dir, "serve"]
        .map(String::from)
        .to_vec();
    let python = target.join("clients-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `cargo test` makes the clients' virtualenv",
        python.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    let python_args = vec![script.to_string_lossy().into_owned()];
    let mut lines = Vec::new();
    println!(
        "\n{:<44} {:>9} {:>9} {:>9} {:>10}",
        "path", "in flight", "p50 µs", "p99 µs", "calls/s"
    );
    for (label, program, args, tool) in [
        ("toolcage serve (echo fixture)", &toolcage, &served, "echo"),
        ("Python SDK server", &python, &python_args, "echo"),
    ] {
        let (through, straight) = tokio.block_on(paths(program, args, tool));
        for callers in [1, 8] {
            let call = straight.clone();
            let bare = measure(&tokio, (WARM_UP, CALLS), callers, move || call());
            row(&format!("{label}: straight (rmcp)"), callers, &bare);
            let call = through.clone();
            let ours = measure(&tokio, (WARM_UP, CALLS), callers, move || call());
            row(&format!("{label}: through toolcage"), callers, &ours);
            lines.push(format!(
                "  {label}, {callers} in flight: p50 overhead {:+.1} µs (target <= 100), calls/s {:.2}x",
                us(ours.p50) - us(bare.p50),
                ours.per_second / bare.per_second
            ));
        }
    }
    println!("\ntargets (issue 37), as figures in this run:");
    for line in lines {
        println!("{line}");
    }
}

/// A call through toolcage, and the same call straight to the server.
type Pair = (Call, Call);
type Call = Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// A registry holding `program args` as the upstream server `u`, and a
/// second copy of it behind a bare rmcp client: a call of `tool` through
/// each.
async fn paths(program: &std::path::Path, args: &[String], tool: &'static str) -> Pair {
    let server = UpstreamServer::stdio("u", program.to_string_lossy())
        .unwrap()
        .args(args.iter().cloned());
    let mut registry = Registry::builder().build().expect("a registry");
    let report = registry.load_mcp_server(&server).await;
    assert!(report.is_ok(), "{:?}", report.error);
    let registry = Arc::new(registry);
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts");
    let io = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bench", "1"),
    )
    .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25);
    let direct = Arc::new((client.serve(io).await.expect("initialized"), child));
    let name = format!("mcp__u__{tool}");
    let through = Arc::new(move || {
        let (registry, name) = (registry.clone(), name.clone());
        Box::pin(async move {
            let result = registry.call(&name, json!({ "text": "x" })).await;
            assert!(!result.is_error, "{}", result.output);
        }) as futures::future::BoxFuture<'static, ()>
    });
    let straight = Arc::new(move || {
        let direct = direct.clone();
        Box::pin(async move {
            let mut arguments = serde_json::Map::new();
            arguments.insert("text".into(), json!("x"));
            let params = CallToolRequestParams::new(tool).with_arguments(arguments);
            let result = direct.0.peer().call_tool(params).await.expect("answered");
            assert_ne!(result.is_error, Some(true));
        }) as futures::future::BoxFuture<'static, ()>
    });
    (through, straight)
}

/// `target/`: above this bench's profile directory.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench has a path");
    exe.ancestors()
        .nth(3)
        .expect("target/<profile>/deps/<bench>")
        .to_path_buf()
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn row(label: &str, callers: usize, figures: &Figures) {
    println!(
        "{label:<44} {callers:>9} {:>9.1} {:>9.1} {:>10.0}",
        us(figures.p50),
        us(figures.p99),
        figures.per_second
    );
}
