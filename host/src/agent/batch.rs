//! Running a model's batch of tool calls: permissions, scheduling, the
//! result cache, events and cancellation.
//!
//! Threat model: the batch is what a model asked for. Every call is checked
//! against the operator's [`Permissions`] before it runs; concurrency is
//! bounded; a cancelled batch stops its running calls promptly and does not
//! start the others. A batch runs concurrently only when every call is to a
//! tool that claims to be read-only, so that two calls of a batch never
//! race on the same files; that claim is the tool's own, and what actually
//! bounds a tool is its sandbox (mounts, limits), not its hints.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::cache::{self, ResultCache};
use super::events::{AgentEvent, Metrics, now_ms};
use super::formats::{CallKind, Format, ParseError, ToolCall, parse_calls, render_results};
use super::permissions::{Approval, ApprovalRequest, Approver, Permission, Permissions};
use crate::call::Timings;
#[cfg(feature = "otel")]
use crate::telemetry::{CallOrigin, Telemetry};
use crate::{
    Arguments, CallOptions, CallResult, CancelToken, ErrorKind, GuestEvent, LiveRegistry, Logs,
    Registry,
};

/// What happens to the rest of a batch after a call is refused (by a `deny`
/// rule, or by the approver).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDenial {
    /// The other calls run as usual. The default.
    #[default]
    Continue,
    /// The calls after the refused one (in batch order) do not run: each
    /// returns [`ErrorKind::Cancelled`], telling the model why.
    SkipRest,
}

/// A call's result and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    /// The result, with the call's id.
    pub result: CallResult,
    /// Its metrics, including whether it came from the cache.
    pub metrics: Metrics,
}

type EventSink = Arc<dyn Fn(AgentEvent) + Send + Sync>;

/// The subscriber to a runner's events, and which it takes.
#[derive(Clone)]
struct Events {
    sink: EventSink,
    /// The runner's own [`AgentEvent::ToolCall`] and
    /// [`AgentEvent::ToolResult`] too, not only what the guest reports.
    runner_events: bool,
}

/// Runs batches of [`ToolCall`]s against a [`Registry`]. Cheap to clone
/// (clones share the registry, permission rules, approver, event subscriber
/// and cache).
///
/// Defaults, each changed by the method of the same name:
///
/// - [`permissions`](Self::permissions): **every call denied**
///   ([`Permissions::deny_all`]); loading a tool makes it callable by the
///   embedder, and the runner is what lets a model call it, so the operator
///   says which tools a model may use;
/// - [`approver`](Self::approver): none, so `ask` rules deny;
/// - [`unapprovable`](Self::unapprovable): none (the denial gives no reason);
/// - [`on_denial`](Self::on_denial): [`OnDenial::Continue`];
/// - [`concurrency`](Self::concurrency): [`Runner::DEFAULT_CONCURRENCY`] (8);
/// - [`on_event`](Self::on_event) and
///   [`on_guest_event`](Self::on_guest_event): no subscriber;
/// - [`cache`](Self::cache): none (see [`ResultCache`] for why);
/// - [`cancel_token`](Self::cancel_token): none.
///
/// A batch runs its calls concurrently (up to the concurrency cap) when it
/// has more than one call and every call names a tool that claims to be
/// read-only; otherwise it runs them one by one, in order. A call to an
/// unknown tool does not make a batch serial: it cannot run, and returns
/// [`ErrorKind::NotFound`]. A call of a kind toolcage cannot run (a
/// [`CallKind::Custom`] call) does not run either: it returns
/// [`ErrorKind::Unsupported`], and the calls beside it run as usual. Results
/// always come back in the calls' order, each with its call's id.
///
/// ```no_run
/// use std::sync::Arc;
/// use toolcage::agent::{self, Format, Permissions, Runner};
///
/// # async fn demo(registry: toolcage::Registry, response: serde_json::Value) -> Result<(), Box<dyn std::error::Error>> {
/// let runner = Runner::new(Arc::new(registry)).permissions(Permissions::allow_all());
/// let tools = agent::definitions(&runner.registry(), Format::Anthropic); // send with the request
/// let (format, calls) = agent::parse_calls(&response, None)?;
/// let results = runner.run(calls.clone()).await;
/// let reply = agent::render_results(format, &calls, &results); // send back to the model
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Runner {
    registry: LiveRegistry,
    /// The snapshot to run on instead of the registry's current one.
    pinned: Option<Arc<Registry>>,
    concurrency: usize,
    /// Shared, so that a runner made per call (as the MCP server makes
    /// them) does not copy the operator's rules.
    permissions: Arc<Permissions>,
    approver: Option<Arc<dyn Approver>>,
    /// Why no one can approve here, when the embedder knows.
    unapprovable: Option<String>,
    on_denial: OnDenial,
    events: Option<Events>,
    cache: Option<ResultCache>,
    cancel: Option<CancelToken>,
    #[cfg(feature = "otel")]
    telemetry: Option<Telemetry>,
    #[cfg(feature = "otel")]
    origin: Option<Arc<CallOrigin>>,
}

