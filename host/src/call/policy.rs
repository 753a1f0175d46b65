//! The policy a call is checked against: the operator's permission rules,
//! who approves `ask` calls, the result cache, and telemetry.
//!
//! Threat model: the model chooses which tool to call and with what, and may
//! have been steered by anything it read. The rules are checked on the one
//! call path, after the tool is looked up and before it is validated or
//! run, so no entry (a batch, a server, a tool calling a tool) reaches a
//! tool the rules refuse. An approval covers the one call it was asked for.

use std::sync::Arc;

use super::{Call, Parsed, ResultCache, Tracer};
use crate::catalog::permissions::{
    Approval, ApprovalRequest, Approver, LiveRules, Permission, Permissions,
};
use crate::sandbox::outcome::{CancelToken, ErrorKind};

/// What applies to every call made under it: which tools may run
/// ([`Permissions`]), who decides `ask` calls ([`Approver`]), where results
/// of read-only, idempotent tools are cached ([`ResultCache`]), and, with
/// the `otel` feature, the telemetry that traces and counts them. Cheap to
/// share: give it to calls with [`CallOptions::policy`](super::CallOptions::policy).
///
/// Defaults, each changed by the method of the same name:
///
/// - the rules: those given to [`new`](Self::new), fixed for every call
///   of the tree, or the [`LiveRules`] given to
///   [`following`](Self::following), read again at each nested call (there
///   is no default: [`Permissions::deny_all`] is the safe start);
/// - [`approver`](Self::approver): none, so `ask` rules refuse;
/// - [`unapprovable`](Self::unapprovable): none (the refusal gives no reason);
/// - [`cache`](Self::cache): none, because files can change under a
///   read-only tool;
/// - telemetry: none.
///
/// A call made without a policy (a plain
/// [`Registry::call`](crate::Registry::call)) takes the same path under
/// rules that allow every tool: the embedder calling is the operator.
#[derive(Clone)]
pub struct CallPolicy {
    permissions: Arc<Permissions>,
    /// Where newer rules come from, when they may change during a call.
    live: Option<LiveRules>,
    approver: Option<Arc<dyn Approver>>,
    unapprovable: Option<String>,
    pub(super) cache: Option<ResultCache>,
    pub(crate) tracer: Option<Arc<dyn Tracer>>,
}

impl std::fmt::Debug for CallPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallPolicy")
            .field("permissions", &self.permissions)
            .field("live", &self.live.is_some())
            .field("approver", &self.approver.is_some())
            .field("unapprovable", &self.unapprovable)
            .field("cache", &self.cache)
            .field("telemetry", &self.tracer.is_some())
            .finish()
    }
}

impl CallPolicy {
    /// A policy of `permissions` (a [`Permissions`], or one shared in an
    /// `Arc`), with the other defaults listed on [`CallPolicy`].
    pub fn new(permissions: impl Into<Arc<Permissions>>) -> Self {
        CallPolicy {
            permissions: permissions.into(),
            live: None,
            approver: None,
            unapprovable: None,
            cache: None,
            tracer: None,
        }
    }

    /// A policy of the rules in force in `rules`: a call is checked
    /// against them as they are when it starts, and so is each nested call
    /// of its tree, so that a change reaches a running script at its next
    /// call. The other defaults are those listed on [`CallPolicy`].
    pub fn following(rules: LiveRules) -> Self {
        let mut policy = CallPolicy::new(rules.current());
        policy.live = Some(rules);
        policy
    }

    /// The rules a call started under this policy is checked against.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// This policy with the rules in force now: itself when its rules are
    /// fixed or have not changed since it was made.
    pub(crate) fn now(self: &Arc<Self>) -> Arc<Self> {
        let Some(live) = &self.live else {
            return self.clone();
        };
        let current = live.current();
        if Arc::ptr_eq(&current, &self.permissions) {
            return self.clone();
        }
        let mut policy = CallPolicy::clone(self);
        policy.permissions = current;
        Arc::new(policy)
    }

    /// Replaces the rules with fixed ones (no longer following any
    /// [`LiveRules`]).
    pub fn with_permissions(mut self, permissions: impl Into<Arc<Permissions>>) -> Self {
        self.permissions = permissions.into();
        self.live = None;
        self
    }

    /// Decides on calls whose rule is `ask`. Default: none, so they are refused.
    pub fn approver(self, approver: impl Approver + 'static) -> Self {
        self.shared_approver(Arc::new(approver))
    }

    /// Like [`approver`](Self::approver), with one already shared.
    pub fn shared_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Why no one can approve `ask` calls here, when there is no approver,
    /// said in their refusal so that the model (and the user reading along)
    /// knows what is missing, such as "this MCP client cannot ask its user
    /// (it does not support elicitation)". Default: none.
    pub fn unapprovable(mut self, why: impl Into<String>) -> Self {
        self.unapprovable = Some(why.into());
        self
    }

    /// Serves and stores results of read-only, idempotent tools in `cache`.
    /// Default: none.
    pub fn cache(mut self, cache: ResultCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The permission stage of `call`: `Err` with the refusal's kind and
    /// output when the rules or the approver refuse it, or it is cancelled
    /// while the approver thinks.
    pub(super) async fn permit(
        &self,
        call: &Call<'_>,
        cancel: Option<&CancelToken>,
    ) -> Result<(), (ErrorKind, String)> {
        let tool = call.name();
        let denied = |output: String| Err((ErrorKind::PermissionDenied, output));
        match call.permission() {
            Permission::Allow => Ok(()),
            Permission::Deny => denied(format!(
                "The operator does not allow calls to `{tool}` (permission denied). Do not retry it: choose another approach, or tell the user what you wanted to do with `{tool}` and why."
            )),
            Permission::Ask => {
                // Arguments that are not JSON fail without running: no need to ask.
                let (Some(info), Parsed::Value(arguments)) = (call.info(), &call.arguments) else {
                    return Ok(());
                };
                let Some(approver) = &self.approver else {
                    return denied(self.no_approver(tool));
                };
                let request = ApprovalRequest {
                    call_id: call.id().to_string(),
                    tool: tool.to_string(),
                    arguments: arguments.clone(),
                    info: info.clone(),
                    caller: call.caller().map(str::to_string),
                };
                let approval = match cancel {
                    Some(token) => tokio::select! {
                        biased;
                        () = token.cancelled() => return Err((ErrorKind::Cancelled, super::not_started())),
                        approval = approver.approve(request) => approval,
                    },
                    None => approver.approve(request).await,
                };
                match approval {
                    Approval::Approve => Ok(()),
                    Approval::Refuse { reason } => {
                        let reason = reason
                            .map(|r| format!(" They said: {r}"))
                            .unwrap_or_default();
                        denied(format!(
                            "The user refused this call to `{tool}` (permission denied).{reason} Do not retry the same call: ask the user how to proceed, or choose another approach."
                        ))
                    }
                }
            }
        }
    }

    fn no_approver(&self, tool: &str) -> String {
        let why = self
            .unapprovable
            .as_ref()
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        format!(
            "Calls to `{tool}` need the user's approval, and no one can approve them here{why} (permission denied). Do not retry it: choose another approach, or tell the user what you wanted to do with `{tool}` and why."
        )
    }
}
#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
