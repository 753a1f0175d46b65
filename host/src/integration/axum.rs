//! The MCP server as an [axum](https://docs.rs/axum/0.8) `Router`. Follows
//! axum **0.8**: a toolcage release that moves to another axum version
//! changes this module's signatures.
//!
//! To serve on a listener of toolcage's own, with its limits on
//! connections, use [`McpServer::serve_http`] instead.

use std::net::SocketAddr;

use crate::mcp::http::HttpOptions;
use crate::mcp::{McpServer, Shutdown};

/// The HTTP application of `server`, reached at `addr` (whose host and port
/// its `Host` and `Origin` checks accept): `/mcp` and `/healthz` (and
/// `/metrics`, when `options` ask), to mount in an axum application.
/// `shutdown` ends its sessions and streams when triggered.
///
/// The limits on connections ([`limits`](crate::mcp::http::limits): their
/// number, head size and time, idle time) are kept by whoever accepts the
/// connections ([`McpServer::serve_http`] does; here, the embedder); the
/// application keeps the rest (the bearer tokens, the body cap and
/// timeout, the session cap).
pub fn router(
    server: &McpServer,
    addr: SocketAddr,
    options: &HttpOptions,
    shutdown: &Shutdown,
) -> ::axum::Router {
    server.router(addr, options, shutdown.token())
}
