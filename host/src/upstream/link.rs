//! The connection to one upstream server: starting it, calling it, and
//! starting it again, in the background, after it died.

use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use std::collections::HashMap;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rmcp::ClientHandler;
// Logging is deprecated by SEP-2577 (2026-07-28), but the 2025-11-25
// servers toolcage speaks to still send it, and their logs are the
// caller's events.
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId,
    ServerResult, Tool,
};
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{
    MaybeSendFuture, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient,
    RunningService, RunningServiceCancellationToken, ServiceExt,
};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, Notify};

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::server::{EnvValue, McpServer};
use super::{answer, http};
use crate::ErrorKind;
use crate::call::Elicitor;
use crate::catalog::upstream::{Answer, Answering, Closing, Upstream};
use crate::sandbox::net::NetPolicy;
use crate::sandbox::outcome::{
    EventSink, GuestEvent, LogLevel, MAX_EVENT_MESSAGE, MAX_GUEST_EVENTS,
};
use crate::sandbox::secrets::Secrets;
use crate::sandbox::secrets::redact::Redactor;
use crate::sandbox::text::{human_duration, truncate, with_causes};
use crate::{Elicitation, ElicitationRequest};

/// The most of one stderr line, and of a connection's stderr, that reaches
/// toolcage's log: a chatty or hostile server cannot flood it.
const STDERR_LINE_BYTES: usize = 1024;
const STDERR_BYTES: usize = 64 << 10;
/// The pause before the first restart of a dead server, doubled at each
/// failed start, and at each death of a server that ran for less than
/// [`STABLE`], up to the last: a server that dies at once is not started
/// twice a second for ever.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LAST_PAUSE: Duration = Duration::from_secs(30);
/// How long a server runs before its death starts the pauses over.
const STABLE: Duration = LAST_PAUSE;

/// One upstream server: its settings, and its connection when it has one.
pub(super) struct Link {
    server: McpServer,
    secrets: Secrets,
    /// The egress policy a remote server is reached through.
    egress: Option<Arc<NetPolicy>>,
    state: Mutex<State>,
    /// The calls in flight, by their progress token: where their events go.
    calls: Calls,
    /// Told when the server says its tool list changed, and when it was
    /// started again (its list may have changed meanwhile).
    changed: Arc<Notify>,
    /// Told when a connection ends, so that the server is started again.
    died: Arc<Notify>,
    /// A start is under way (without the state's lock).
    starting: AtomicBool,
    /// A start was given up half-way: the next look at the state counts
    /// it as failed.
    given_up: AtomicBool,
    /// Told when a start ends, for the calls that waited for it.
    started: Notify,
}

impl Drop for Link {
    /// Wakes the link's background restarts, which then end.
    fn drop(&mut self) {
        self.died.notify_one();
    }
}

type Calls = Arc<std::sync::Mutex<HashMap<ProgressToken, Arc<Watcher>>>>;

struct State {
    connection: Option<Arc<Connection>>,
    /// When the server may next be started, after it died or failed.
    next_start: Instant,
    pause: Duration,
    /// Why it is not running, for the calls that find it so.
    why: String,
    /// Closed on purpose: started again by a call, not in the background.
    closed: bool,
    /// How many times it was closed: a start that sees this change while
    /// it runs ends what it started.
    closes: u64,
}

/// A start under way: when it ends (done, failed, or given up), the calls
/// that waited for it and the background restarts are told. One given up
/// half-way (its call ended) is counted as a failed start, at the next
/// look at the state.
struct Starting<'a> {
    link: &'a Link,
    ended: bool,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.link.given_up.store(true, Ordering::Release);
        }
        self.link.starting.store(false, Ordering::Release);
        self.link.started.notify_waiters();
        self.link.died.notify_one();
    }
}

impl State {
    /// Forgets the connection (the server died, or failed to start, for
    /// `why`), and sets when it may start again: after the pause, which
    /// doubles unless the server had run for [`STABLE`].
    fn forget(&mut self, why: String) {
        let ran = self.connection.take().map(|c| c.started.elapsed());
        if ran.is_some_and(|ran| ran >= STABLE) {
            self.pause = FIRST_PAUSE;
        }
        self.why = why;
        self.next_start = Instant::now() + self.pause;
        self.pause = (self.pause * 2).min(LAST_PAUSE);
    }

