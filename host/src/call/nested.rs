//! Nested calls: a tool calling tools through `toolcage:tool/tools`. Each
//! nested call is a call: it takes the whole path (lookup, validation, the
//! policy's allow/ask/deny rules and approver, the cache, a fresh sandbox
//! with the *callee's* grants, redaction of the callee's secrets,
//! telemetry), under the policy of the call that started the tree, with
//! the rules in force when the nested call starts (a reload that denies a
//! tool refuses a running script's next call of it).
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
//! Every call a tool asks for counts against its tree's `nested_calls`,
//! refused or not, so a tool cannot flood the host (or its events) with
//! refused calls. The first call refused (or whose result is withheld)
//! for the budget ends the tree: no later call starts, in its batch or
//! after it. A read-only batch's permission stages run in turn, so a user
//! asked about its calls is asked one at a time.
//!
//! Nothing is granted that a direct call would not get, and every refusal
//! is a result the caller reads, never a trap of its own.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::Value;

use super::{
    Arguments, Call, CallOptions, CallPolicy, CallReport, CallResult, CallSpan, Metrics, Request,
    Tracer,
};
use crate::catalog::elicit::Elicitor;
use crate::catalog::grants;
use crate::catalog::table::{Entry, ToolInfo, ToolTable};
use crate::sandbox::limits::Limits;
use crate::sandbox::outcome::{CancelToken, ErrorKind, GuestEvent};
use crate::sandbox::{CallableTool, NestedRequest, NestedResponse, ToolCalls, human_bytes};
use crate::state::SessionScope;

mod replay;
mod session;

#[cfg(any(feature = "mcp", test))]
pub(crate) use replay::Recorded;
pub(crate) use replay::Replay;
use replay::{Used, What, what};

/// Whether a call that ended as `kind` ran (and so may have had effects).
fn ran(kind: ErrorKind) -> bool {
    use ErrorKind::*;
    matches!(
        kind,
        ToolError | Timeout | OutOfFuel | MemoryLimit | OutputLimit | Trap
    )
}

/// The most nested calls a call's result lists; later ones are run but
/// not listed, and counted in [`NestedUsage::unlisted`], so that the record
/// says it is not whole.
pub const MAX_LISTED_NESTED: usize = 1_000;

/// A nested call, as its tree's root lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
    #[serde(
        rename = "duration_ms",
        serialize_with = "super::millis",
        deserialize_with = "super::from_millis"
    )]
    pub duration: Duration,
    /// The fuel its guest used.
    pub fuel_used: u64,
}

/// What a call tree used of its budget ([`Limits::nested_calls`],
/// [`nested_depth`](Limits::nested_depth) and
/// [`nested_bytes`](Limits::nested_bytes) of its root's limits), as its
/// root's result reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NestedUsage {
    /// Nested calls asked for, refused or not, up to `nested_calls`.
    pub calls: u32,
    /// The deepest nested call let through to the call path (its rules,
    /// validation, sandbox): 1 for a call the root made.
    pub depth: u32,
    /// Bytes of arguments and results that crossed between callers and
    /// callees.
    pub bytes: u64,
    /// Nested calls that ended but are not in the result's list, which
    /// holds at most [`MAX_LISTED_NESTED`]: the record is whole when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub unlisted: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What happens in a call tree below its root, for an embedder following