/// A call's span while it runs, when the runner has telemetry.
#[cfg(feature = "otel")]
type Trace = Option<crate::telemetry::Traced>;
#[cfg(not(feature = "otel"))]
type Trace = ();

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("tools", &self.registry().tools().len())
            .field("concurrency", &self.concurrency)
            .field("permissions", &self.permissions)
            .field("approver", &self.approver.is_some())
            .field("on_denial", &self.on_denial)
            .field("events", &self.events.is_some())
            .field("cache", &self.cache)
            .field("cancel", &self.cancel)
            .finish()
    }
}

/// What the checks before running decided about a call.
enum Gate {
    Run,
    Done(Box<CallReport>),
}

impl Runner {
    /// The default concurrency cap of a read-only batch: 8.
    pub const DEFAULT_CONCURRENCY: usize = 8;

    /// A runner for `registry` (a [`Registry`] in an `Arc`, or a
    /// [`LiveRegistry`]), with the defaults listed on [`Runner`] (every call
    /// denied until [`permissions`](Self::permissions) says otherwise).
    /// Each batch runs on the tools as they are when it starts.
    pub fn new(registry: impl Into<LiveRegistry>) -> Self {
        Runner {
            registry: registry.into(),
            pinned: None,
            concurrency: Self::DEFAULT_CONCURRENCY,
            permissions: Arc::new(Permissions::deny_all()),
            approver: None,
            unapprovable: None,
            on_denial: OnDenial::default(),
            events: None,
            cache: None,
            cancel: None,
            #[cfg(feature = "otel")]
            telemetry: None,
            #[cfg(feature = "otel")]
            origin: None,
        }
    }

    /// Reports each call as a span and in metrics to `telemetry` (see
    /// [`crate::telemetry`]). Default: none.
    #[cfg(feature = "otel")]
    pub fn telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Where its calls came from: their spans' parent, and for a server,
    /// the request. Default: none (each call's span is a root).
    #[cfg(feature = "otel")]
    pub fn origin(mut self, origin: CallOrigin) -> Self {
        self.origin = Some(Arc::new(origin));
        self
    }

    /// The tools it runs calls against, as they are now.
    pub fn registry(&self) -> Arc<Registry> {
        match &self.pinned {
            Some(registry) => registry.clone(),
            None => self.registry.current(),
        }
    }

    /// Runs on `snapshot` (one its caller already looked the tools up in)
    /// rather than on the registry's current tools.
    #[cfg(feature = "mcp")]
    pub(crate) fn pinned(mut self, snapshot: Arc<Registry>) -> Self {
        self.pinned = Some(snapshot);
        self
    }

    /// Runs at most `cap` calls of a read-only batch at once (0 counts as
    /// 1, which makes every batch serial). Default: 8.
    pub fn concurrency(mut self, cap: usize) -> Self {
        self.concurrency = cap.max(1);
        self
    }

    /// The rules deciding which calls run: a [`Permissions`], or one shared
    /// in an `Arc` (as a server that makes a runner per call shares its
    /// rules). Default: [`Permissions::deny_all`].
    pub fn permissions(mut self, permissions: impl Into<Arc<Permissions>>) -> Self {
        self.permissions = permissions.into();
        self
    }

    /// Decides on calls whose rule is `ask`. Default: none, so they are denied.
    pub fn approver(mut self, approver: impl Approver + 'static) -> Self {
        self.approver = Some(Arc::new(approver));
        self
    }

    /// Why no one can approve `ask` calls here, when there is no
    /// [`approver`](Self::approver), said in their denial so that the model
    /// (and the user reading along) knows what is missing, such as "this MCP
    /// client cannot ask its user (it does not support elicitation)".
    /// Default: none, and the denial says only that no one can approve.
    pub fn unapprovable(mut self, why: impl Into<String>) -> Self {
        self.unapprovable = Some(why.into());
        self
    }