    /// The running connection, after forgetting one whose session ended.
    fn running(&mut self) -> Option<Arc<Connection>> {
        let connection = self.connection.as_ref()?;
        if !connection.ended.load(Ordering::Acquire) {
            return Some(connection.clone());
        }
        self.forget("it exited".into());
        None
    }
}

/// A running server: the MCP session, and the child it talks to (killed
/// when the connection is dropped).
struct Connection {
    peer: Peer<RoleClient>,
    /// Ends the session (and so a stdio server's input).
    cancel: std::sync::Mutex<Option<RunningServiceCancellationToken>>,
    /// Set when the session ended, from either side.
    ended: Arc<AtomicBool>,
    started: Instant,
    /// A stdio server's process (killed if it is dropped still running).
    child: std::sync::Mutex<Option<Child>>,
}

impl Connection {
    /// The connection of `service`, which tells `died` when its session
    /// ends.
    fn watched(
        service: RunningService<RoleClient, Handler>,
        child: Option<Child>,
        died: Arc<Notify>,
    ) -> Connection {
        let ended = Arc::new(AtomicBool::new(false));
        let connection = Connection {
            peer: service.peer().clone(),
            cancel: std::sync::Mutex::new(Some(service.cancellation_token())),
            ended: ended.clone(),
            started: Instant::now(),
            child: std::sync::Mutex::new(child),
        };
        tokio::spawn(async move {
            service.waiting().await.ok();
            ended.store(true, Ordering::Release);
            died.notify_one();
        });
        connection
    }

    fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    fn end(&self) {
        let mut cancel = self.cancel.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cancel) = cancel.take() {
            cancel.cancel();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.end();
    }
}

impl Link {
    /// Starts `server` and lists its tools, within its start-up timeout.
    /// From then on, the server is started again in the background each
    /// time it dies, for as long as the link lives.
    pub(super) async fn start(
        server: McpServer,
        secrets: Secrets,
        egress: Option<Arc<NetPolicy>>,
    ) -> Result<(Arc<Link>, Vec<Tool>), String> {
        let calls = Calls::default();
        let changed = Arc::new(Notify::new());
        let died = Arc::new(Notify::new());
        let handler = Handler::new(&server, &secrets, calls.clone(), changed.clone());
        let connection = connect(&server, &secrets, egress.as_ref(), handler, &died).await?;
        let tools = within(&server, connection.peer().list_all_tools()).await?;
        let link = Arc::new(Link {
            server,
            secrets,
            egress,
            calls,
            changed,
            died: died.clone(),
            starting: AtomicBool::new(false),
            given_up: AtomicBool::new(false),
            started: Notify::new(),
            state: Mutex::new(State {
                connection: Some(Arc::new(connection)),
                next_start: Instant::now(),
                pause: FIRST_PAUSE,
                why: String::new(),
                closed: false,
                closes: 0,
            }),
        });
        tokio::spawn(revive(Arc::downgrade(&link), died));
        Ok((link, tools))
    }

    /// The running connection: the current one, or a new one when the
    /// server died and its pause is over (a start already under way is
    /// waited for). A call (`by_call`) starts a server closed on purpose;
    /// the background restarts do not, and a start that ends after a close
    /// is ended at once. The state's lock is never held while starting, so
    /// `close` and the calls that find the server dead answer at once; a
    /// start given up half-way (its caller dropped) ends its process and
    /// lets the next start begin.
    async fn connection(&self, by_call: bool) -> Result<Arc<Connection>, String> {
        let state = loop {
            // Made before `starting` is read: the end of a start cannot
            // slip between the two.
            let started = self.started.notified();
            let mut state = self.lock().await;
            if let Some(connection) = state.running() {
                return Ok(connection);
            }
            if !self.starting.load(Ordering::Acquire) {
                break state;
            }
            drop(state);
            started.await;
        };
        if state.closed && !by_call {
            return Err(self.unavailable(&state, Duration::ZERO));
        }
        let now = Instant::now();
        if now < state.next_start {
            return Err(self.unavailable(&state, state.next_start - now));
        }
        // Closed since this start began: the start is ended at once.
        let closes = state.closes;
        self.starting.store(true, Ordering::Release);
        drop(state);
        let mut starting = Starting {
            link: self,
            ended: false,
        };
        let started = self.start_again().await;
        let mut state = self.state.lock().await;
        starting.ended = true;
        match started {
            Ok(_) if state.closes != closes => Err(self.unavailable(&state, Duration::ZERO)),
            Ok(connection) => {
                tracing::info!(server = %self.server.name(), "the MCP server was started again");
                let connection = Arc::new(connection);
                state.connection = Some(connection.clone());
                state.closed = false;
                self.changed.notify_one();
                Ok(connection)
            }
            Err(why) => {
                tracing::warn!(server = %self.server.name(), "{why}");
                state.forget(why);
                Err(self.unavailable(&state, state.next_start - now))
            }
        }
    }

