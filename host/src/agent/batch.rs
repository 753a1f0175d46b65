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

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::events::{AgentEvent, now_ms};
use super::formats::{CallKind, Format, ParseError, ToolCall, parse_calls, render_results};
use crate::call::{
    Authorized, Call, CallOptions, CallPolicy, CallReport, CallResult, NestedEvent, Request,
    ResultCache,
};
use crate::catalog::live::LiveRegistry;
use crate::catalog::permissions::{Approver, Permissions};
use crate::catalog::registry::Registry;
use crate::sandbox::outcome::{CancelToken, ErrorKind, GuestEvent};
#[cfg(feature = "otel")]
use crate::telemetry::{CallOrigin, Telemetry};

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

type AgentSink = Arc<dyn Fn(AgentEvent) + Send + Sync>;

/// The subscriber to a runner's events, and which it takes.
#[derive(Clone)]
struct Events {
    sink: AgentSink,
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
/// let tools = runner.definitions(Format::Anthropic); // send with the request
/// let (format, calls) = agent::parse_calls(&response, None)?;
/// let results = runner.run(calls.clone()).await;
/// let reply = agent::render_results(format, &calls, &results); // send back to the model
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Runner {
    registry: LiveRegistry,
    concurrency: usize,
    /// Shared, so that a runner made per call (as the MCP server makes
    /// them) does not copy the operator's rules.
    policy: Arc<CallPolicy>,
    on_denial: OnDenial,
    events: Option<Events>,
    cancel: Option<CancelToken>,
    #[cfg(feature = "otel")]
    telemetry: Option<Telemetry>,
    #[cfg(feature = "otel")]
    origin: Option<Arc<CallOrigin>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("tools", &self.registry().tools().len())
            .field("concurrency", &self.concurrency)
            .field("policy", &self.policy)
            .field("on_denial", &self.on_denial)
            .field("events", &self.events.is_some())
            .field("cancel", &self.cancel)
            .finish()
    }
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
            concurrency: Self::DEFAULT_CONCURRENCY,
            policy: Arc::new(CallPolicy::new(Permissions::deny_all())),
            on_denial: OnDenial::default(),
            events: None,
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
        self.trace()
    }

    /// Where its calls came from: their spans' parent, and for a server,
    /// the request. Default: none (each call's span is a root).
    #[cfg(feature = "otel")]
    pub fn origin(mut self, origin: CallOrigin) -> Self {
        self.origin = Some(Arc::new(origin));
        self.trace()
    }

    /// Points the policy's tracer at the telemetry, from the origin.
    #[cfg(feature = "otel")]
    fn trace(self) -> Self {
        match &self.telemetry {
            Some(telemetry) => {
                let tracer = telemetry.tracer(self.origin.clone());
                self.edit_policy(|mut policy| {
                    policy.tracer = tracer;
                    policy
                })
            }
            None => self,
        }
    }

    /// The tools it runs calls against, as they are now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.current()
    }

    /// The definitions of its tools in `format`, as its rules show them
    /// (see [`definitions`](super::definitions)): what to send with a
    /// request to the model.
    pub fn definitions(&self, format: super::Format) -> serde_json::Value {
        super::definitions(&self.registry(), self.policy.permissions(), format)
    }

    /// Runs at most `cap` calls of a read-only batch at once (0 counts as
    /// 1, which makes every batch serial). Default: 8.
    pub fn concurrency(mut self, cap: usize) -> Self {
        self.concurrency = cap.max(1);
        self
    }

    /// Checks its calls against `policy` (rules, approver, cache), replacing
    /// what [`permissions`](Self::permissions), [`approver`](Self::approver),
    /// [`unapprovable`](Self::unapprovable) and [`cache`](Self::cache) set.
    /// Default: [`CallPolicy::new`] of [`Permissions::deny_all`].
    pub fn policy(mut self, policy: impl Into<Arc<CallPolicy>>) -> Self {
        self.policy = policy.into();
        self
    }

    /// The rules deciding which calls run: a [`Permissions`], or one shared
    /// in an `Arc` (as a server that makes a runner per call shares its
    /// rules). Default: [`Permissions::deny_all`].
    pub fn permissions(self, permissions: impl Into<Arc<Permissions>>) -> Self {
        self.edit_policy(|policy| policy.with_permissions(permissions))
    }

    /// Decides on calls whose rule is `ask`. Default: none, so they are denied.
    pub fn approver(self, approver: impl Approver + 'static) -> Self {
        self.edit_policy(|policy| policy.approver(approver))
    }

    /// Why no one can approve `ask` calls here, when there is no
    /// [`approver`](Self::approver), said in their denial so that the model
    /// (and the user reading along) knows what is missing, such as "this MCP
    /// client cannot ask its user (it does not support elicitation)".
    /// Default: none, and the denial says only that no one can approve.
    pub fn unapprovable(self, why: impl Into<String>) -> Self {
        self.edit_policy(|policy| policy.unapprovable(why))
    }

    /// Serves and stores results of read-only, idempotent tools in `cache`.
    /// Default: no cache, because files can change under a read-only tool.
    pub fn cache(self, cache: ResultCache) -> Self {
        self.edit_policy(|policy| policy.cache(cache))
    }

    fn edit_policy(mut self, edit: impl FnOnce(CallPolicy) -> CallPolicy) -> Self {
        let policy = Arc::unwrap_or_clone(self.policy);
        self.policy = Arc::new(edit(policy));
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
        let registry = self.registry();
        let read_only = calls.iter().map(|call| {
            call.kind != CallKind::Function
                || registry
                    .tool(&call.name)
                    .is_none_or(|tool| tool.descriptor.hints.read_only)
        });
        self.concurrent(calls.len(), read_only)
    }

    fn concurrent(&self, calls: usize, mut read_only: impl Iterator<Item = bool>) -> bool {
        calls > 1 && self.concurrency > 1 && read_only.all(|read_only| read_only)
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
        let registry = self.registry();
        // Each call's tool and rule are looked up here, once.
        let calls: Vec<Planned> = calls
            .into_iter()
            .map(|call| Planned::look_up(&registry, call, self.policy.permissions()))
            .collect();
        let read_only = calls.iter().map(Planned::read_only);
        if self.concurrent(calls.len(), read_only) {
            let calls = calls.into_iter().map(Planned::into_shared).collect();
            self.run_concurrently(calls).await
        } else {
            self.run_serially(calls).await
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

    async fn run_serially(&self, calls: Vec<Planned<'_>>) -> Vec<CallReport> {
        let mut reports = Vec::with_capacity(calls.len());
        let mut refused: Option<Refused> = None;
        for planned in calls {
            let report = match self.authorize(planned, &mut refused).await {
                Ok(ready) => {
                    let options = self.options(&ready.id, &ready.tool);
                    ready.authorized.execute(options).await
                }
                Err(report) => report,
            };
            self.emit_result(&report);
            reports.push(report);
        }
        reports
    }

    async fn run_concurrently(&self, calls: Vec<Planned<'static>>) -> Vec<CallReport> {
        let slots: Arc<Mutex<Vec<Option<CallReport>>>> =
            Arc::new(Mutex::new(vec![None; calls.len()]));
        let mut started = Vec::with_capacity(calls.len());
        let mut refused: Option<Refused> = None;
        let mut tasks = JoinSet::new();
        let permits = Arc::new(Semaphore::new(self.concurrency));
        // Calls are announced and authorized in order, approvals asked one at
        // a time; each authorized call starts as soon as a slot is free,
        // possibly while later calls are still being authorized.
        for (index, planned) in calls.into_iter().enumerate() {
            started.push((
                planned.call.id().to_string(),
                planned.call.name().to_string(),
            ));
            match self.authorize(planned, &mut refused).await {
                Err(report) => {
                    self.emit_result(&report);
                    lock(&slots)[index] = Some(report);
                }
                Ok(ready) => {
                    let (runner, permits, slots) = (self.clone(), permits.clone(), slots.clone());
                    tasks.spawn(async move {
                        let _permit = permits.acquire_owned().await;
                        let options = runner.options(&ready.id, &ready.tool);
                        let report = ready.authorized.execute(options).await;
                        runner.emit_result(&report);
                        lock(&slots)[index] = Some(report);
                    });
                }
            }
        }
        // A task that panicked leaves its slot empty; it is reported below.
        while tasks.join_next().await.is_some() {}
        let slots = std::mem::take(&mut *lock(&slots));
        slots
            .into_iter()
            .zip(started)
            .map(|(slot, (id, name))| {
                slot.unwrap_or_else(|| {
                    let output = "The call failed inside toolcage itself (a bug, not the tool's fault). Try again.";
                    let report = CallReport::refused(&name, id, ErrorKind::Trap, output.into());
                    self.emit_result(&report);
                    report
                })
            })
            .collect()
    }

    /// Announces a call, then takes it through the path's permission stage,
    /// after the batch's own checks: its kind, and an earlier refusal.
    async fn authorize<'r>(
        &self,
        planned: Planned<'r>,
        refused: &mut Option<Refused>,
    ) -> Result<Ready<'r>, CallReport> {
        let Planned { mut call, kind } = planned;
        self.emit(|| AgentEvent::ToolCall {
            call_id: call.id().to_string(),
            parent_call_id: None,
            tool: call.name().to_string(),
            timestamp_ms: now_ms(),
            arguments: call.arguments(),
        });
        let tool = call.name().to_string();
        if kind != CallKind::Function {
            call.refuse_first(ErrorKind::Unsupported, format!(
                "Not run: `{tool}` was called as a custom tool, with free-text input, and these tools run only as function calls with JSON arguments. Call one of the function tools instead."
            ));
        } else if let Some(earlier) = refused {
            call.refuse_first(ErrorKind::Cancelled, format!(
                "Not run: the earlier call to `{}` (id {}) in this batch was refused, so the rest of the batch was skipped. Reconsider your plan in light of that refusal before calling `{tool}` again.",
                earlier.name, earlier.id
            ));
        }
        let id = call.id().to_string();
        let options = self.options(&id, &tool);
        match call.authorize(&options).await {
            Ok(authorized) => Ok(Ready {
                authorized,
                id,
                tool,
            }),
            Err(report) => {
                if report.result.error_kind == Some(ErrorKind::PermissionDenied)
                    && self.on_denial == OnDenial::SkipRest
                {
                    *refused = Some(Refused { id, name: tool });
                }
                Err(report)
            }
        }
    }

    /// The options of the call `id` to `tool`: the runner's policy,
    /// cancellation and event subscriber.
    fn options(&self, id: &str, tool: &str) -> CallOptions {
        let mut options = CallOptions::new().call_id(id).policy(self.policy.clone());
        if let Some(token) = &self.cancel {
            options = options.cancel_token(token.clone());
        }
        if let Some(events) = &self.events {
            let (sink, call_id, tool) = (events.sink.clone(), id.to_string(), tool.to_string());
            options =
                options.on_event(move |event| sink(guest_event(&call_id, &tool, None, event)));
            let (sink, runner_events) = (events.sink.clone(), events.runner_events);
            options = options.on_nested(move |event| {
                if let Some(event) = nested_event(event, runner_events) {
                    sink(event);
                }
            });
        }
        options
    }

    /// Sends one of the runner's own events, if its subscriber takes them.
    fn emit(&self, event: impl FnOnce() -> AgentEvent) {
        if let Some(events) = self.events.as_ref().filter(|events| events.runner_events) {
            (events.sink)(event());
        }
    }

    fn emit_result(&self, report: &CallReport) {
        let result = &report.result;
        self.emit(|| AgentEvent::ToolResult {
            call_id: result.call_id.clone(),
            parent_call_id: None,
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

/// A call of a batch, looked up.
struct Planned<'r> {
    call: Call<'r>,
    kind: CallKind,
}

impl<'r> Planned<'r> {
    fn look_up(registry: &'r Registry, call: ToolCall, rules: &Permissions) -> Self {
        let ToolCall {
            id,
            name,
            arguments,
            kind,
        } = call;
        let request = Request {
            id,
            name,
            arguments,
        };
        Planned {
            call: Call::look_up(registry.table(), request, Some(rules)),
            kind,
        }
    }

    /// Whether it keeps a batch concurrent: a call that cannot run (not a
    /// function call, or to an unknown tool) does not make it serial.
    fn read_only(&self) -> bool {
        self.kind != CallKind::Function
            || self
                .call
                .info()
                .is_none_or(|tool| tool.descriptor.hints.read_only)
    }

    fn into_shared(self) -> Planned<'static> {
        Planned {
            call: self.call.into_shared(),
            kind: self.kind,
        }
    }
}

/// An authorized call, with its id and tool.
struct Ready<'r> {
    authorized: Authorized<'r>,
    id: String,
    tool: String,
}