/// it (see [`CallOptions::on_nested`]). Every nested call sends one
/// [`Call`](Self::Call) first and one [`Result`](Self::Result) last, with
/// its guest's events in between; except a call still running when its
/// caller is stopped (a timeout, a cancellation), which ends with it and
/// sends no `Result`, and the calls of a tree past the first refused for
/// `nested_calls`, which are refused silently.
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
    /// Every nested call asked for, refused or not: the n-th is `<root>.<n>`.
    asked: AtomicU64,
    /// The deepest nested call let through to the path.
    deepest: AtomicU32,
    bytes: AtomicU64,
    listed: Mutex<Vec<NestedCall>>,
    /// Calls that ended past the list's [`MAX_LISTED_NESTED`].
    unlisted: AtomicU32,
    policy: Option<Arc<CallPolicy>>,
    events: Option<NestedSink>,
    /// Set by the first call refused or withheld for the budget: no later
    /// call of the tree starts, so that a batch stops at its breach.
    spent: AtomicBool,
    /// The root call's cancellation: once it is cancelled (its caller
    /// stopped it, or an approval must be asked before it can go on), no
    /// nested call of the tree starts.
    stop: Option<CancelToken>,
    /// The log of an earlier attempt of the run, and where this attempt
    /// keeps its own (see [`Replay`]).
    replay: Option<Arc<dyn Replay>>,
    /// Set when a call of this attempt is not the one the log has at its
    /// place: the root's result is then an error saying so.
    diverged: Mutex<Option<String>>,
    /// Who answers the user's questions of the upstream tools it calls:
    /// the root call's asker.
    elicitor: Option<Elicitor>,
    /// Where the root call's caller keeps code mode's sessions.
    sessions: Option<SessionScope>,
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
            asked: AtomicU64::new(0),
            deepest: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            listed: Mutex::new(Vec::new()),
            unlisted: AtomicU32::new(0),
            spent: AtomicBool::new(false),
            policy: options.policy.clone(),
            events: options.nested.clone(),
            stop: options.cancel().cloned(),
            replay: options.replay.clone(),
            diverged: Mutex::new(None),
            elicitor: options.elicitor.clone(),
            sessions: options.sessions.clone(),
        })
    }

    /// The tree's policy with the rules in force now.
    fn policy_now(&self) -> Option<Arc<CallPolicy>> {
        self.policy.as_ref().map(CallPolicy::now)
    }

    /// Whether the root was stopped.
    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// Counts a nested call asked for: its number in the tree (from 1).
    fn count(&self) -> u64 {
        self.asked.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether the `n`-th call is reported (listed, and sent as events): all
    /// within the budget, and the first past it. The rest of a flood of
    /// refused calls is refused silently.
    fn reported(&self, n: u64) -> bool {
        n <= u64::from(self.budget.calls) + 1
    }

    /// The nested calls listed so far, taken, and what the tree used.
    pub(super) fn take_listed(&self) -> (Vec<NestedCall>, NestedUsage) {
        let listed = std::mem::take(&mut *self.listed.lock().unwrap_or_else(|e| e.into_inner()));
        let unlisted = self.unlisted.load(Ordering::SeqCst);
        let asked = self.asked.load(Ordering::SeqCst);
        let usage = NestedUsage {
            calls: asked.min(u64::from(self.budget.calls)) as u32,
            depth: self.deepest.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
            unlisted,
        };
        (listed, usage)
    }

    fn list(&self, call: NestedCall) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        if listed.len() < MAX_LISTED_NESTED {
            listed.push(call);
        } else {
            self.unlisted.fetch_add(1, Ordering::SeqCst);
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
    /// Its place in its run (see [`Replay`]).
    pub position: String,
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
    if !entry.imports_tools() {
        return None;
    }
    let (tree, depth, root, position) = match &options.nesting {
        Some(nesting) => (
            nesting.tree.clone(),
            nesting.depth,
            None,
            nesting.position.clone(),
        ),
        None => {
            let tree = Tree::new(call_id, entry.limits(), options);
            (tree.clone(), 0, Some(tree), String::new())
        }
    };
    let caller = Caller {
        table: table.clone(),
        tree,
        depth,
        position,
        made: AtomicU32::new(0),
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
    /// The caller's place in its run: empty for the root.
    pub position: String,
    /// The calls it made so far: the n-th is at `<position>.<n>`.
    pub made: AtomicU32,
    pub call_id: String,
    pub entry: Arc<Entry>,
    /// Starts its callees' spans as children of its own.
    pub tracer: Option<Arc<dyn Tracer>>,
}

impl ToolCalls for Caller {
    fn callable(&self) -> Vec<CallableTool> {
        let mut tools: Vec<CallableTool> = self
            .callable_entries()
            .into_iter()
            .map(|entry| CallableTool {
                name: entry.info.descriptor.name.clone(),
                identifier: self
                    .table
                    .identifier(&entry.info.descriptor.name)
                    .map(str::to_string),
                description: entry.info.descriptor.description.clone(),
                input_schema: entry.schemas.input.to_string(),
                output_schema: entry.schemas.output.as_deref().map(str::to_string),
                read_only: entry.info.descriptor.hints.read_only,
            })
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    fn call(
        self: Arc<Self>,
        requests: Vec<NestedRequest>,
        deadline: Instant,
    ) -> BoxFuture<'static, Vec<NestedResponse>> {
        Box::pin(async move {
            let looked_up: Vec<Looked> = requests
                .into_iter()
                .map(|request| (self.table.get(&request.name).cloned(), request))
                .collect();
            let together = looked_up.len() > 1
                && looked_up.iter().all(|(entry, _)| {
                    entry
                        .as_ref()
                        .is_some_and(|entry| entry.info.descriptor.hints.read_only)
                });
            if together {
                return self.together(looked_up, deadline).await;
            }
            let mut responses = Vec::with_capacity(looked_up.len());
            for looked in looked_up {
                responses.push(self.one(looked, deadline).await);
            }
            responses
        })
    }

    fn load_session(
        self: Arc<Self>,
        name: String,
    ) -> BoxFuture<'static, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move { session::load(&self, &name).await })
    }

    fn save_session(
        self: Arc<Self>,
        name: String,
        state: Vec<u8>,
    ) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move { session::save(&self, &name, state).await })
    }
}