    /// A new connection to the server.
    async fn start_again(&self) -> Result<Connection, String> {
        let handler = Handler::new(
            &self.server,
            &self.secrets,
            self.calls.clone(),
            self.changed.clone(),
        );
        let secrets = &self.secrets;
        connect(
            &self.server,
            secrets,
            self.egress.as_ref(),
            handler,
            &self.died,
        )
        .await
    }

    /// The state, with a start given up half-way counted as failed.
    async fn lock(&self) -> tokio::sync::MutexGuard<'_, State> {
        let mut state = self.state.lock().await;
        if self.given_up.swap(false, Ordering::AcqRel) && state.connection.is_none() {
            state.forget("its start was given up when the call that began it ended".into());
        }
        state
    }

    /// How long until the server, dead, may be started again; `None` when
    /// it runs, or was closed on purpose.
    async fn until_restart(&self) -> Option<Duration> {
        let mut state = self.lock().await;
        let starting = self.starting.load(Ordering::Acquire);
        if state.closed || starting || state.running().is_some() {
            return None;
        }
        tracing::warn!(server = %self.server.name(), "the MCP server is not running ({}); it is started again in {}", state.why, human_duration(state.next_start.saturating_duration_since(Instant::now())));
        Some(state.next_start.saturating_duration_since(Instant::now()))
    }

    /// Forgets `connection` after a call on it failed with `error` (it
    /// exited, or broke the protocol), so that the server is started again
    /// after its pause; what the call answers.
    async fn lost(&self, connection: &Arc<Connection>, error: rmcp::ServiceError) -> String {
        let mut state = self.state.lock().await;
        let current = state.connection.as_ref();
        if current.is_some_and(|c| Arc::ptr_eq(c, connection)) {
            state.forget(format!("it failed a call: {error}"));
            self.died.notify_one();
        }
        let wait = state.next_start.saturating_duration_since(Instant::now());
        self.unavailable(&state, wait)
    }

    fn unavailable(&self, state: &State, wait: Duration) -> String {
        format!(
            "The MCP server `{}` is not running ({}); it is started again in {}. Try again then, or use another tool.",
            self.server.name(),
            state.why,
            human_duration(wait)
        )
    }

    /// Ends the connection: the session is closed (a stdio server sees its
    /// input end), and a process still running after `bound` is killed.
    /// Later calls start the server again, as after a crash.
    pub(super) async fn close(&self, bound: Duration) {
        let connection = {
            let mut state = self.state.lock().await;
            state.closed = true;
            state.closes += 1;
            state.why = "it was closed".into();
            state.connection.take()
        };
        let Some(connection) = connection else { return };
        connection.end();
        let child = connection
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut child) = child else { return };
        if tokio::time::timeout(bound, child.wait()).await.is_err() {
            tracing::warn!(server = %self.server.name(), "the MCP server did not exit within {} of its input ending; it is killed", human_duration(bound));
            child.kill().await.ok();
        }
    }

    /// What the server now lists, within its start-up timeout.
    pub(super) async fn list_tools(&self) -> Result<Vec<Tool>, String> {
        let connection = self.connection(false).await?;
        within(&self.server, connection.peer().list_all_tools()).await
    }

    /// What is told when the server says its tool list changed.
    pub(super) fn changes(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    async fn answer(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        watcher: Option<Arc<Watcher>>,
    ) -> Answer {
        let name = self.server.name();
        // The call's questions end with it, answered or not.
        let _ended = watcher.as_ref().map(|w| w.ended.clone().drop_guard());
        let began = Instant::now();
        let connection = match tokio::time::timeout(timeout, self.connection(true)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(output)) => {
                let kind = ErrorKind::Unavailable;
                return Answer::Failed { kind, output };
            }
            Err(_) => {
                let kind = ErrorKind::Unavailable;
                let output = format!(
                    "The MCP server `{name}` is being started again, and did not start within the call's timeout of {}. Try again, or use another tool.",
                    human_duration(timeout)
                );
                return Answer::Failed { kind, output };
            }
        };
        // What is left of the call's time once the server runs.
        let left = timeout.saturating_sub(began.elapsed());
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let peer = connection.peer().clone();
        let call = async {
            let options = PeerRequestOptions::no_options();
            let handle = peer.send_cancellable_request(request, options).await?;
            // Until the answer comes, the call's progress goes to its
            // caller; dropped early (at the timeout, or cancelled), it is
            // cancelled upstream.
            let mut in_flight = InFlight {
                calls: self.calls.clone(),
                token: handle.progress_token.clone(),
                id: Some(handle.id.clone()),
                peer: peer.clone(),
            };
            if let Some(watcher) = watcher {
                let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
                calls.insert(handle.progress_token.clone(), watcher);
            }
            let response = handle.await_response().await;
            in_flight.id = None;
            response
        };
        match tokio::time::timeout(left, call).await {
            Ok(Ok(ServerResult::CallToolResult(result))) => answer::from_result(result),
            Ok(Ok(_)) => Answer::Failed {
                kind: ErrorKind::ToolError,
                output: format!(
                    "The MCP server `{name}` answered with something other than a tool result (a request for more input, or a task), which toolcage does not take from an upstream server yet."
                ),
            },
            Err(_) => Answer::Failed {
                kind: ErrorKind::Timeout,
                output: format!(
                    "The MCP server `{name}` did not answer within the call's timeout of {}; the call was cancelled on the server.",
                    human_duration(timeout)
                ),
            },
            Ok(Err(rmcp::ServiceError::McpError(error))) => Answer::Failed {
                kind: ErrorKind::ToolError,
                output: format!(
                    "The MCP server `{name}` refused the call: {} (JSON-RPC error {}).",
                    error.message, error.code.0
                ),
            },
            Ok(Err(error)) => Answer::Failed {
                kind: ErrorKind::Unavailable,
                output: self.lost(&connection, error).await,
            },
        }
    }
}

