//! One `tools/call`, from the request to its result: the tool and its rule
//! looked up once on the one call path, the client asked where the rule
//! says `ask`, the rest of the path run, its guest's events forwarded as
//! notifications, and, when it runs long, made a task.
//!
//! Threat model: that of [`super`]. The request is the client's, so an
//! unknown tool is a protocol error naming only the tools served, and the
//! client's cancellation stops the guest; what the guest sends (progress,
//! logs) reaches the client only below the level it asked for, and nothing
//! after the result.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, JsonObject, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{CallContext, McpServer, Notify, approval, mapping, tasks};
use crate::call::{Arguments, Call, CallOptions, CallPolicy, CallResult, NestedEvent, Request};
use crate::catalog::interpreter::RUN_CODE;
use crate::catalog::permissions::{Approver, Permission};
use crate::catalog::registry::Registry;
use crate::sandbox::outcome::{CancelToken, ErrorKind, GuestEvent};
use crate::state::{Sealer, SessionScope};
#[cfg(feature = "otel")]
use crate::telemetry::{CallOrigin, Telemetry};

/// How a result with (or without) an output schema carries its structured
/// content: `run_code`'s alone, so the model reads its result once.
fn structured(has_schema: bool, tool: &str) -> mapping::Structured {
    match (has_schema, tool) {
        (false, _) => mapping::Structured::No,
        (true, RUN_CODE) => mapping::Structured::Alone,
        (true, _) => mapping::Structured::WithText,
    }
}

/// What a call resumed inside its task runs under: the task's.
struct Resumed {
    cancel: CancelToken,
    promoted: Arc<tasks::Promotion>,
}

/// How to ask the user about a call: an approver, `None` when the client
/// cannot be asked (or the rule does not ask), or the input-required result
/// that asks (2026-07-28).
type Approval = Result<approval::Asking, Box<CallToolResponse>>;

impl McpServer {
    /// Runs a `tools/call`, reporting it to the telemetry (if any).
    pub(super) async fn call(
        &self,
        mut request: CallToolRequestParams,
        context: CallContext,
    ) -> Result<CallToolResponse, McpError> {
        let registry = self.tools.current();
        let call = self.look_up(&registry, &mut request, &context);
        #[cfg(feature = "otel")]
        if let Some(telemetry) = &self.telemetry {
            return (self.call_reported(telemetry, &registry, call, request, context)).await;
        }
        self.run_tool(
            &registry,
            call,
            &request,
            context,
            None,
            #[cfg(feature = "otel")]
            None,
        )
        .await
    }

