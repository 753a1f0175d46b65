//! Nested calls: a tool calling tools through `toolcage:tool/tools`. Each
//! nested call is a call: it takes the whole path (lookup, validation, the
//! policy's allow/ask/deny rules and approver, the cache, a fresh sandbox
//! with the *callee's* grants, redaction of the callee's secrets,
//! telemetry), under the policy of the call that started the tree.
//!
//! Threat model: the caller is untrusted, and its requests are what a model
//! (or a script it wrote) might send. Before the path, a nested call must
//! pass:
//! - the caller component's `calls` grant (deny by default), so a tool
//!   reaches only the tools its operator named;
//! - its tree's budget, set by the root call's limits: a number of nested
//!   calls, a depth (a tool calling itself stops there), and the bytes of
//!   arguments and results crossing between callers and callees;
//! - the caller's deadline: a nested call ends by the time its caller must,
//!   and dies with it (cancelling or stopping the caller drops its calls).
//!
//! Nothing is granted that a direct call would not get, and every refusal
//! is a result the caller reads, never a trap of its own.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::Value;

use super::{
    Arguments, Call, CallOptions, CallPolicy, CallReport, CallResult, CallSpan, Metrics, Request,
    Tracer,
};
use crate::ErrorKind;
use crate::catalog::pattern::glob_match;
use crate::catalog::registry::{Entry, ToolTable};
use crate::sandbox::human_bytes;
use crate::sandbox::limits::Limits;
use crate::sandbox::outcome::{CancelToken, GuestEvent};
use crate::sandbox::{NestedRequest, NestedResponse, ToolCalls};

/// The most nested calls a call's result lists; later ones are run but
/// not listed.
pub const MAX_LISTED_NESTED: usize = 1_000;

/// A nested call, as its tree's root lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NestedCall {
    /// The tool called.
    pub tool: String,
    /// The nested call's id.
    pub call_id: String,
    /// The id of the call that made it.
    pub parent_call_id: String,
    /// Its depth: 1 for a call the root made.
    pub depth: u32,
    /// Whether it failed or was refused.
    pub is_error: bool,
    /// Why.
    pub error_kind: Option<ErrorKind>,
    /// Its wall time.
    #[serde(rename = "duration_ms", serialize_with = "super::millis")]
    pub duration: Duration,
    /// The fuel its guest used.
    pub fuel_used: u64,
}

/// What a call tree used of its budget (`nested_calls`, `nested_depth`,
/// `nested_kib` of its root's limits), as its root's result reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NestedUsage {
    /// Nested calls counted against `nested_calls` (refusals for a missing
    /// grant are not).
    pub calls: u32,
    /// The deepest nested call that ran or was refused: 1 for a call the
    /// root made.
    pub depth: u32,
    /// Bytes of arguments and results that crossed between callers and
    /// callees.
    pub bytes: u64,
}

/// What happens in a call tree below its root, for an embedder following
/// it (see [`CallOptions::on_nested`]). Every nested call sends one
/// [`Call`](Self::Call) first and one [`Result`](Self::Result) last, with
/// its guest's events in between.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NestedEvent {
    /// A tool called a tool.
    Call {
        /// The nested call's id.
        call_id: String,
        /// The caller's call id.
        parent_call_id: String,
        /// The tool called.
        tool: String,
        /// The arguments: parsed, or the text when it is not JSON.
        arguments: Value,
    },
    /// The callee's guest logged a line or reported progress.
    Guest {
        /// The nested call's id.
        call_id: String,
        /// The caller's call id.
        parent_call_id: String,
        /// The tool called.
        tool: String,
        /// What it reported.
        event: GuestEvent,
    },
    /// The nested call ended, ran or not: its result as its caller got it.
    Result {
        /// The caller's call id.
        parent_call_id: String,
        /// The result.
        result: Box<CallResult>,
        /// What it cost, and whether it came from the cache.
        metrics: Metrics,
    },
}

pub(super) type NestedSink = Arc<dyn Fn(NestedEvent) + Send + Sync>;

/// A call tree: its budget, what it used, and what it lists.
pub(crate) struct Tree {
    budget: Budget,
    /// The root call's id: nested calls are `<root>.<n>`, unique in the
    /// tree whatever ids the root's caller chose.
    root: String,
    next: AtomicU32,
    made: AtomicU32,
    bytes: AtomicU64,
    listed: Mutex<Vec<NestedCall>>,
    policy: Option<Arc<CallPolicy>>,
    events: Option<NestedSink>,
}