/// A call in flight: forgotten when it ends, and cancelled upstream when
/// it ends without an answer.
struct InFlight {
    calls: Calls,
    token: ProgressToken,
    id: Option<RequestId>,
    peer: Peer<RoleClient>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.remove(&self.token);
        drop(calls);
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = Some("cancelled by toolcage's caller, or timed out".to_string());
        runtime.spawn(async move {
            let notice = CancelledNotificationParam::new(Some(id), reason);
            peer.notify_cancelled(notice).await.ok();
        });
    }
}

/// Where one call's events go: at most [`MAX_GUEST_EVENTS`], each cut to
/// [`MAX_EVENT_MESSAGE`] and redacted of the operator's secrets, as a
/// component's are; and who answers its server's questions to the user,
/// until the call's deadline.
struct Watcher {
    tool: String,
    sink: Option<EventSink>,
    elicitor: Option<Elicitor>,
    deadline: Instant,
    /// Cancelled when the call ends: its question is then withdrawn.
    ended: tokio_util::sync::CancellationToken,
    sent: AtomicUsize,
    redactor: Option<Arc<Redactor>>,
}

impl Watcher {
    fn new(
        tool: &str,
        sink: Option<EventSink>,
        elicitor: Option<Elicitor>,
        secrets: &Secrets,
        timeout: Duration,
    ) -> Watcher {
        let redactor = secrets.redactor();
        Watcher {
            tool: tool.to_string(),
            sink,
            elicitor,
            deadline: Instant::now() + timeout,
            ended: tokio_util::sync::CancellationToken::new(),
            sent: AtomicUsize::new(0),
            redactor,
        }
    }

    fn bounded(&self, message: String) -> String {
        truncate(self.redacted(message), MAX_EVENT_MESSAGE)
    }

    /// `text` with the operator's secrets redacted.
    fn redacted(&self, text: String) -> String {
        match &self.redactor {
            Some(redactor) => redactor.text(&text).0.into_owned(),
            None => text,
        }
    }

