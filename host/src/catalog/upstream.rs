//! Tools that an upstream MCP server serves: what the registry holds of them.
//!
//! Threat model: an upstream server is not a component. It runs outside the
//! sandbox, with the rights it was started (or reached) with, so the only
//! limits toolcage can hold it to are the ones a client can: its tools are
//! named under the server's prefix and take part in first-wins like any
//! other; their descriptors pass the same checks as a component's; each call
//! is validated, permission-checked, timed out, cancelled upstream, and its
//! answer capped, checked against the tool's output schema and redacted. How
//! a server is started or reached lives in `crate::upstream`; the registry
//! only knows the [`Upstream`] link.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::elicit::Elicitor;
use crate::sandbox::limits::Limits;
use crate::sandbox::outcome::{ErrorKind, EventSink};
use crate::sandbox::secrets::Secrets;

/// What a call to an upstream tool came back with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum UpstreamAnswer {
    /// The server answered: its text for the model, its structured result,
    /// and whether it reports the call as failed (`isError`).
    #[cfg_attr(not(feature = "mcp-client"), allow(dead_code))]
    Answered {
        output: String,
        details: Option<Value>,
        is_error: bool,
    },
    /// No answer: the server is unavailable, broke the protocol, or took
    /// longer than the call's timeout.
    Failed { kind: ErrorKind, output: String },
}

/// The future of an upstream call.
pub(crate) type Answering<'a> = Pin<Box<dyn Future<Output = UpstreamAnswer> + Send + 'a>>;

/// The future of closing an upstream server's connection.
pub(crate) type Closing<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// How the registry reaches an upstream server's tools.
pub(crate) trait Upstream: Send + Sync {
    /// Calls the server's tool `tool` with `arguments` (valid against its
    /// input schema), answering within `timeout`, its progress and log
    /// notifications sent to `events`, its questions to the user asked
    /// through `elicitor`. Dropping the future cancels the call upstream.
    fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        events: Option<EventSink>,
        elicitor: Option<Elicitor>,
    ) -> Answering<'_>;

    /// Ends the connection within `bound` (a stdio server's process is
    /// killed if it outlives it).
    fn close(&self, bound: Duration) -> Closing<'_>;
}

/// One upstream server's tool, as registered.
pub(crate) struct UpstreamTool {
    /// The tool's own name on the server (the registry's is prefixed).
    pub tool: String,
    /// The limits its calls run under: the timeout and the output cap apply;
    /// the others bind a sandbox, which an upstream tool does not run in.
    pub limits: Limits,
    /// The server.
    pub link: Arc<dyn Upstream>,
    /// The operator's secrets: none of them reaches a caller in an answer.
    pub secrets: Secrets,
}