    /// What a refusal does to the rest of the batch. Default: [`OnDenial::Continue`].
    pub fn on_denial(mut self, policy: OnDenial) -> Self {
        self.on_denial = policy;
        self
    }

    /// Receives every [`AgentEvent`], as it happens, on the task running the
    /// call (keep it quick: send to a channel for slow work). Replaces
    /// [`on_guest_event`](Self::on_guest_event). Default: none.
    pub fn on_event(self, subscriber: impl Fn(AgentEvent) + Send + Sync + 'static) -> Self {
        self.subscribe(subscriber, true)
    }

    /// Receives only what the guests report while they run
    /// ([`AgentEvent::ToolProgress`] and [`AgentEvent::ToolLog`]), as
    /// [`on_event`](Self::on_event) does, and not the runner's own
    /// `ToolCall` and `ToolResult`: for a frontend that has the call and
    /// its result in hand (the MCP server), which then pays for no copy of
    /// either. Replaces [`on_event`](Self::on_event). Default: none.
    pub fn on_guest_event(self, subscriber: impl Fn(AgentEvent) + Send + Sync + 'static) -> Self {
        self.subscribe(subscriber, false)
    }

    fn subscribe(
        mut self,
        subscriber: impl Fn(AgentEvent) + Send + Sync + 'static,
        runner_events: bool,
    ) -> Self {
        self.events = Some(Events {
            sink: Arc::new(subscriber),
            runner_events,
        });
        self
    }