fn guest_event(
    call_id: &str,
    tool: &str,
    parent_call_id: Option<String>,
    event: GuestEvent,
) -> AgentEvent {
    let (call_id, tool, timestamp_ms) = (call_id.to_string(), tool.to_string(), now_ms());
    match event {
        GuestEvent::Log { level, message } => AgentEvent::ToolLog {
            call_id,
            parent_call_id,
            tool,
            timestamp_ms,
            level,
            message,
        },
        GuestEvent::Progress { message, fraction } => AgentEvent::ToolProgress {
            call_id,
            parent_call_id,
            tool,
            timestamp_ms,
            message,
            fraction,
        },
    }
}

/// A nested call's event as the runner's subscriber sees it: its guest's
/// events always, its start and result when the subscriber takes the
/// runner's own events.
fn nested_event(event: NestedEvent, runner_events: bool) -> Option<AgentEvent> {
    let timestamp_ms = now_ms();
    match event {
        NestedEvent::Guest {
            call_id,
            parent_call_id,
            tool,
            event,
        } => Some(guest_event(&call_id, &tool, Some(parent_call_id), event)),
        _ if !runner_events => None,
        NestedEvent::Call {
            call_id,
            parent_call_id,
            tool,
            arguments,
        } => Some(AgentEvent::ToolCall {
            call_id,
            parent_call_id: Some(parent_call_id),
            tool,
            timestamp_ms,
            arguments,
        }),
        NestedEvent::Result {
            parent_call_id,
            result,
            metrics,
        } => Some(AgentEvent::ToolResult {
            call_id: result.call_id,
            parent_call_id: Some(parent_call_id),
            tool: result.tool,
            timestamp_ms,
            is_error: result.is_error,
            error_kind: result.error_kind,
            output: result.output,
            details: result.details,
            metrics,
        }),
    }
}

