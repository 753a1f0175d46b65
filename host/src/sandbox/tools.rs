//! The guest's `toolcage:tool/tools`: a tool calling other tools. The calls
//! themselves belong to the layer above (the one call path), which hands
//! the sandbox a [`ToolCalls`] to run them through; the sandbox only
//! carries the requests out and the results in, and knows nothing of
//! catalogs, rules or grants.
//!
//! It carries code mode's sessions (`toolcage:tool/session`) the same way:
//! the layer above decides whose they are and keeps them.
//!
//! Threat model: the caller is hostile and so are its requests. Whatever it
//! asks for becomes a result it reads, never a trap of its own or an error
//! of the host's: with no [`ToolCalls`] (a `describe()` calling tools) each
//! call is refused. The bytes it sends are bounded by the call's transfer
//! cap and, above, by its tree's budget. While it waits, its slot counts as
//! parked (see `slots`), so that the nested calls of callers filling the
//! pool are refused rather than wait for a slot that cannot free.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;

use super::bindings::{WitCallResult, WitEntry, WitIdentified, WitRequest, toolcage};
use super::outcome::ErrorKind;
use super::slots::Slots;

/// One nested call a guest asks for.
#[derive(Debug, Clone)]
pub(crate) struct NestedRequest {
    pub name: String,
    /// JSON text, as the guest sent it.
    pub arguments: String,
}

/// What a nested call's caller reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NestedResponse {
    pub call_id: String,
    pub is_error: bool,
    pub error_kind: Option<ErrorKind>,
    pub output: String,
    /// JSON text.
    pub details: Option<String>,
}

/// A tool a caller may call, as `callable` lists it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallableTool {
    pub name: String,
    /// The identifier a script calls it by, one to one over the registry.
    pub identifier: Option<String>,
    pub description: String,
    /// JSON text.
    pub input_schema: String,
    /// JSON text.
    pub output_schema: Option<String>,
    pub read_only: bool,
}

/// Runs a caller's nested calls: the call path, seen from the sandbox.
pub(crate) trait ToolCalls: Send + Sync {
    /// The tools the caller may call, sorted by name.
    fn callable(&self) -> Vec<CallableTool>;

    /// Runs `requests` (together when the batch rule allows, otherwise in
    /// order), none past `deadline` (the caller's), and answers each, in
    /// order.
    fn call(
        self: Arc<Self>,
        requests: Vec<NestedRequest>,
        deadline: Instant,
    ) -> BoxFuture<'static, Vec<NestedResponse>>;

    /// The state saved under session `name` for the call's caller, if it
    /// has sessions and one is there; or why it could not be read.
    fn load_session(
        self: Arc<Self>,
        name: String,
    ) -> BoxFuture<'static, Result<Option<Vec<u8>>, String>>;

    /// Saves `state` under session `name` for the call's caller, or says
    /// why it did not.
    fn save_session(
        self: Arc<Self>,
        name: String,
        state: Vec<u8>,
    ) -> BoxFuture<'static, Result<(), String>>;
}

/// A call's `toolcage:tool/tools`: what runs its nested calls, if anything.
pub(crate) struct ToolsCtx {
    /// What runs the calls, and the slots the caller's counts as parked in
    /// while it waits; `None` for a call that may call nothing (most), so
    /// that it pays nothing for the interface.
    calls: Option<(Arc<dyn ToolCalls>, Slots)>,
    deadline: Instant,
}

impl ToolsCtx {
    /// Nested calls through `calls`, within `deadline`; a caller's slot in
    /// `slots` counts as parked while it waits.
    pub(crate) fn new(calls: Option<Arc<dyn ToolCalls>>, deadline: Instant, slots: &Slots) -> Self {
        ToolsCtx {
            calls: calls.map(|calls| (calls, slots.clone())),
            deadline,
        }
    }

    async fn run(&mut self, requests: Vec<NestedRequest>) -> Vec<NestedResponse> {
        let Some((calls, slots)) = &self.calls else {
            return requests.iter().map(|r| not_here(&r.name)).collect();
        };
        let _parked = slots.park();
        calls.clone().call(requests, self.deadline).await
    }
}

/// The answer to a call of `tool` where no calls can be made: while the
/// component is described.
fn not_here(tool: &str) -> NestedResponse {
    NestedResponse {
        call_id: String::new(),
        is_error: true,
        error_kind: Some(ErrorKind::Unsupported),
        output: format!(
            "`{tool}` was not called: a tool can call tools only while it runs a call, not while it is loaded and describes itself."
        ),
        details: None,
    }
}

impl From<NestedResponse> for WitCallResult {
    fn from(response: NestedResponse) -> Self {
        WitCallResult {
            call_id: response.call_id,
            is_error: response.is_error,
            error_kind: response.error_kind.map(|kind| kind.as_str().to_string()),
            output: response.output,
            details: response.details,
        }
    }
}

impl From<CallableTool> for WitIdentified {
    fn from(tool: CallableTool) -> Self {
        WitIdentified {
            identifier: tool.identifier,
            entry: WitEntry {
                name: tool.name,
                description: tool.description,
                input_schema: tool.input_schema,
                output_schema: tool.output_schema,
                read_only: tool.read_only,
            },
        }
    }
}

impl ToolsCtx {
    fn callable_tools(&self) -> Vec<CallableTool> {
        match &self.calls {
            Some((calls, _)) => calls.callable(),
            None => Vec::new(),
        }
    }
}

impl toolcage::tool::session::Host for ToolsCtx {
    async fn load(&mut self, name: String) -> Result<Option<Vec<u8>>, String> {
        match &self.calls {
            Some((calls, _)) => calls.clone().load_session(name).await,
            None => Ok(None),
        }
    }

    async fn save(&mut self, name: String, state: Vec<u8>) -> Result<(), String> {
        match &self.calls {
            Some((calls, _)) => calls.clone().save_session(name, state).await,
            None => Err(NO_SESSIONS.to_string()),
        }
    }
}

/// Why a tool without sessions saves none.
pub(crate) const NO_SESSIONS: &str = "sessions are kept for code mode's `run_code` alone";

impl toolcage::tool::tools::Host for ToolsCtx {
    fn callable(&mut self) -> Vec<WitEntry> {
        let tools = self.callable_tools().into_iter();
        tools.map(|tool| WitIdentified::from(tool).entry).collect()
    }

    fn callable_identified(&mut self) -> Vec<WitIdentified> {
        let tools = self.callable_tools().into_iter();
        tools.map(WitIdentified::from).collect()
    }

    async fn call(&mut self, name: String, arguments: String) -> WitCallResult {
        let request = NestedRequest { name, arguments };
        let mut responses = self.run(vec![request]).await;
        responses.pop().expect("one response per request").into()
    }

    async fn call_all(&mut self, requests: Vec<WitRequest>) -> Vec<WitCallResult> {
        let requests = requests
            .into_iter()
            .map(|request| NestedRequest {
                name: request.name,
                arguments: request.arguments,
            })
            .collect();
        let responses = self.run(requests).await;
        responses.into_iter().map(WitCallResult::from).collect()
    }
}
