//! Questions a tool's server asks the user during a call (MCP calls this
//! elicitation), and who answers them.
//!
//! Threat model: the question comes from an upstream MCP server, which is
//! untrusted: it is passed to the user as a question from that server about
//! that call, never answered by toolcage itself, and a call whose caller
//! gave no way to ask is answered "declined". The answer goes only to the
//! server that asked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

/// A question for the user, from the server of the tool being called.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationRequest {
    /// The tool whose call the question comes up in.
    pub tool: String,
    /// The arguments of that call.
    pub arguments: Value,
    /// What the server asks, for the user.
    pub message: String,
    /// The JSON Schema of the answer it wants (an object of primitive
    /// fields).
    pub schema: Value,
}

/// The user's answer to an [`ElicitationRequest`].
#[derive(Debug, Clone, PartialEq)]
pub enum Elicitation {
    /// The user answered with this object.
    Accept(Value),
    /// The user declined to answer (or nobody could be asked).
    Decline,
    /// The user dismissed the question.
    Cancel,
}

/// The future of an answer.
pub(crate) type Answering = Pin<Box<dyn Future<Output = Elicitation> + Send>>;

/// Asks the user; see [`CallOptions::on_elicitation`](crate::CallOptions::on_elicitation).
pub(crate) type Elicitor = Arc<dyn Fn(ElicitationRequest) -> Answering + Send + Sync>;