    /// The call of `request` on `registry` (the catalog it starts and ends
    /// on): its tool and rule, resolved once. The arguments are taken, not
    /// copied: what follows reads the request's name and state only.
    fn look_up(
        &self,
        registry: &Registry,
        request: &mut CallToolRequestParams,
        context: &CallContext,
    ) -> Call<'static> {
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        let request = Request {
            id: context.id.to_string(),
            name: request.name.to_string(),
            arguments: Arguments::Value(arguments),
        };
        let permissions = self.permissions.current();
        Call::look_up(registry.table(), request, Some(&permissions)).into_shared()
    }

    /// [`Self::call`], with its operation recorded in `telemetry`.
    #[cfg(feature = "otel")]
    async fn call_reported(
        &self,
        telemetry: &Telemetry,
        registry: &Registry,
        call: Call<'static>,
        request: CallToolRequestParams,
        context: CallContext,
    ) -> Result<CallToolResponse, McpError> {
        let started = std::time::Instant::now();
        let origin = super::telemetry::origin(&context);
        let served = call.info().is_some().then(|| request.name.to_string());
        let run = self.run_tool(registry, call, &request, context, None, Some(&origin));
        let response = run.await;
        let error = super::telemetry::error_type(&response);
        if let Some(request) = origin.server_request() {
            let tool = served.as_deref();
            telemetry.record_operation(request, tool, error.as_deref(), started.elapsed());
        }
        response
    }

    /// Runs the rest of the path for `call`, looked up in `registry`: as
    /// the task it becomes when it runs long, or (`resumed`) inside the
    /// task it already is.
    async fn run_tool(
        &self,
        registry: &Registry,
        call: Call<'static>,
        request: &CallToolRequestParams,
        context: CallContext,
        resumed: Option<Resumed>,
        #[cfg(feature = "otel")] origin: Option<&CallOrigin>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(info) = call.info() else {
            return Err(self.unknown_tool(registry, call.name()));
        };
        let structured = structured(info.descriptor.output_schema.is_some(), call.name());
        let _running = self.in_flight.start();
        let (cancel, promoted, in_task) = match resumed {
            Some(Resumed { cancel, promoted }) => (cancel, promoted, true),
            None => (CancelToken::new(), Arc::default(), false),
        };
        let asking = approval_for(request, &context, &call, &cancel, &self.state).await;
        let (approver, round) = match asking {
            Ok(asking) => asking,
            Err(answer) => return Ok(*answer),
        };
        // Guest events reach the client in order, and none after the result:
        // the forwarder ends when the call's options (holding the sender)
        // are dropped, with the call.
        let (events, received) = tokio::sync::mpsc::unbounded_channel();
        let policy = self.policy(
            approver,
            #[cfg(feature = "otel")]
            origin,
        );
        let mut options = CallOptions::new()
            .call_id(call.id())
            .policy(policy)
            .cancel_token(cancel.clone())
            .on_event(move |event| {
                events.send(event).ok();
            });
        if let Some(round) = &round {
            options = options.replay(round.clone());
        }
        if let Some(sessions) = self.sessions_of(&context) {
            options = options.sessions(sessions);
        }
        // An upstream server's question: asked while the call waits, or
        // (2026-07-28) put in the round, which stops the call and asks.
        if let Some(peer) = context.session.as_ref().and_then(approval::upstream_asker) {
            options = options.on_elicitation(move |question| {
                let peer = peer.clone();
                async move { approval::ask_upstream(&peer, question).await }
            });
        } else if let Some(round) = round.clone() {
            options = options.on_elicitation(move |question| {
                std::future::ready(round.upstream_answer(&question))
            });
        }
        // Set when the call becomes a task: its request is answered, so
        // neither the request's cancellation nor its notifications apply
        // any more (the extension cancels with `tasks/cancel`, and sends no
        // progress for tasks).
        let forwarder = EventForwarder::new(self, &context, call.name(), promoted.clone());
        options = options.on_nested(nested_status(promoted.clone()));
        let span = call_span(call.name(), &context.meta);
        let arguments = call.parsed().and_then(Value::as_object).cloned();
        let run = run_one(
            call,
            options,
            cancel.clone(),
            context.ct.clone(),
            promoted.clone(),
        );
        let work = async move {
            let (result, ()) = tokio::join!(run.instrument(span), forwarder.run(received));
            // A nested call came to a question (2026-07-28): ask it.
            if let Some(pending) = round.as_deref().map(approval::Round::pending) {
                match pending.await {
                    Some(Ok(mut input_required)) => {
                        input_required.meta = Some(mapping::call_meta(&result, None));
                        return Ok(input_required.into());
                    }
                    Some(Err(unkept)) => return Ok(unkept),
                    None => {}
                }
            }
            Ok(mapping::call_result(result, structured).into())
        };
        if in_task {
            return work.await;
        }
        match self.tasks.as_ref().zip(task_client(&context)) {
            Some((tasks, session)) => {
                let owner = tasks::owner(session);
                let resume = self.resume_of(request, arguments, session);
                tasks.run(work, cancel, owner, promoted, Some(resume)).await
            }
            None => work.await,
        }
    }

    /// Code mode's sessions of the caller of `context`'s request.
    fn sessions_of(&self, context: &CallContext) -> Option<SessionScope> {
        let caller = match (&context.session, &context.http) {
            (Some(session), _) => approval::caller(session, &self.state),
            (None, Some(parts)) => approval::http_caller(parts),
            (None, None) => return None,
        };
        Some(self.script_sessions.as_ref()?.of(caller))
    }

    /// How a task of `request` (with `arguments`) that stopped to ask goes
    /// on: the same call again, with the client's answers and the state
    /// its pause sealed, inside the task.
    fn resume_of(
        &self,
        request: &CallToolRequestParams,
        arguments: Option<JsonObject>,
        session: &RequestContext<RoleServer>,
    ) -> tasks::Resume {
        let mut request = request.clone();
        request.arguments = arguments;
        let (server, session) = (self.clone(), session.clone());
        Arc::new(move |answered: tasks::Answered| {
            let (server, mut request) = (server.clone(), request.clone());
            let context = CallContext::from(session.clone());
            request.input_responses = Some(answered.responses);
            request.request_state = answered.state;
            let resumed = Resumed {
                cancel: answered.cancel,
                promoted: answered.promoted,
            };
            Box::pin(async move { server.resume(request, context, resumed).await })
        })
    }

    /// A task's call, resumed with `request`'s answers.
    async fn resume(
        &self,
        mut request: CallToolRequestParams,
        context: CallContext,
        resumed: Resumed,
    ) -> Result<CallToolResponse, McpError> {
        let registry = self.tools.current();
        let call = self.look_up(&registry, &mut request, &context);
        let run = self.run_tool(
            &registry,
            call,
            &request,
            context,
            Some(resumed),
            #[cfg(feature = "otel")]
            None,
        );
        run.await
    }

    /// The policy of one call: the operator's rules (as they are now),
    /// asking `approver` where a rule says `ask` (or refusing, saying the
    /// client cannot be asked), traced from `origin`.
    fn policy(
        &self,
        approver: Option<Box<dyn Approver>>,
        #[cfg(feature = "otel")] origin: Option<&CallOrigin>,
    ) -> CallPolicy {
        let mut policy = CallPolicy::following(self.permissions.clone());
        policy = match approver {
            Some(approver) => policy.shared_approver(approver.into()),
            None => policy.unapprovable(approval::NO_ELICITATION),
        };
        #[cfg(feature = "otel")]
        if let (Some(telemetry), Some(origin)) = (&self.telemetry, origin) {
            policy = policy.telemetry(telemetry, Some(origin.clone()));
        }
        policy
    }

    /// The error for a call of a tool the registry does not serve, listing
    /// those it does.
    pub(super) fn unknown_tool(&self, registry: &Registry, name: &str) -> McpError {
        let available: Vec<&str> = registry
            .tools()
            .map(|t| t.descriptor.name.as_str())
            .collect();
        McpError::invalid_params(
            format!(
                "There is no tool named `{name}`. Available tools: {}.",
                available.join(", ")
            ),
            Some(json!({ "tool": name })),
        )
    }
}

