//! What toolcage adds to a call of an upstream MCP server's tool, in one
//! process and one run: the `echo` tool of `tests/clients/upstream_server.py`
//! (the official Python SDK, over stdio) called through `Registry::call`
//! (lookup, validation, the permission stage, the output checks and
//! redaction, rmcp's client), against the same call straight to a second
//! copy of the server through the same rmcp client, with 1 and with 8 calls
//! in flight. Target (issue 37): p50 overhead at most 100 µs.
//!
//! Run with `cargo bench -p toolcage-tests --bench upstream`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use serde_json::json;
use toolcage::Registry;
use toolcage::upstream::McpServer;
use toolcage_tests::bench::{Figures, measure};
use toolcage_tests::clients_python;

const WARM_UP: usize = 200;
const CALLS: usize = 4_000;

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let python = clients_python();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    let registry = Arc::new(tokio.block_on(async {
        let server = McpServer::stdio("h", python.to_string_lossy())
            .unwrap()
            .args([script.to_string_lossy().into_owned()]);
        let mut registry = Registry::builder().build().expect("a registry");
        let report = registry.load_mcp_server(&server).await;
        assert!(report.is_ok(), "{:?}", report.error);
        registry
    }));
    let direct = Arc::new(tokio.block_on(async {
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
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
        (client.serve(io).await.expect("initialized"), child)
    }));
    let through = {
        let registry = registry.clone();
        move || {
            let registry = registry.clone();
            async move {
                let result = registry.call("mcp__h__echo", json!({ "text": "x" })).await;
                assert!(!result.is_error, "{}", result.output);
            }
        }
    };
    let straight = {
        let direct = direct.clone();
        move || {
            let direct = direct.clone();
            async move {
                let mut arguments = serde_json::Map::new();
                arguments.insert("text".into(), json!("x"));
                let params = CallToolRequestParams::new("echo").with_arguments(arguments);
                let result = direct.0.peer().call_tool(params).await.expect("answered");
                assert_ne!(result.is_error, Some(true));
            }
        }
    };
    println!(
        "\n{:<36} {:>8} {:>9} {:>9} {:>12}",
        "path", "in flight", "p50 µs", "p99 µs", "calls/s"
    );
    println!("\ntargets (issue 37), as figures in this run:");
    let mut lines = Vec::new();
    for callers in [1, 8] {
        let bare = measure(&tokio, (WARM_UP, CALLS), callers, straight.clone());
        row("straight to the server (rmcp)", callers, &bare);
        let ours = measure(&tokio, (WARM_UP, CALLS), callers, through.clone());
        row("through toolcage", callers, &ours);
        lines.push(format!(
            "  p50 overhead, {callers} in flight: {:+.1} µs (target <= 100)",
            us(ours.p50) - us(bare.p50)
        ));
    }
    for line in lines {
        println!("{line}");
    }
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn row(label: &str, callers: usize, figures: &Figures) {
    println!(
        "{label:<36} {callers:>8} {:>9.1} {:>9.1} {:>12.0}",
        us(figures.p50),
        us(figures.p99),
        figures.per_second
    );
}
