//! The MCP server as an [rmcp](https://docs.rs/rmcp/3.11.0) `ServerHandler`.
//! Follows rmcp **=3.11.0** exactly (toolcage pins it): a toolcage release
//! that moves to another rmcp version changes what [`Handler`] implements.
//!
//! To serve on stdio or HTTP, use [`McpServer`](crate::mcp::McpServer)'s
//! own `serve_stdio` and `serve_http` instead; this is for a transport of
//! one's own:
//!
//! ```no_run
//! # async fn demo(server: toolcage::mcp::McpServer) {
//! use rmcp::ServiceExt;
//! use toolcage::integration::rmcp::Handler;
//!
//! let transport = rmcp::transport::io::stdio();
//! let running = Handler::from(server.for_connection()).serve(transport).await;
//! # }
//! ```

pub use crate::mcp::handler::Handler;