/// How to ask about `call` (when its rule is `ask`) and the nested calls its
/// tool makes, when its client can be asked (only over a session: a call
/// answered directly over HTTP cannot).
async fn approval_for(
    request: &CallToolRequestParams,
    context: &CallContext,
    call: &Call<'_>,
    stop: &CancelToken,
    sealer: &Arc<Sealer>,
) -> Approval {
    let Some(session) = &context.session else {
        return Ok((None, None));
    };
    let asks = call.permission() == Permission::Ask;
    let what = (call.id(), call.parsed());
    approval::approver(request, session, what, asks, stop, sealer).await
}

/// What a task shows of its tool's nested calls (a `run_code` script's):
/// as each ends, its `statusMessage` says how many the run has ended and
/// how the last did. The extension sends no progress notifications for a
/// task; its status is what a polling client sees.
fn nested_status(promoted: Arc<tasks::Promotion>) -> impl Fn(NestedEvent) + Send + Sync + 'static {
    let ended = AtomicU32::new(0);
    move |event| {
        let NestedEvent::Result { result, .. } = event else {
            return;
        };
        let n = ended.fetch_add(1, Ordering::Relaxed) + 1;
        let plural = if n == 1 { "" } else { "s" };
        let how = result.error_kind.map_or("ok", ErrorKind::as_str);
        let message = format!(
            "{n} nested call{plural} ended; the last: `{}` ({how})",
            result.tool
        );
        promoted.report(&message);
    }
}

/// Runs `call` with `options`, cancelling it when its request is cancelled
/// (`request`) unless it became a task meanwhile. The options (holding the
/// event sender) go with the call, which ends the forwarding of its events.
async fn run_one(
    call: Call<'static>,
    options: CallOptions,
    cancel: CancelToken,
    request: CancellationToken,
    promoted: Arc<tasks::Promotion>,
) -> CallResult {
    let request_cancelled = async move {
        request.cancelled().await;
        if promoted.get().is_some() {
            std::future::pending::<()>().await;
        }
    };
    let run = call.run(options);
    tokio::pin!(run);
    let report = tokio::select! {
        report = &mut run => report,
        () = request_cancelled => {
            cancel.cancel();
            run.await
        }
    };
    report.result
}