/// A nested request, with the entry of its tool (looked up once).
type Looked = (Option<Arc<Entry>>, NestedRequest);

/// Cancels a nested call when its caller stops waiting for it.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A nested call looked up and announced, with what it runs under.
struct Announced {
    call: Call<'static>,
    options: CallOptions,
    /// Cancels it when its caller stops waiting.
    cancel: CancelOnDrop,
    /// Whether it is listed and sent as events.
    reported: bool,
}

impl Caller {
    /// The place of the next call this caller makes in its run.
    fn next_position(&self) -> String {
        let n = self.made.fetch_add(1, Ordering::SeqCst) + 1;
        match self.position.is_empty() {
            true => n.to_string(),
            false => format!("{}.{n}", self.position),
        }
    }

    /// The answer an earlier attempt of the run got for the call `what` at
    /// `position`, counted again; a refusal ending the run when the log has
    /// another call there.
    fn replayed(&self, position: &str, what: &What) -> Option<NestedResponse> {
        let recorded = self.tree.logged(position)?;
        if recorded.binding != what.1 {
            return Some(self.tree.diverge(position, &what.0, &recorded));
        }
        Some(self.tree.replay(recorded))
    }

    /// Runs `requests` at once, each on a task of its own (so that their
    /// guests compute on every core), and answers them in order. Their
    /// permission stages run first, one after another in order, as a
    /// batch's do, so that a user asked about them is asked in turn.
    /// Dropping the future (the caller stopped waiting) stops them all.
    async fn together(
        self: Arc<Self>,
        requests: Vec<Looked>,
        deadline: Instant,
    ) -> Vec<NestedResponse> {
        let count = requests.len();
        let mut answers: Vec<Option<NestedResponse>> = vec![None; count];
        let mut tasks = tokio::task::JoinSet::new();
        let mut names = Vec::with_capacity(count);
        for (index, looked) in requests.into_iter().enumerate() {
            let position = self.next_position();
            names.push(looked.1.name.clone());
            // A tree without a log (no pause can come) records nothing.
            let what = self.tree.logs().then(|| what(&looked.1));
            if let Some(answer) = what.as_ref().and_then(|w| self.replayed(&position, w)) {
                answers[index] = Some(answer);
                continue;
            }
            let sent = looked.1.arguments.len() as u64;
            let prepared = self.prepare(looked, deadline, &position);
            match prepared.call.authorize(&prepared.options).await {
                Err(report) => answers[index] = Some(self.answer(report, prepared.reported).0),
                Ok(authorized) => {
                    let (options, cancel, reported) =
                        (prepared.options, prepared.cancel, prepared.reported);
                    tasks.spawn(async move {
                        let _cancel = cancel;
                        let report = authorized.execute(options).await;
                        (index, report, reported, (position, what, sent))
                    });
                }
            }
        }
        while let Some(joined) = tasks.join_next().await {
            if let Ok((index, report, reported, (position, what, sent))) = joined {
                let (response, listed) = self.answer(report, reported);
                if let Some(what) = what {
                    let received =
                        response.output.len() + response.details.as_ref().map_or(0, String::len);
                    let used = Used {
                        calls: 1,
                        bytes: sent + received as u64,
                        listed: listed.into_iter().collect(),
                    };
                    self.tree.record(position, what, used, &response);
                }
                answers[index] = Some(response);
            }
        }
        answers
            .into_iter()
            .zip(names)
            .map(|(answer, name)| answer.unwrap_or_else(|| failed(&name)))
            .collect()
    }

