//! The options of one call: its id, who hears its guest's events, what
//! cancels it, and the policy it is checked against.

use std::sync::Arc;

use super::nested::{NestedEvent, NestedSink, Nesting, Replay};
use super::{CallPolicy, Tracer};
use crate::catalog::elicit::{Elicitation, ElicitationRequest, Elicitor};
use crate::sandbox::outcome::{CancelToken, EventSink, GuestEvent};
use crate::state::SessionScope;

/// Options of one call. By default: a generated call id, no event
/// callbacks, no cancellation, no [`CallPolicy`] (the call is the
/// embedder's own, so every tool is allowed and nothing is cached or
/// traced), and no sessions.
#[derive(Clone, Default)]
pub struct CallOptions {
    call_id: Option<String>,
    events: Option<EventSink>,
    cancel: Option<CancelToken>,
    pub(super) policy: Option<Arc<CallPolicy>>,
    pub(super) nested: Option<NestedSink>,
    /// Where the call sits in its tree, when a tool made it.
    pub(super) nesting: Option<Nesting>,
    /// What a re-run of the call's tree answers from the run before it.
    pub(super) replay: Option<Arc<dyn Replay>>,
    /// Who answers the questions the tool's server asks the user.
    pub(super) elicitor: Option<Elicitor>,
    /// Where code mode's sessions of the call's caller are kept.
    pub(super) sessions: Option<SessionScope>,
}

impl CallOptions {
    /// Options with every default.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// Tags the call (its tracing span and result) with `id`, such as the
    /// model's tool-call id. Default: `call-<n>`, unique in the process.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// Receives the guest's log lines and progress reports as they happen.
    pub fn on_event(mut self, events: impl Fn(GuestEvent) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(events));
        self
    }

    /// Receives what happens below the call when its tool calls tools:
    /// each nested call's start, its guest's events and its result, at any
    /// depth, each with its caller's id. Default: none.
    pub fn on_nested(mut self, events: impl Fn(NestedEvent) + Send + Sync + 'static) -> Self {
        self.nested = Some(Arc::new(events));
        self
    }

    /// Lets `token` cancel the call.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Checks the call against `policy`: its permission rules and approver,
    /// its result cache, its telemetry. Default: none (every tool allowed).
    pub fn policy(mut self, policy: impl Into<Arc<CallPolicy>>) -> Self {
        self.policy = Some(policy.into());
        self
    }

    /// Answers the questions the tool's upstream MCP server asks the user
    /// during the call (elicitation) with `ask`, and those of the upstream
    /// tools its tool calls (code mode's scripts, for one). Default: none,
    /// so a question is answered "declined", and the call's events say so.
    pub fn on_elicitation<F, Fut>(mut self, ask: F) -> Self
    where
        F: Fn(ElicitationRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Elicitation> + Send + 'static,
    {
        self.elicitor = Some(Arc::new(move |question| Box::pin(ask(question))));
        self
    }

    /// Keeps code mode's sessions (`run_code`'s `session`) in `scope`, the
    /// caller's (see [`ScriptSessions::of`](crate::state::ScriptSessions::of)).
    /// Default: none, so a script naming a session runs without one, and
    /// its result says so.
    pub fn sessions(mut self, scope: SessionScope) -> Self {
        self.sessions = Some(scope);
        self
    }

    /// Answers the nested calls with effects that an earlier run of this
    /// call already made from `replay`, rather than running them again (a
    /// 2026-07-28 MCP client retrying a call with an answer).
    #[cfg(feature = "mcp")]
    pub(crate) fn replay(mut self, replay: Arc<dyn Replay>) -> Self {
        self.replay = Some(replay);
        self
    }

    pub(crate) fn id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    pub(crate) fn elicitor(&self) -> Option<&Elicitor> {
        self.elicitor.as_ref()
    }

    pub(crate) fn events(&self) -> Option<&EventSink> {
        self.events.as_ref()
    }

    pub(crate) fn cancel(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    pub(super) fn policy_ref(&self) -> Option<&CallPolicy> {
        self.policy.as_deref()
    }

    /// What starts the call's span: its caller's, for a nested call,
    /// otherwise the policy's telemetry.
    pub(super) fn tracer(&self) -> Option<&Arc<dyn Tracer>> {
        match &self.nesting {
            Some(nesting) => nesting.tracer.as_ref(),
            None => self
                .policy
                .as_ref()
                .and_then(|policy| policy.tracer.as_ref()),
        }
    }
}