/// The call's span. The client's trace context (`_meta.traceparent`,
/// 2026-07-28) goes on it, so the host's logs join the client's trace.
fn call_span(name: &str, meta: &RequestMetaObject) -> tracing::Span {
    let span = tracing::info_span!(
        "tools/call",
        tool = %name,
        traceparent = tracing::field::Empty,
        tracestate = tracing::field::Empty,
    );
    if let Some(traceparent) = meta.get_traceparent() {
        span.record("traceparent", traceparent);
    }
    if let Some(tracestate) = meta.get_tracestate() {
        span.record("tracestate", tracestate);
    }
    span
}

/// The session that may get a task: only a 2026-07-28 request that carries
/// the extension in its own capabilities, whatever was declared before (at
/// `initialize`, or on another request).
fn task_client(context: &CallContext) -> Option<&RequestContext<RoleServer>> {
    context.session.as_ref().filter(|session| {
        session
            .protocol_version()
            .is_some_and(|version| !version.has_initialize())
            && session
                .meta
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks())
    })
}

/// Sends a call's guest events to its client, in order: progress (when the
/// request has a progress token) and log lines at or above the client's
/// level, until the call becomes a task. When the tool stays quiet for the
/// keep-alive interval, it reports "still running" progress instead.
struct EventForwarder {
    notify: Notify,
    /// The tool, the logger of its log lines.
    tool: String,
    progress_token: Option<ProgressToken>,
    /// How long progress may be quiet; `None` without a progress token.
    keep_alive: Option<Duration>,
    threshold: LoggingLevel,
    promoted: Arc<tasks::Promotion>,
    progress: mapping::Progress,
    started: Instant,
}

impl EventForwarder {
    fn new(
        server: &McpServer,
        context: &CallContext,
        tool: &str,
        promoted: Arc<tasks::Promotion>,
    ) -> Self {
        let progress_token = context.meta.get_progress_token();
        EventForwarder {
            notify: context.notify.clone(),
            tool: tool.to_string(),
            keep_alive: progress_token.as_ref().and(server.keep_alive),
            progress_token,
            threshold: server.log_threshold(&context.meta),
            promoted,
            progress: mapping::Progress::default(),
            started: Instant::now(),
        }
    }

    /// Forwards the events `received` until the call drops its sender.
    async fn run(mut self, mut received: UnboundedReceiver<GuestEvent>) {
        let mut quiet_since = self.started;
        loop {
            let deadline = self.keep_alive.map(|interval| quiet_since + interval);
            let quiet = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                event = received.recv() => match event {
                    Some(event) => event,
                    None => break,
                },
                () = quiet => {
                    self.still_running().await;
                    quiet_since = Instant::now();
                    continue;
                }
            };
            if self.forward(event).await {
                quiet_since = Instant::now();
            }
        }
    }

    /// Says the call is alive, while the tool is quiet.
    async fn still_running(&mut self) {
        if self.promoted.get().is_some() {
            return;
        }
        if let Some(token) = &self.progress_token {
            let mut param = ProgressNotificationParam::new(token.clone(), self.progress.next(None));
            let running = self.started.elapsed().as_secs();
            param.message = Some(format!("still running ({running} s)"));
            self.notify.progress(param).await;
        }
    }

    /// Forwards one event; whether it reported progress.
    async fn forward(&mut self, event: GuestEvent) -> bool {
        match event {
            GuestEvent::Progress { message, fraction } => {
                if self.promoted.report(&message) {
                    return false;
                }
                let Some(token) = &self.progress_token else {
                    return false;
                };
                let mut param =
                    ProgressNotificationParam::new(token.clone(), self.progress.next(fraction));
                param.message = Some(message);
                param.total = fraction.map(|_| 1.0);
                self.notify.progress(param).await;
                true
            }
            GuestEvent::Log { level, message } => {
                let level = mapping::logging_level(level);
                if mapping::passes(level, self.threshold) && self.promoted.get().is_none() {
                    let mut param = LoggingMessageNotificationParam::new(level, json!(message));
                    param.logger = Some(self.tool.clone());
                    self.notify.log(param).await;
                }
                false
            }
        }
    }
}