    fn send(&self, event: GuestEvent) {
        let Some(sink) = &self.sink else { return };
        if self.sent.fetch_add(1, Ordering::Relaxed) >= MAX_GUEST_EVENTS {
            return;
        }
        let event = match event {
            GuestEvent::Log { level, message } => GuestEvent::Log {
                level,
                message: self.bounded(message),
            },
            GuestEvent::Progress { message, fraction } => GuestEvent::Progress {
                message: self.bounded(message),
                fraction,
            },
        };
        sink(event);
    }
}

/// toolcage's side of a connection: who it says it is, and where the
/// server's notifications go.
#[derive(Clone)]
struct Handler {
    config: ClientConfig,
    server: String,
    calls: Calls,
    changed: Arc<Notify>,
}

impl Handler {
    fn new(server: &McpServer, _secrets: &Secrets, calls: Calls, changed: Arc<Notify>) -> Handler {
        // 2025-11-25: the newest version whose servers send progress, log
        // and list-changed notifications unasked (2026-07-28 servers send
        // them only on streams the client opens for them, which toolcage
        // does not yet).
        // Elicitation (form) is offered, and answered by the caller of the
        // call it comes up in, when there is one (else declined).
        let capabilities = ClientCapabilities::builder().enable_elicitation().build();
        let config = ClientConfig::new(
            capabilities,
            Implementation::new("toolcage", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        Handler {
            config,
            server: server.name().to_string(),
            calls,
            changed,
        }
    }

    fn watchers(&self) -> Vec<Arc<Watcher>> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.values().cloned().collect()
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    /// A call's progress, to that call's caller.
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watcher) = calls.get(&params.progress_token).cloned() {
            drop(calls);
            let fraction = params
                .total
                .filter(|total| *total > 0.0)
                .map(|total| (params.progress / total).clamp(0.0, 1.0) as f32);
            let message = params.message.unwrap_or_default();
            watcher.send(GuestEvent::Progress { message, fraction });
        }
        std::future::ready(())
    }

    /// A log message, to toolcage's log and to the callers of the calls in
    /// flight on this server (over stdio a message names no call).
    #[allow(deprecated)]
    fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        let text = match params.data {
            Value::String(text) => text,
            other => other.to_string(),
        };
        let message = match params.logger {
            Some(logger) => format!("{logger}: {text}"),
            None => text,
        };
        let level = match params.level {
            LoggingLevel::Debug => LogLevel::Debug,
            LoggingLevel::Info | LoggingLevel::Notice => LogLevel::Info,
            LoggingLevel::Warning => LogLevel::Warn,
            _ => LogLevel::Error,
        };
        tracing::debug!(server = %self.server, "{}", truncate(message.clone(), MAX_EVENT_MESSAGE).escape_debug());
        for watcher in self.watchers() {
            watcher.send(GuestEvent::Log {
                level,
                message: message.clone(),
            });
        }
        std::future::ready(())
    }

    /// A question for the user: asked of the one call in flight on this
    /// server whose caller can ask; declined (and the calls' events say
    /// why) when no caller can, or when several calls are in flight, since
    /// over stdio a question names no call.
    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ElicitResult, ErrorData>> + MaybeSendFuture + '_ {
        let watchers = self.watchers();
        async move {
            let ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } = request
            else {
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            let askers: Vec<&Arc<Watcher>> =
                watchers.iter().filter(|w| w.elicitor.is_some()).collect();
            let (Some(asker), 1) = (askers.first(), askers.len()) else {
                let why = match askers.is_empty() {
                    true => "its caller cannot ask the user",
                    false => {
                        "several calls are in flight on this server, and the question names none"
                    }
                };
                for watcher in &watchers {
                    watcher.send(GuestEvent::Log {
                        level: LogLevel::Warn,
                        message: format!(
                            "The MCP server `{}` asked the user \"{message}\"; toolcage declined: {why}.",
                            self.server
                        ),
                    });
                }
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            // The call's name and arguments, as its caller knows them, are
            // set by the call path.
            // What the server asks is redacted like its answers: a secret
            // in its environment never reaches the user through a question.
            let schema = serde_json::to_string(&requested_schema).unwrap_or_default();
            let Ok(schema) = serde_json::from_str(&asker.redacted(schema)) else {
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            let question = ElicitationRequest {
                tool: asker.tool.clone(),
                arguments: Value::Null,
                message: asker.redacted(message),
                schema,
            };
            let elicitor = asker.elicitor.as_ref().expect("an asker can ask");
            let deadline = tokio::time::Instant::from_std(asker.deadline);
            let asking = tokio::time::timeout_at(deadline, elicitor(question));
            let answered = tokio::select! {
                answered = asking => answered,
                () = asker.ended.cancelled() => return Ok(ElicitResult::new(ElicitationAction::Cancel)),
            };
            let Ok(answer) = answered else {
                asker.send(GuestEvent::Log {
                    level: LogLevel::Warn,
                    message: format!("The MCP server `{}` asked the user a question for `{}`; no answer came within the call's timeout, and the question was cancelled.", self.server, asker.tool),
                });
                return Ok(ElicitResult::new(ElicitationAction::Cancel));
            };
            Ok(match answer {
                Elicitation::Accept(content) => {
                    ElicitResult::new(ElicitationAction::Accept).with_content(content)
                }
                Elicitation::Decline => ElicitResult::new(ElicitationAction::Decline),
                Elicitation::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            })
        }
    }

    fn on_tool_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }
}