    /// Serves and stores results of read-only, idempotent tools in `cache`.
    /// Default: no cache, because files can change under a read-only tool.
    pub fn cache(mut self, cache: ResultCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Lets `token` cancel the batches this runner runs: running calls stop
    /// with [`ErrorKind::Cancelled`] within milliseconds, and calls not yet
    /// started return it without running. A cancelled token stays
    /// cancelled: give each batch its own (`runner.clone().cancel_token(…)`)
    /// to cancel one batch only. Default: none.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Whether a batch of `calls` would run concurrently: more than one
    /// call, a concurrency cap above 1, and every function call to a known
    /// tool is to one that claims to be read-only.
    pub fn runs_concurrently(&self, calls: &[ToolCall]) -> bool {
        self.concurrent_on(&self.registry(), calls)
    }

    fn concurrent_on(&self, registry: &Registry, calls: &[ToolCall]) -> bool {
        calls.len() > 1
            && self.concurrency > 1
            && calls.iter().all(|call| {
                call.kind != CallKind::Function
                    || registry
                        .tool(&call.name)
                        .is_none_or(|tool| tool.descriptor.hints.read_only)
            })
    }

    /// Runs `calls` and returns their results in the same order, each
    /// tagged with its call's id. Never fails: whatever goes wrong with a
    /// call is in its result.
    pub async fn run(&self, calls: impl IntoIterator<Item = ToolCall>) -> Vec<CallResult> {
        self.run_reports(calls)
            .await
            .into_iter()
            .map(|report| report.result)
            .collect()
    }

    /// Like [`run`](Self::run), with each result's metrics.
    pub async fn run_reports(&self, calls: impl IntoIterator<Item = ToolCall>) -> Vec<CallReport> {
        let calls: Vec<ToolCall> = calls.into_iter().collect();
        let registry = self.registry();
        if self.concurrent_on(&registry, &calls) {
            self.run_concurrently(registry, calls).await
        } else {
            self.run_serially(&registry, calls).await
        }
    }

    /// Parses the tool calls in `document` (see [`parse_calls`]), runs them,
    /// and renders their results in the same format (see
    /// [`render_results`]). `format: None` detects it.
    pub async fn run_document(
        &self,
        document: &Value,
        format: Option<Format>,
    ) -> Result<(Format, Value), ParseError> {
        let (format, calls) = parse_calls(document, format)?;
        let results = self.run(calls.clone()).await;
        Ok((format, render_results(format, &calls, &results)))
    }

    async fn run_serially(&self, registry: &Registry, calls: Vec<ToolCall>) -> Vec<CallReport> {
        let mut reports = Vec::with_capacity(calls.len());
        let mut refused: Option<ToolCall> = None;
        for call in calls {
            let call = Prepared::new(call);
            self.emit_call(&call);
            let trace = self.trace(registry, &call);
            let report = match self.gate(registry, &call, &mut refused).await {
                Gate::Done(report) => {
                    self.traced(trace, registry, &report, false);
                    *report
                }
                Gate::Run => {
                    let report = self.execute(registry, call, timings(&trace)).await;
                    self.traced(trace, registry, &report, true);
                    report
                }
            };
            self.emit_result(&report);
            reports.push(report);
        }
        reports
    }

    async fn run_concurrently(
        &self,
        registry: Arc<Registry>,
        calls: Vec<ToolCall>,
    ) -> Vec<CallReport> {
        let slots: Arc<Mutex<Vec<Option<CallReport>>>> =
            Arc::new(Mutex::new(vec![None; calls.len()]));
        let mut prepared = Vec::with_capacity(calls.len());
        let mut refused: Option<ToolCall> = None;
        let mut tasks = JoinSet::new();
        let permits = Arc::new(Semaphore::new(self.concurrency));
        // Calls are announced and checked in order, approvals asked one at a
        // time; each approved call starts as soon as a slot is free, possibly
        // while later calls are still being checked.
        for (index, call) in calls.into_iter().enumerate() {
            let call = Prepared::new(call);
            self.emit_call(&call);
            let trace = self.trace(&registry, &call);
            match self.gate(&registry, &call, &mut refused).await {
                Gate::Done(report) => {
                    self.traced(trace, &registry, &report, false);
                    self.emit_result(&report);
                    lock(&slots)[index] = Some(*report);
                }
                Gate::Run => {
                    let (runner, registry, permits, slots, call) = (
                        self.clone(),
                        registry.clone(),
                        permits.clone(),
                        slots.clone(),
                        call.clone(),
                    );
                    tasks.spawn(async move {
                        let _permit = permits.acquire_owned().await;
                        let report = runner.execute(&registry, call, timings(&trace)).await;
                        runner.traced(trace, &registry, &report, true);
                        runner.emit_result(&report);
                        lock(&slots)[index] = Some(report);
                    });
                }
            }
            prepared.push(call);
        }
        // A task that panicked leaves its slot empty; it is reported below.
        while tasks.join_next().await.is_some() {}
        let slots = std::mem::take(&mut *lock(&slots));
        slots
            .into_iter()
            .zip(prepared)
            .map(|(slot, call)| {
                slot.unwrap_or_else(|| {
                    let report = refusal(
                        &call.call,
                        ErrorKind::Trap,
                        "The call failed inside toolcage itself (a bug, not the tool's fault). Try again.".into(),
                    );
                    self.emit_result(&report);
                    report
                })
            })
            .collect()
    }

    /// The checks before a call runs: its kind, cancellation, an earlier
    /// refusal, then the permission rules and the approver.
    async fn gate(
        &self,
        registry: &Registry,
        call: &Prepared,
        refused: &mut Option<ToolCall>,
    ) -> Gate {
        let tool = &call.call.name;
        if call.call.kind != CallKind::Function {
            let output = format!(
                "Not run: `{tool}` was called as a custom tool, with free-text input, and these tools run only as function calls with JSON arguments. Call one of the function tools instead."
            );
            return Gate::Done(Box::new(refusal(
                &call.call,
                ErrorKind::Unsupported,
                output,
            )));
        }
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Gate::Done(Box::new(not_started(&call.call)));
        }
        if let Some(earlier) = refused {
            let output = format!(
                "Not run: the earlier call to `{}` (id {}) in this batch was refused, so the rest of the batch was skipped. Reconsider your plan in light of that refusal before calling `{tool}` again.",
                earlier.name, earlier.id
            );
            return Gate::Done(Box::new(refusal(&call.call, ErrorKind::Cancelled, output)));
        }
        // An unknown tool cannot run: the core answers with the available ones.
        let Some(info) = registry.tool(tool) else {
            return Gate::Run;
        };
        let refusal_output = match self.permissions.permission_for(tool) {
            Permission::Allow => return Gate::Run,
            Permission::Deny => format!(
                "The operator does not allow calls to `{tool}` (permission denied). Do not retry it: choose another approach, or tell the user what you wanted to do with `{tool}` and why."
            ),
            Permission::Ask => {
                // Arguments that are not JSON fail without running: no need to ask.
                let Ok(arguments) = &call.parsed else {
                    return Gate::Run;
                };
                let Some(approver) = &self.approver else {
                    let why = self
                        .unapprovable
                        .as_ref()
                        .map(|why| format!(": {why}"))
                        .unwrap_or_default();
                    let output = format!(
                        "Calls to `{tool}` need the user's approval, and no one can approve them here{why} (permission denied). Do not retry it: choose another approach, or tell the user what you wanted to do with `{tool}` and why."
                    );
                    return self.refused(call, output, refused);
                };
                let request = ApprovalRequest {
                    call_id: call.call.id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    info: info.clone(),
                };
                let approval = match &self.cancel {
                    Some(token) => tokio::select! {
                        biased;
                        () = token.cancelled() => return Gate::Done(Box::new(not_started(&call.call))),
                        approval = approver.approve(request) => approval,
                    },
                    None => approver.approve(request).await,
                };
                match approval {
                    Approval::Approve => return Gate::Run,
                    Approval::Refuse { reason } => {
                        let reason = reason
                            .map(|r| format!(" They said: {r}"))
                            .unwrap_or_default();
                        format!(
                            "The user refused this call to `{tool}` (permission denied).{reason} Do not retry the same call: ask the user how to proceed, or choose another approach."
                        )
                    }
                }
            }
        };
        self.refused(call, refusal_output, refused)
    }