    /// Runs one nested call through the path, and answers it; or, when an
    /// earlier attempt of the run ran it, answers as it did then (see
    /// [`Replay`]).
    async fn one(&self, looked: Looked, deadline: Instant) -> NestedResponse {
        let position = self.next_position();
        // A tree without a log (no pause can come) records nothing.
        let logged = self.tree.logs().then(|| what(&looked.1));
        if let Some(answer) = logged.as_ref().and_then(|w| self.replayed(&position, w)) {
            return answer;
        }
        let mark = logged.is_some().then(|| self.tree.mark());
        let Announced {
            call,
            options,
            cancel,
            reported,
        } = self.prepare(looked, deadline, &position);
        let report = call.run(options).await;
        drop(cancel);
        let (response, _) = self.answer(report, reported);
        if let (Some(what), Some(mark)) = (logged, mark) {
            let used = self.tree.since(mark);
            self.tree.record(position, what, used, &response);
        }
        response
    }

    /// The call `request` asks for, at `position` in its run, refused
    /// before the path when the budget, the grant or the time says so;
    /// announced.
    fn prepare(&self, (entry, request): Looked, deadline: Instant, position: &str) -> Announced {
        let n = self.tree.count();
        let refusal = self.refusal(n, entry.as_deref(), &request, deadline);
        let policy = self.tree.policy_now();
        let rules = policy.as_deref().map(CallPolicy::permissions);
        let request = Request {
            id: format!("{}.{n}", self.tree.root),
            name: request.name,
            arguments: Arguments::Json(request.arguments),
        };
        let mut call = Call::found(&self.table, entry, request, rules);
        call.called_by(&self.entry.info.descriptor.name);
        match refusal {
            Some((kind, output)) => call.refuse_first(kind, output),
            None => {
                self.tree
                    .deepest
                    .fetch_max(self.depth + 1, Ordering::SeqCst);
            }
        }
        let reported = self.tree.reported(n);
        if reported {
            self.tree.emit(|| NestedEvent::Call {
                call_id: call.id().to_string(),
                parent_call_id: self.call_id.clone(),
                tool: call.name().to_string(),
                arguments: call.arguments(),
            });
        }
        let cancel = CancelOnDrop(CancelToken::new());
        let at = (position, deadline);
        let options = self.options(call.id(), call.name(), &cancel.0, at, policy);
        Announced {
            call,
            options,
            cancel,
            reported,
        }
    }

    /// What the caller reads of `report`, once its bytes are counted; the
    /// call listed and its end announced, when it is `reported`, with its
    /// entry in the record.
    fn answer(&self, report: CallReport, reported: bool) -> (NestedResponse, Option<NestedCall>) {
        let CallReport {
            mut result,
            metrics,
        } = report;
        let details = result.details.as_ref().map(Value::to_string);
        let details = self.spend_result(&mut result, details);
        if result.error_kind == Some(ErrorKind::NestedLimit) {
            self.tree.spent.store(true, Ordering::SeqCst);
        }
        let response = NestedResponse {
            call_id: result.call_id.clone(),
            is_error: result.is_error,
            error_kind: result.error_kind,
            output: result.output.clone(),
            details,
        };
        if !reported {
            return (response, None);
        }
        let listed = NestedCall {
            tool: result.tool.clone(),
            call_id: result.call_id.clone(),
            parent_call_id: self.call_id.clone(),
            depth: self.depth + 1,
            is_error: result.is_error,
            error_kind: result.error_kind,
            duration: result.duration,
            fuel_used: result.fuel_used,
        };
        self.tree.list(listed.clone());
        self.tree.emit(|| NestedEvent::Result {
            parent_call_id: self.call_id.clone(),
            result: Box::new(result),
            metrics,
        });
        (response, Some(listed))
    }

