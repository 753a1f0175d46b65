//! The points where toolcage speaks another crate's types, for an embedder
//! who integrates it into an application built on that crate. Everything
//! else in toolcage's API takes and returns toolcage's own types.
//!
//! Each submodule follows the version of its crate that toolcage depends
//! on, named in its docs: when toolcage moves to another version of that
//! crate, the submodule's signatures move with it, and an embedder using
//! it moves too. An embedder who does not need one can ignore it, and
//! toolcage's other updates never break them on that crate's account.
//!
//! - [`axum`]: the MCP server as an axum `Router`, to mount in one's own
//!   axum application (the `mcp` feature).
//! - [`rmcp`]: the MCP server as rmcp's `ServerHandler`, to serve it on a
//!   transport of one's own (the `mcp` feature).
//! - [`otel`]: [`Telemetry`](crate::telemetry::Telemetry) over one's own
//!   OpenTelemetry SDK providers (the `otel` feature).
//!
//! Threat model: none of their own; what they hand out keeps every check
//! of the server or telemetry it comes from.

#[cfg(feature = "mcp")]
pub mod axum;
#[cfg(feature = "otel")]
pub mod otel;
#[cfg(feature = "mcp")]
pub mod rmcp;