    fn refused(&self, call: &Prepared, output: String, refused: &mut Option<ToolCall>) -> Gate {
        if self.on_denial == OnDenial::SkipRest {
            *refused = Some(call.call.clone());
        }
        Gate::Done(Box::new(refusal(
            &call.call,
            ErrorKind::PermissionDenied,
            output,
        )))
    }

    /// Starts the span of `call`, when the runner has telemetry.
    #[cfg(feature = "otel")]
    fn trace(&self, registry: &Registry, call: &Prepared) -> Trace {
        let telemetry = self.telemetry.as_ref()?;
        let tool = &call.call.name;
        let arguments = || match (&call.parsed, &call.call.arguments) {
            (Ok(value), _) => value.to_string(),
            (Err(_), Arguments::Json(text)) => text.clone(),
            (Err(_), Arguments::Value(value)) => value.to_string(),
        };
        let permission = self.permissions.permission_for(tool).as_str();
        Some(telemetry.trace_call(
            registry,
            tool,
            arguments,
            permission,
            self.origin.as_deref(),
        ))
    }

    #[cfg(not(feature = "otel"))]
    fn trace(&self, _registry: &Registry, _call: &Prepared) -> Trace {}

    /// Ends the span of a call with its report.
    #[cfg(feature = "otel")]
    fn traced(&self, trace: Trace, registry: &Registry, report: &CallReport, granted: bool) {
        if let Some(trace) = trace {
            trace.finish(registry, &report.result, granted);
        }
    }

    #[cfg(not(feature = "otel"))]
    fn traced(&self, _trace: Trace, _registry: &Registry, _report: &CallReport, _granted: bool) {}

    /// Runs an approved call: from the cache if it can, else in the sandbox.
    async fn execute(
        &self,
        registry: &Registry,
        call: Prepared,
        timings: Option<Arc<Mutex<Timings>>>,
    ) -> CallReport {
        let started = Instant::now();
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return not_started(&call.call);
        }
        let Prepared {
            call:
                ToolCall {
                    id,
                    name,
                    arguments,
                    kind: _,
                },
            parsed,
        } = call;
        let cache_key = match (&self.cache, registry.tool(&name), &parsed) {
            (Some(_), Some(info), Ok(value)) if cache::cacheable(info) => {
                Some(cache::key(info, value))
            }
            _ => None,
        };
        if let (Some(cache), Some(key)) = (&self.cache, &cache_key)
            && let Some(mut result) = cache.get(key)
        {
            result.call_id = id;
            result.duration = started.elapsed();
            result.fuel_used = 0;
            result.peak_memory_bytes = 0;
            result.slot_wait = Duration::ZERO;
            result.net = crate::NetUsage::default();
            let metrics = Metrics {
                duration: result.duration,
                fuel_used: 0,
                cached: true,
            };
            return CallReport { result, metrics };
        }