/// A tree's budget, from its root's limits.
#[derive(Debug, Clone, Copy)]
struct Budget {
    calls: u32,
    depth: u32,
    bytes: u64,
}

impl Tree {
    /// The tree a root call under `limits` starts, nesting under `options`'
    /// policy and reporting to its nested-event sink.
    pub(super) fn new(root: &str, limits: &Limits, options: &CallOptions) -> Arc<Tree> {
        Arc::new(Tree {
            budget: Budget {
                calls: limits.nested_calls,
                depth: limits.nested_depth,
                bytes: limits.nested_bytes,
            },
            root: root.to_string(),
            next: AtomicU32::new(1),
            made: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            listed: Mutex::new(Vec::new()),
            policy: options.policy.clone(),
            events: options.nested.clone(),
        })
    }

    /// The next nested call's id.
    fn next_id(&self) -> String {
        format!(
            "{}.{}",
            self.root,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The nested calls listed so far, taken, and what the tree used.
    pub(super) fn take_listed(&self) -> (Vec<NestedCall>, NestedUsage) {
        let listed = std::mem::take(&mut *self.listed.lock().unwrap_or_else(|e| e.into_inner()));
        let usage = NestedUsage {
            calls: self.made.load(Ordering::SeqCst).min(self.budget.calls),
            depth: listed.iter().map(|call| call.depth).max().unwrap_or(0),
            bytes: self.bytes.load(Ordering::SeqCst),
        };
        (listed, usage)
    }

    fn list(&self, call: NestedCall) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        if listed.len() < MAX_LISTED_NESTED {
            listed.push(call);
        }
    }

    fn emit(&self, event: impl FnOnce() -> NestedEvent) {
        if let Some(events) = &self.events {
            events(event());
        }
    }

    /// Counts `bytes` crossing the interface; `false` (uncounted) past the
    /// budget.
    fn spend_bytes(&self, bytes: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes)
                    .filter(|&total| total <= self.budget.bytes)
            })
            .is_ok()
    }
}

/// Where a call sits in its tree, when it is a nested call.
#[derive(Clone)]
pub(crate) struct Nesting {
    pub tree: Arc<Tree>,
    /// 1 for a call the root made.
    pub depth: u32,
    /// The caller's deadline: the call ends by then.
    pub caller_deadline: Instant,
    /// Starts the call's span as a child of its caller's.
    pub tracer: Option<Arc<dyn Tracer>>,
}

/// What runs the nested calls of the call `call_id` to `entry`'s tool, when
/// its component imports `toolcage:tool/tools`; with the tree it starts,
/// when it is a tree's root (whose result lists the tree's calls).
pub(super) fn caller(
    table: &Arc<ToolTable>,
    entry: &Arc<Entry>,
    call_id: &str,
    options: &CallOptions,
    span: Option<&dyn CallSpan>,
) -> Option<(Arc<Caller>, Option<Arc<Tree>>)> {
    if !entry.component.imports_tools {
        return None;
    }
    let (tree, depth, root) = match &options.nesting {
        Some(nesting) => (nesting.tree.clone(), nesting.depth, None),
        None => {
            let tree = Tree::new(call_id, &entry.component.sandbox.grants.limits, options);
            (tree.clone(), 0, Some(tree))
        }
    };
    let caller = Caller {
        table: table.clone(),
        tree,
        depth,
        call_id: call_id.to_string(),
        entry: entry.clone(),
        tracer: span.and_then(CallSpan::children),
    };
    Some((Arc::new(caller), root))
}

/// What runs the nested calls of one call: its tool's grant, its place in
/// the tree, the table it looks tools up in.
pub(super) struct Caller {
    pub table: Arc<ToolTable>,
    pub tree: Arc<Tree>,
    /// The caller's own depth: 0 for the root.
    pub depth: u32,
    pub call_id: String,
    pub entry: Arc<Entry>,
    /// Starts its callees' spans as children of its own.
    pub tracer: Option<Arc<dyn Tracer>>,
}