impl Upstream for Link {
    fn close(&self, bound: Duration) -> Closing<'_> {
        Box::pin(Link::close(self, bound))
    }

    fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        events: Option<EventSink>,
        elicitor: Option<Elicitor>,
    ) -> Answering<'_> {
        let tool = tool.to_string();
        let watcher = match (events, elicitor) {
            (None, None) => None,
            (events, elicitor) => Some(Arc::new(Watcher::new(
                &tool,
                events,
                elicitor,
                &self.secrets,
                timeout,
            ))),
        };
        Box::pin(async move { self.answer(&tool, arguments, timeout, watcher).await })
    }
}

/// Starts the server of `link` again each time `died` is told its
/// connection ended: after its pause, and again after a longer one while
/// starting fails; not after it was closed on purpose. Ends with the link.
async fn revive(link: Weak<Link>, died: Arc<Notify>) {
    loop {
        died.notified().await;
        loop {
            let Some(wait) = (match link.upgrade() {
                Some(link) => link.until_restart().await,
                None => return,
            }) else {
                break;
            };
            tokio::time::sleep(wait).await;
            let Some(link) = link.upgrade() else { return };
            if link.connection(false).await.is_ok() {
                break;
            }
        }
    }
}

/// `future`, or the reason it did not finish within `server`'s start-up
/// timeout.
async fn within<T>(
    server: &McpServer,
    future: impl Future<Output = Result<T, rmcp::ServiceError>>,
) -> Result<T, String> {
    let name = server.name();
    match tokio::time::timeout(server.startup(), future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!(
            "the MCP server `{name}` did not list its tools: {e}"
        )),
        Err(_) => Err(format!(
            "the MCP server `{name}` did not list its tools within {}",
            human_duration(server.startup())
        )),
    }
}

/// Reaches `server` (starting its command, or over HTTP through `egress`)
/// and initializes an MCP session with it.
async fn connect(
    server: &McpServer,
    secrets: &Secrets,
    egress: Option<&Arc<NetPolicy>>,
    handler: Handler,
    died: &Arc<Notify>,
) -> Result<Connection, String> {
    let died = died.clone();
    match server.url() {
        Some(url) => connect_http(server, url, secrets, egress, handler, died).await,
        None => connect_stdio(server, secrets, handler, died).await,
    }
}

/// A remote server: every request through the egress policy, with its
/// headers (secrets rendered now).
async fn connect_http(
    server: &McpServer,
    url: &str,
    secrets: &Secrets,
    egress: Option<&Arc<NetPolicy>>,
    handler: Handler,
    died: Arc<Notify>,
) -> Result<Connection, String> {
    let name = server.name();
    let refused = |why: String| format!("the MCP server `{name}` may not be reached: {why}");
    let Some(egress) = egress else {
        return Err(refused("the registry has no network".into()));
    };
    let client = http::client(url, egress).map_err(&refused)?;
    http::preflight(url, egress).await.map_err(&refused)?;
    let set = secrets.current();
    let mut headers = HashMap::new();
    for injection in server.headers() {
        let (header, value) = injection.render(&set).map_err(|missing| {
            format!("the MCP server `{name}`'s header {} names the secret `{missing}`, which is not set", injection.header())
        })?;
        headers.insert(header, value);
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    initialized(server, handler.serve(transport), None, died).await
}

/// The session `serving` makes, within `server`'s start-up timeout, with
/// the process it talks to (if any); `died` is told when it ends.
async fn initialized<E: std::error::Error + 'static>(
    server: &McpServer,
    serving: impl Future<Output = Result<RunningService<RoleClient, Handler>, E>>,
    child: Option<Child>,
    died: Arc<Notify>,
) -> Result<Connection, String> {
    let name = server.name();
    match tokio::time::timeout(server.startup(), serving).await {
        Ok(Ok(service)) => Ok(Connection::watched(service, child, died)),
        Ok(Err(e)) => Err(format!(
            "the MCP server `{name}` did not initialize: {}",
            with_causes(&e)
        )),
        Err(_) => Err(format!(
            "the MCP server `{name}` did not initialize within {}",
            human_duration(server.startup())
        )),
    }
}

