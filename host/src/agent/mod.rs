//! Plugging a [`Registry`](crate::Registry) into an agent loop: tool
//! definitions for the model, the model's tool calls parsed from a provider's
//! response, batches of calls run under the operator's permission rules, and
//! results rendered back in the provider's format.
//!
//! Formats: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
//! MCP ([`Format`]). One turn of a loop:
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolcage::agent::{self, Format, Permission, Permissions, Runner};
//!
//! # async fn demo(registry: toolcage::Registry, response: serde_json::Value) -> Result<(), Box<dyn std::error::Error>> {
//! let runner = Runner::new(Arc::new(registry))
//!     .permissions(Permissions::allow_all().rule("write_*", Permission::Ask)?)
//!     .approver(|request: agent::ApprovalRequest| async move { agent::Approval::Approve });
//! let tools = runner.definitions(Format::OpenAi); // `tools` of the request
//! let (format, calls) = agent::parse_calls(&response, None)?; // the model's reply
//! let results = runner.run(calls.clone()).await;
//! let messages = agent::render_results(format, &calls, &results); // append to the conversation
//! # Ok(())
//! # }
//! ```
//!
//! # Threat model
//!
//! Everything in a model's response is untrusted: it may name tools that do
//! not exist, send arguments that are not JSON, or have been steered by a
//! prompt injection into calling tools it should not. Parsing checks only
//! the provider's envelope; what the model wrote becomes a result the model
//! can act on, never an `Err` or a panic. The operator's [`Permissions`]
//! (deny-by-default in a [`Runner`]) decide which calls run, with `ask`
//! deferring to an embedder's [`Approver`]. Tools' side-effect hints are
//! their own claims: they decide scheduling (read-only batches run
//! concurrently) and caching (read-only, idempotent tools may be cached, when
//! the embedder opts in), never security, which rests on the sandbox.

mod batch;
mod events;
pub(crate) mod formats;

pub use crate::call::{CallReport, Metrics, ResultCache};
pub use crate::catalog::permissions::{
    Approval, ApprovalRequest, Approver, LiveRules, Permission, Permissions, PermissionsError,
    UnknownPermission,
};
pub use batch::{OnDenial, Runner};
pub use events::AgentEvent;
pub use formats::{
    CallKind, Format, ParseError, ToolCall, UnknownFormat, definition, definitions, detect,
    parse_calls, render_results, strict_compatible,
};
