//! Upstream MCP servers' tools in the registry, against real servers over
//! stdio: the MCP project's own `server-everything` (from the npm
//! registry), and `tests/clients/upstream_server.py`, written with the
//! official Python SDK, whose hostile tools crash, flood, hang or declare a
//! broken schema. Every call takes the one path: validated, permission
//! checked, timed out, capped, redacted, and callable from code mode. A
//! server's progress and logs are its calls' events, its list changes swap
//! its tools in, and bubblewrap confines one (shown against the same
//! server unconfined).
//!
//! Split by topic; the servers the tests start, and the registries they
//! start them in, are here.

mod confinement;
mod http;
mod lifecycle;
mod questions;
mod registry;
mod stdio;

use std::path::PathBuf;

use toolcage::upstream::UpstreamServer;
use toolcage::{LiveRegistry, Registry};
use toolcage_tests::{assert_loaded, builder, client_clis, clients_python};

/// `server-everything` over stdio, run by `node` itself: its environment
/// is empty, so a `#!/usr/bin/env node` script would find no `node`.
fn everything() -> UpstreamServer {
    let script = std::fs::canonicalize(client_clis().join("mcp-server-everything"))
        .expect("server-everything is installed");
    UpstreamServer::stdio("everything", "node")
        .unwrap()
        .args([script.to_string_lossy().into_owned(), "stdio".into()])
}

/// `tests/clients/upstream_server.py`, named `name`, on the clients'
/// Python.
fn hostile(name: &str) -> UpstreamServer {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    UpstreamServer::stdio(name, clients_python().to_string_lossy())
        .unwrap()
        .args([script.to_string_lossy().into_owned()])
}

async fn registry_with(server: &UpstreamServer) -> Registry {
    let mut registry = builder().build().unwrap();
    assert_loaded(&registry.load_mcp_server(server).await);
    registry
}

/// A live registry of one empty directory (kept while the second value
/// lives), following `server`.
async fn live_with(server: &UpstreamServer) -> (LiveRegistry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (live, _) = LiveRegistry::load(builder().build().unwrap(), [dir.path()])
        .await
        .unwrap();
    assert!(live.load_mcp_server(server).await.error.is_none());
    (live, dir)
}
