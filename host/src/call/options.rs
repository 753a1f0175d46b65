//! The options of one call: its id, who hears its guest's events, what
//! cancels it, and the policy it is checked against.

use std::sync::Arc;

use super::CallPolicy;
use crate::sandbox::outcome::{CancelToken, GuestEvent};

type EventSink = Arc<dyn Fn(GuestEvent) + Send + Sync>;

/// Options of one call. By default: a generated call id, no event
/// callback, no cancellation, and no [`CallPolicy`]: the call is the
/// embedder's own, so every tool is allowed and nothing is cached or traced.
#[derive(Clone, Default)]
pub struct CallOptions {
    call_id: Option<String>,
    events: Option<EventSink>,
    cancel: Option<CancelToken>,
    policy: Option<Arc<CallPolicy>>,
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

    pub(crate) fn id(&self) -> Option<&str> {
        self.call_id.as_deref()
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
}