        let mut options = CallOptions::new().call_id(id.clone());
        options.timings = timings;
        if let Some(token) = &self.cancel {
            options = options.cancel_token(token.clone());
        }
        if let Some(events) = &self.events {
            let (sink, call_id, tool) = (events.sink.clone(), id, name.clone());
            options = options.on_event(move |event| sink(guest_event(&call_id, &tool, event)));
        }
        // Parsed once here; text that is not JSON goes to the core, which
        // reports it to the model.
        let arguments = match parsed {
            Ok(value) => Arguments::Value(value),
            Err(_) => arguments,
        };
        let result = registry.call_with(&name, arguments, options).await;
        if let (Some(cache), Some(key)) = (&self.cache, cache_key)
            && !result.is_error
        {
            cache.insert(key, result.clone());
        }
        let metrics = Metrics {
            duration: result.duration,
            fuel_used: result.fuel_used,
            cached: false,
        };
        CallReport { result, metrics }
    }

    /// Sends one of the runner's own events, if its subscriber takes them.
    fn emit(&self, event: impl FnOnce() -> AgentEvent) {
        if let Some(events) = self.events.as_ref().filter(|events| events.runner_events) {
            (events.sink)(event());
        }
    }

    fn emit_call(&self, call: &Prepared) {
        self.emit(|| AgentEvent::ToolCall {
            call_id: call.call.id.clone(),
            tool: call.call.name.clone(),
            timestamp_ms: now_ms(),
            arguments: match (&call.parsed, &call.call.arguments) {
                (Ok(value), _) => value.clone(),
                (Err(_), Arguments::Json(text)) => Value::String(text.clone()),
                (Err(_), Arguments::Value(value)) => value.clone(),
            },
        });
    }

    fn emit_result(&self, report: &CallReport) {
        let result = &report.result;
        self.emit(|| AgentEvent::ToolResult {
            call_id: result.call_id.clone(),
            tool: result.tool.clone(),
            timestamp_ms: now_ms(),
            is_error: result.is_error,
            error_kind: result.error_kind,
            output: result.output.clone(),
            details: result.details.clone(),
            metrics: report.metrics,
        });
    }
}

/// Where a traced call notes when its phases ran.
#[cfg(feature = "otel")]
fn timings(trace: &Trace) -> Option<Arc<Mutex<Timings>>> {
    trace.as_ref().and_then(|trace| trace.timings.clone())
}

#[cfg(not(feature = "otel"))]
fn timings(_trace: &Trace) -> Option<Arc<Mutex<Timings>>> {
    None
}

/// A call with its arguments parsed once (`Err(())` when they are text that
/// is not JSON). Arguments given as a value are moved into `parsed`,
/// leaving `null` in the call.
#[derive(Clone)]
struct Prepared {
    call: ToolCall,
    parsed: Result<Value, ()>,
}

impl Prepared {
    fn new(mut call: ToolCall) -> Self {
        let parsed = match &mut call.arguments {
            // Moved, not copied: once parsed, only `parsed` is read.
            Arguments::Value(value) => Ok(std::mem::take(value)),
            Arguments::Json(text) => serde_json::from_str(text).map_err(|_| ()),
        };
        Prepared { call, parsed }
    }
}

fn guest_event(call_id: &str, tool: &str, event: GuestEvent) -> AgentEvent {
    let (call_id, tool, timestamp_ms) = (call_id.to_string(), tool.to_string(), now_ms());
    match event {
        GuestEvent::Log { level, message } => AgentEvent::ToolLog {
            call_id,
            tool,
            timestamp_ms,
            level,
            message,
        },
        GuestEvent::Progress { message, fraction } => AgentEvent::ToolProgress {
            call_id,
            tool,
            timestamp_ms,
            message,
            fraction,
        },
    }
}

/// The result of a call that did not run.
fn refusal(call: &ToolCall, kind: ErrorKind, output: String) -> CallReport {
    let result = CallResult {
        tool: call.name.clone(),
        call_id: call.id.clone(),
        is_error: true,
        error_kind: Some(kind),
        output,
        details: None,
        duration: Duration::ZERO,
        fuel_used: 0,
        peak_memory_bytes: 0,
        slot_wait: Duration::ZERO,
        net: crate::NetUsage::default(),
        logs: Logs::default(),
    };
    CallReport {
        result,
        metrics: Metrics::default(),
    }
}

fn not_started(call: &ToolCall) -> CallReport {
    refusal(
        call,
        ErrorKind::Cancelled,
        "The call was cancelled before it started.".into(),
    )
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