    /// The options of nested call `id` to `tool`, at its position in its
    /// run, by its deadline, under `policy`.
    fn options(
        &self,
        id: &str,
        tool: &str,
        cancel: &CancelToken,
        (position, deadline): (&str, Instant),
        policy: Option<Arc<CallPolicy>>,
    ) -> CallOptions {
        let tree = &self.tree;
        let mut options = CallOptions::new().call_id(id).cancel_token(cancel.clone());
        options.policy = policy;
        options.elicitor = tree.elicitor.clone();
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
            position: position.to_string(),
        });
        options
    }

    /// Why the `n`-th nested call of the tree, `request`, is refused
    /// before the path, if it is: a stopped tree, the number of calls, the
    /// grant, the depth and the bytes, then the caller's time. Once one
    /// call breached the budget, every later one is refused.
    fn refusal(
        &self,
        n: u64,
        entry: Option<&Entry>,
        request: &NestedRequest,
        deadline: Instant,
    ) -> Option<(ErrorKind, String)> {
        let tool = request.name.as_str();
        let budget = self.tree.budget;
        if self.tree.stopped() {
            let output = format!("`{tool}` was not called: its call tree was stopped.");
            return Some((ErrorKind::Cancelled, output));
        }
        if self.tree.spent.load(Ordering::SeqCst) {
            let output = format!(
                "`{tool}` was not called: an earlier call of this call tree went past its budget, which ends the tree."
            );
            return Some((ErrorKind::NestedLimit, output));
        }
        if n > u64::from(budget.calls) {
            let output = format!(
                "`{tool}` was not called: this call tree made its {} nested calls, its limit (`nested_calls`). Do the rest in fewer calls, or in another call from the model.",
                budget.calls
            );
            return Some((ErrorKind::NestedLimit, output));
        }
        if let Some(refused) = self.ungranted(tool) {
            return Some((ErrorKind::PermissionDenied, refused));
        }
        let granted =
            |entry: &&Entry| grants::callable(self.info(), self.entry.calls(), None, &entry.info);
        if entry.filter(granted).is_none() {
            return Some((ErrorKind::NotFound, self.unknown(tool)));
        }
        if let Some(breached) = self.over_budget(tool, request.arguments.len() as u64) {
            return Some((ErrorKind::NestedLimit, breached));
        }
        (deadline <= Instant::now()).then(|| {
            let output = format!("`{tool}` was not called: its caller had no time left.");
            (ErrorKind::Timeout, output)
        })
    }

    /// The answer to a granted name no tool has: the tools the caller may
    /// call under the rules in force, not every tool there is.
    fn unknown(&self, tool: &str) -> String {
        let callable: Vec<&str> = self
            .callable_entries()
            .into_iter()
            .map(|entry| entry.info.descriptor.name.as_str())
            .collect();
        match callable.is_empty() {
            true => format!("There is no tool named `{tool}`, and none this tool may call."),
            false => format!(
                "There is no tool named `{tool}`. Tools this tool may call: {}.",
                callable.join(", ")
            ),
        }
    }

    /// The caller's tool.
    fn info(&self) -> &ToolInfo {
        &self.entry.info
    }

    /// The entries the caller may call, by the one rule
    /// ([`grants::callable`]) under the tree's rules.
    fn callable_entries(&self) -> Vec<&Arc<Entry>> {
        let policy = self.tree.policy_now();
        let rules = policy.as_deref().map(CallPolicy::permissions);
        let calls = self.entry.calls();
        self.table
            .entries()
            .iter()
            .filter(|entry| grants::callable(self.info(), calls, rules, &entry.info))
            .collect()
    }

    /// Why the caller's component may not call `tool`, unless it may.
    fn ungranted(&self, tool: &str) -> Option<String> {
        let component = &self.entry.info.component;
        let calls = self.entry.calls();
        if grants::granted(calls, tool) {
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
    /// bytes of arguments breaches, its depth or its bytes, if any; its
    /// bytes counted when none is.
    fn over_budget(&self, tool: &str, arguments_len: u64) -> Option<String> {
        let budget = self.tree.budget;
        if self.depth + 1 > budget.depth {
            return Some(format!(
                "`{tool}` was not called: this call tree is already {} calls deep, its limit (`nested_depth` = {}). A tool that calls itself stops here: call tools directly rather than through one another.",
                self.depth, budget.depth
            ));
        }
        (!self.tree.spend_bytes(arguments_len)).then(|| format!(
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
        error_kind: Some(ErrorKind::Trap),
        output: format!("The call to `{tool}` failed in the host before it answered."),
        details: None,
    }
}
#[cfg(test)]
#[path = "nested_tests.rs"]
mod tests;