impl ToolCalls for Caller {
    fn call(
        self: Arc<Self>,
        requests: Vec<NestedRequest>,
        deadline: Instant,
    ) -> BoxFuture<'static, Vec<NestedResponse>> {
        Box::pin(async move {
            let together = requests.len() > 1
                && requests.iter().all(|request| {
                    self.table
                        .get(&request.name)
                        .is_some_and(|entry| entry.info.descriptor.hints.read_only)
                });
            if together {
                return self.together(requests, deadline).await;
            }
            let mut responses = Vec::with_capacity(requests.len());
            for request in requests {
                responses.push(self.one(request, deadline).await);
            }
            responses
        })
    }
}

/// Cancels a nested call when its caller stops waiting for it.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Caller {
    /// Runs `requests` at once, each on a task of its own (so that their
    /// guests compute on every core), and answers them in order. Dropping
    /// the future (the caller stopped waiting) stops them all.
    async fn together(
        self: Arc<Self>,
        requests: Vec<NestedRequest>,
        deadline: Instant,
    ) -> Vec<NestedResponse> {
        let mut tasks = tokio::task::JoinSet::new();
        let names: Vec<String> = requests.iter().map(|r| r.name.clone()).collect();
        for (index, request) in requests.into_iter().enumerate() {
            let caller = self.clone();
            tasks.spawn(async move { (index, caller.one(request, deadline).await) });
        }
        let mut responses: Vec<Option<NestedResponse>> = vec![None; names.len()];
        while let Some(joined) = tasks.join_next().await {
            if let Ok((index, response)) = joined {
                responses[index] = Some(response);
            }
        }
        responses
            .into_iter()
            .zip(names)
            .map(|(response, name)| response.unwrap_or_else(|| failed(&name)))
            .collect()
    }

    /// Runs one nested call through the path, and answers it.
    async fn one(&self, request: NestedRequest, deadline: Instant) -> NestedResponse {
        let call = self.look_up(request, deadline);
        let (id, tool) = (call.id().to_string(), call.name().to_string());
        let cancel = CancelOnDrop(CancelToken::new());
        let options = self.options(&id, &tool, &cancel.0, deadline);
        let report = call.run(options).await;
        self.answer(report)
    }

    /// The call `request` asks for, refused before the path when the grant,
    /// the budget or the time says so; announced.
    fn look_up(&self, request: NestedRequest, deadline: Instant) -> Call<'_> {
        let arguments_len = request.arguments.len() as u64;
        let refusal = self.refusal(&request.name, arguments_len, deadline);
        let rules = self.tree.policy.as_ref().map(|policy| policy.permissions());
        let request = Request {
            id: self.tree.next_id(),
            name: request.name,
            arguments: Arguments::Json(request.arguments),
        };
        let mut call = Call::look_up(&self.table, request, rules);
        if let Some((kind, output)) = refusal {
            call.refuse_first(kind, output);
        }
        self.tree.emit(|| NestedEvent::Call {
            call_id: call.id().to_string(),
            parent_call_id: self.call_id.clone(),
            tool: call.name().to_string(),
            arguments: call.arguments(),
        });
        call
    }

    /// What the caller reads of `report`, once its bytes are counted; the
    /// call listed and its end announced.
    fn answer(&self, report: CallReport) -> NestedResponse {
        let CallReport {
            mut result,
            metrics,
        } = report;
        let details = result.details.as_ref().map(Value::to_string);
        let details = self.spend_result(&mut result, details);
        self.tree.list(NestedCall {
            tool: result.tool.clone(),
            call_id: result.call_id.clone(),
            parent_call_id: self.call_id.clone(),
            depth: self.depth + 1,
            is_error: result.is_error,
            error_kind: result.error_kind,
            duration: result.duration,
            fuel_used: result.fuel_used,
        });
        let response = NestedResponse {
            call_id: result.call_id.clone(),
            is_error: result.is_error,
            error_kind: result.error_kind.map(ErrorKind::as_str),
            output: result.output.clone(),
            details,
        };
        self.tree.emit(|| NestedEvent::Result {
            parent_call_id: self.call_id.clone(),
            result: Box::new(result),
            metrics,
        });
        response
    }

    /// The options of nested call `id` to `tool`.
    fn options(
        &self,
        id: &str,
        tool: &str,
        cancel: &CancelToken,
        deadline: Instant,
    ) -> CallOptions {
        let tree = &self.tree;
        let mut options = CallOptions::new().call_id(id).cancel_token(cancel.clone());
        options.policy = tree.policy.clone();
        if let Some(events) = tree.events.clone() {
            let (id, parent, tool) = (id.to_string(), self.call_id.clone(), tool.to_string());
            options = options.on_event(move |event| {
                events(NestedEvent::Guest {
                    call_id: id.clone(),
                    parent_call_id: parent.clone(),
                    tool: tool.clone(),
                    event,
                })
            });
        }
        options.nesting = Some(Nesting {
            tree: tree.clone(),
            depth: self.depth + 1,
            caller_deadline: deadline,
            tracer: self.tracer.clone(),
        });
        options
    }

    /// Why a call to `tool` is refused before the path, if it is: the
    /// grant, then the tree's budget, then the caller's time.
    fn refusal(
        &self,
        tool: &str,
        arguments_len: u64,
        deadline: Instant,
    ) -> Option<(ErrorKind, String)> {
        if let Some(refused) = self.ungranted(tool) {
            return Some((ErrorKind::PermissionDenied, refused));
        }
        if let Some(breached) = self.over_budget(tool, arguments_len) {
            return Some((ErrorKind::NestedLimit, breached));
        }
        (deadline <= Instant::now()).then(|| {
            let output = format!("`{tool}` was not called: its caller had no time left.");
            (ErrorKind::Timeout, output)
        })
    }

    /// Why the caller's component may not call `tool`, unless it may.
    fn ungranted(&self, tool: &str) -> Option<String> {
        let component = &self.entry.info.component;
        let calls = &self.entry.component.calls;
        if calls.iter().any(|pattern| glob_match(pattern, tool)) {
            return None;
        }
        let granted = match calls.is_empty() {
            true => "its operator granted it no calls to other tools".to_string(),
            false => format!("its operator granted it calls to {} only", calls.join(", ")),
        };
        Some(format!(
            "`{tool}` was not called: the component `{component}` may not call it, as {granted} (the `calls` grant of `[components.{component}]`). Do not retry it: work without `{tool}`, or tell the user the tool needs that grant."
        ))
    }

    /// Which of the tree's budgets a call to `tool` with `arguments_len`
    /// bytes of arguments breaches, if any; counted when none is.
    fn over_budget(&self, tool: &str, arguments_len: u64) -> Option<String> {
        let (tree, budget) = (&self.tree, self.tree.budget);
        if self.depth + 1 > budget.depth {
            return Some(format!(
                "`{tool}` was not called: this call tree is already {} calls deep, its limit (`nested_depth` = {}). A tool that calls itself stops here: call tools directly rather than through one another.",
                self.depth, budget.depth
            ));
        }
        if tree.made.fetch_add(1, Ordering::SeqCst) >= budget.calls {
            return Some(format!(
                "`{tool}` was not called: this call tree made its {} nested calls, its limit (`nested_calls`). Do the rest in fewer calls, or in another call from the model.",
                budget.calls
            ));
        }
        (!tree.spend_bytes(arguments_len)).then(|| format!(
            "`{tool}` was not called: its {} of arguments would take this call tree past the {} its nested calls may pass between them (`nested_bytes`). Pass less: a path or a reference rather than the data.",
            human_bytes(arguments_len as usize),
            human_bytes(budget.bytes as usize)
        ))
    }

    /// Counts `result`'s output and `details` (its details as text)
    /// against the tree's bytes; past the budget, withholds them. The
    /// details the caller gets.
    fn spend_result(&self, result: &mut CallResult, details: Option<String>) -> Option<String> {
        let size = (result.output.len() + details.as_ref().map_or(0, String::len)) as u64;
        if self.tree.spend_bytes(size) {
            return details;
        }
        result.is_error = true;
        result.error_kind = Some(ErrorKind::NestedLimit);
        result.details = None;
        result.output = format!(
            "The result of `{}` ({}) was withheld: it would take this call tree past the {} its nested calls may pass between them (`nested_bytes`). Ask it for less: a narrower query, a smaller range.",
            result.tool,
            human_bytes(size as usize),
            human_bytes(self.tree.budget.bytes as usize)
        );
        None
    }
}

/// The answer to a call of `tool` whose task failed: a bug in the host,
/// still only this call's failure.
fn failed(tool: &str) -> NestedResponse {
    NestedResponse {
        call_id: String::new(),
        is_error: true,
        error_kind: Some(ErrorKind::Trap.as_str()),
        output: format!("The call to `{tool}` failed in the host before it answered."),
        details: None,
    }
}