/// The refused call that makes a batch skip the rest ([`OnDenial::SkipRest`]).
struct Refused {
    id: String,
    name: String,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    //! The batch's own decisions, on a registry with no tools; the
    //! integration tests (`tests/all/`) run batches of real components.

    use super::*;
    use crate::call::Arguments;

    fn runner() -> Runner {
        let registry = Registry::builder().build().expect("an empty registry");
        Runner::new(Arc::new(registry))
    }

    fn call(id: &str, name: &str, kind: CallKind) -> ToolCall {
        let mut call = ToolCall::new(id, name, Arguments::Json("{}".into()));
        call.kind = kind;
        call
    }

    #[tokio::test]
    async fn a_custom_call_is_refused_and_the_others_still_answer_in_order() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let runner = runner().on_event(move |event| {
            let kind = match event {
                AgentEvent::ToolCall { call_id, .. } => format!("call {call_id}"),
                AgentEvent::ToolResult { call_id, .. } => format!("result {call_id}"),
                _ => "guest".into(),
            };
            seen.lock().unwrap().push(kind);
        });
        let calls = vec![
            call("a", "free", CallKind::Custom),
            call("b", "nope", CallKind::Function),
        ];
        assert!(!runner.runs_concurrently(&calls[..1]));
        let results = runner.run(calls).await;
        assert_eq!(results[0].error_kind, Some(ErrorKind::Unsupported));
        assert_eq!(results[0].call_id, "a");
        assert_eq!(results[1].error_kind, Some(ErrorKind::NotFound));
        assert_eq!(
            *events.lock().unwrap(),
            ["call a", "result a", "call b", "result b"]
        );
    }

    #[test]
    fn unknown_tools_and_custom_calls_keep_a_batch_concurrent() {
        let calls = [
            call("a", "nope", CallKind::Function),
            call("b", "free", CallKind::Custom),
        ];
        assert!(runner().runs_concurrently(&calls));
        assert!(!runner().concurrency(1).runs_concurrently(&calls));
        assert!(!runner().runs_concurrently(&calls[..1]));
    }

    #[tokio::test]
    async fn a_cancelled_batch_starts_nothing() {
        let token = CancelToken::new();
        token.cancel();
        let runner = runner()
            .permissions(Permissions::allow_all())
            .cancel_token(token);
        let results = runner
            .run([
                call("a", "nope", CallKind::Function),
                call("b", "x", CallKind::Function),
            ])
            .await;
        for result in results {
            assert_eq!(result.error_kind, Some(ErrorKind::Cancelled));
            assert!(
                result.output.contains("before it started"),
                "{}",
                result.output
            );
        }
    }
}