/// Starts `server`'s command and initializes an MCP session with it.
async fn connect_stdio(
    server: &McpServer,
    secrets: &Secrets,
    handler: Handler,
    died: Arc<Notify>,
) -> Result<Connection, String> {
    let name = server.name();
    let mut child = command(server, secrets)?.spawn().map_err(|e| {
        format!(
            "the MCP server `{name}` did not start: `{}`: {e}",
            server.command()
        )
    })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(format!("the MCP server `{name}` has no standard streams"));
    };
    tokio::spawn(log_stderr(name.to_string(), stderr));
    initialized(server, handler.serve((stdout, stdin)), Some(child), died).await
}

/// The command that starts `server`: an empty environment but for the
/// variables it names, its streams piped, killed with its connection; under
/// `bwrap` when it is confined.
fn command(server: &McpServer, secrets: &Secrets) -> Result<Command, String> {
    let name = server.name();
    let program = which(server.command()).ok_or_else(|| {
        format!(
            "the MCP server `{name}`'s command `{}` is not on PATH",
            server.command()
        )
    })?;
    let mut command = match server.confinement() {
        None => {
            let mut command = Command::new(&program);
            if let Some(dir) = server.directory() {
                command.current_dir(dir);
            }
            command
        }
        Some(bubblewrap) => {
            let bwrap = which("bwrap").ok_or_else(|| {
                format!("the MCP server `{name}` is to run under bubblewrap, but `bwrap` is not on PATH (Debian's package `bubblewrap`)")
            })?;
            let mut command = Command::new(bwrap);
            command.args(bubblewrap.arguments());
            if let Some(dir) = server.directory() {
                command.arg("--chdir").arg(dir);
            }
            command.arg("--").arg(&program);
            command
        }
    };
    command
        .args(server.arguments())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let current = secrets.current();
    for (var, value) in server.environment() {
        let value = match value {
            EnvValue::Text(text) => text.as_str(),
            EnvValue::Secret(secret) => current.get(secret).map(|s| s.value()).ok_or_else(|| {
                format!(
                    "the MCP server `{name}`'s variable {var} names the secret `{secret}`, which is not set"
                )
            })?,
        };
        command.env(var, value);
    }
    Ok(command)
}

/// `program` as a path: itself when it holds a `/`, else the first match on
/// toolcage's own `PATH` (the server's environment has none unless named).
fn which(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Copies a server's stderr to the log, each line cut, until the
/// connection's share is spent; the rest is read and dropped, so that the
/// server never blocks on a full pipe, and no line (however long) is held
/// whole.
async fn log_stderr(server: String, mut stderr: impl AsyncRead + Unpin) {
    let mut chunk = [0u8; 4096];
    let mut line = Vec::with_capacity(STDERR_LINE_BYTES);
    let mut logged = 0;
    let mut log = |line: &mut Vec<u8>| {
        if logged < STDERR_BYTES && !line.is_empty() {
            logged += line.len();
            let text = String::from_utf8_lossy(line);
            tracing::info!(server = %server, "{}", text.trim_end());
            if logged >= STDERR_BYTES {
                tracing::warn!(server = %server, "the MCP server's stderr passed {STDERR_BYTES} bytes; the rest is not logged");
            }
        }
        line.clear();
    };
    loop {
        let read = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => return log(&mut line),
            Ok(read) => read,
        };
        for &byte in &chunk[..read] {
            match byte {
                b'\n' => log(&mut line),
                _ if line.len() < STDERR_LINE_BYTES => line.push(byte),
                _ => {}
            }
        }
    }
}
