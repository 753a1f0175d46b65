//! The MCP server: the registry's tools over the Model Context Protocol, on
//! stdio or Streamable HTTP, through the official Rust SDK (`rmcp`).
//!
//! A thin frontend: `tools/list` maps the registry's descriptors, and every
//! `tools/call` goes through the same [`Runner`](crate::agent::Runner) as the CLI's batches (lookup,
//! argument validation, the operator's permission rules, then the sandbox).
//! MCP types stay in this module: the server takes and gives toolcage's
//! own types ([`Shutdown`], [`Listener`], [`ServeError`]), and the points
//! where an embedder needs rmcp's or axum's are in
//! [`crate::integration`].
//!
//! Threat model: a client is a model's agent, so everything it sends is
//! untrusted: an unknown tool is a protocol error listing nothing secret, bad
//! arguments and breached limits are `isError` results a model can act on,
//! and a cancelled request stops its guest within milliseconds. Over HTTP,
//! see [`http`] for who may reach the server at all.
//!
//! ```no_run
//! # async fn demo(registry: toolcage::Registry) -> Result<(), toolcage::mcp::ServeError> {
//! use std::sync::Arc;
//! use toolcage::agent::Permissions;
//! use toolcage::mcp::McpServer;
//!
//! let server = McpServer::new(Arc::new(registry)).permissions(Permissions::allow_all());
//! server.serve_stdio().await?;
//! # Ok(())
//! # }
//! ```

// MCP logging is deprecated by the 2026-07-28 revision (SEP-2577), but it is
// how clients of every revision still receive a tool's log lines.
#![allow(deprecated)]

mod approval;
mod call;
mod cores;
pub(crate) mod handler;
pub mod http;
mod mapping;
mod parse;
mod serve;
mod stdio;
pub mod tasks;
#[cfg(feature = "otel")]
mod telemetry;

use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam,
    ProgressNotification, ProgressNotificationParam, RequestId, RequestMetaObject,
    ServerNotification,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use tokio_util::sync::CancellationToken;

pub use mapping::CALL_META_KEY;
pub use serve::{Listener, ServeError, SessionError, Shutdown};
pub use tasks::{InvalidTaskRoute, TaskOptions};

use crate::catalog::live::LiveRegistry;
use crate::catalog::permissions::{LiveRules, Permissions};
use crate::state::{ScriptSessions, SessionLimits};
#[cfg(feature = "otel")]
use crate::telemetry::Telemetry;

/// The log level sent to a client that has not asked for one.
const DEFAULT_LOG_LEVEL: LoggingLevel = LoggingLevel::Warning;

/// How long a client may cache the tool list (`ttlMs`) when it can change
/// while the server runs: within this, a reload is seen even by clients that
/// take no `list_changed` notifications.
const LIVE_LIST_TTL: Duration = Duration::from_secs(2);
/// How long a `list_changed` notification may take to be sent to one
/// client before it is given up.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may cache the tool list when only a restart (or a
/// redeployment) changes it.
const FIXED_LIST_TTL: Duration = Duration::from_secs(300);

/// How long the stdio server, with nothing to do, watches its input before
/// it sleeps: see [`McpServer::serve_stdio_until`].
pub const STDIO_SPIN: Duration = Duration::from_micros(100);

/// How often, by default, a call with a progress token reports progress
/// while its tool reports none: see [`McpServer::keep_alive`].
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Serves a registry's tools over MCP. Cloning shares the registry and the
/// rules; each clone keeps its own client's log level, so make one per
/// connection (the HTTP transport does).
///
/// By default every call is denied ([`Permissions::deny_all`]), like a
/// [`Runner`](crate::agent::Runner) built in code: give the operator's rules with
/// [`permissions`](Self::permissions). A call whose rule is `ask` is put to
/// the user through the client: on 2026-07-28 as an input-required result
/// the client answers by calling again, on older revisions as an
/// `elicitation/create` request. A client without elicitation gets a
/// denial saying why.
///
/// A call whose request carries a progress token, and whose tool goes
/// quiet for [`DEFAULT_KEEP_ALIVE`], gets a progress notification ("still
/// running") at that interval until it ends (at the latest at its timeout),
/// so that clients which reset their request timeout on progress keep
/// waiting: see [`keep_alive`](Self::keep_alive).
///
/// Served from a [`LiveRegistry`] (with directories, reloaded or watched),
/// every change of the tool set is announced with
/// `notifications/tools/list_changed`: on the sessions of revisions before
/// 2026-07-28, and on 2026-07-28 `subscriptions/listen` streams.
#[derive(Clone)]
pub struct McpServer {
    tools: LiveRegistry,
    /// The operator's rules, replaced as a whole by
    /// [`set_permissions`](Self::set_permissions).
    permissions: LiveRules,
    /// The calls running, over every connection.
    in_flight: InFlight,
    /// The minimum level the client asked for with `logging/setLevel`.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// The sessions (before 2026-07-28) told when the tools change.
    sessions: Peers,
    /// How long a call's progress may be quiet before the server reports
    /// for it; `None`: never.
    keep_alive: Option<Duration>,
    /// The tasks made for long calls; `None`: no tasks.
    tasks: Option<tasks::Tasks>,
    /// The same, for the gauge of tasks by status to read whichever tasks
    /// the server has when metrics are collected.
    counted_tasks: Arc<Mutex<Option<tasks::Tasks>>>,
    /// Whether `tools/list` shows only code mode's tools.
    code_mode_only: bool,
    /// Seals the state a paused run's client carries.
    state: Arc<crate::state::Sealer>,
    /// The bounds of code mode's sessions; `None`: no sessions.
    session_limits: Option<SessionLimits>,
    /// Code mode's sessions, in the state's store.
    script_sessions: Option<Arc<ScriptSessions>>,
    /// Where calls report spans and metrics.
    #[cfg(feature = "otel")]
    telemetry: Option<Telemetry>,
}

/// The initialized sessions of the older revisions, over every connection,
/// and the task that tells them about changes (started with the first).
#[derive(Clone, Default)]
struct Peers {
    peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    announcer: Arc<OnceLock<tokio::task::JoinHandle<()>>>,
}

impl McpServer {
    /// A server of `registry`'s tools (a [`Registry`](crate::Registry) in
    /// an `Arc`, or a [`LiveRegistry`]) that denies every call until given
    /// permission rules.
    pub fn new(registry: impl Into<LiveRegistry>) -> Self {
        let tools: LiveRegistry = registry.into();
        McpServer {
            permissions: LiveRules::new(Permissions::deny_all()),
            tools,
            in_flight: InFlight::default(),
            log_level: Arc::default(),
            sessions: Peers::default(),
            keep_alive: Some(DEFAULT_KEEP_ALIVE),
            tasks: None,
            counted_tasks: Arc::default(),
            code_mode_only: false,
            state: Arc::default(),
            session_limits: Some(SessionLimits::default()),
            script_sessions: None,
            #[cfg(feature = "otel")]
            telemetry: None,
        }
        .with_sessions()
        .tasks(Some(TaskOptions::default()))
    }

    /// Code mode's sessions as the limits say, in the state's store.
    fn with_sessions(mut self) -> Self {
        let store = self.state.store().clone();
        self.script_sessions = self
            .session_limits
            .map(|limits| Arc::new(ScriptSessions::new(store, limits)));
        self
    }

    /// Seals the state a paused run's client carries to its retry (a
    /// 2026-07-28 call that stops to ask a question) as `options` say: the
    /// key (give replicas one key and one store, for each to take the
    /// others' states), the expiry, what travels inline. Default:
    /// [`StateOptions::default`](crate::state::StateOptions), a key of
    /// this process's own. See [`crate::state::seal`].
    pub fn state(mut self, options: crate::state::StateOptions) -> Self {
        self.state = Arc::new(options.build());
        self.with_sessions()
    }

    /// Keeps code mode's sessions (a `run_code` naming a `session`) under
    /// `limits`, for each caller apart (a token's hash over HTTP, anyone
    /// over HTTP without tokens, the server process over stdio), in the
    /// state's store (see [`state`](Self::state)). `None`: no sessions, so
    /// a script naming one runs without it and says so. Default:
    /// [`SessionLimits::default`]. See [`crate::state::session`].
    pub fn script_sessions(mut self, limits: Option<SessionLimits>) -> Self {
        self.session_limits = limits;
        self.with_sessions()
    }

    /// Lists only code mode's tools (`run_code`, `search_tools`,
    /// `describe_tool`) in `tools/list`, so that a large catalog reaches the
    /// model as `run_code`'s stubs (or one line per tool) rather than as
    /// one definition per tool. The other tools stay callable, from scripts
    /// and directly, under the same rules. Default: every tool is listed.
    pub fn code_mode_only(mut self, only: bool) -> Self {
        self.code_mode_only = only;
        self
    }

    /// Makes a call a task (the `io.modelcontextprotocol/tasks` extension
    /// of 2026-07-28) when it runs longer than the options say and its
    /// client declares the extension: the client then polls `tasks/get`
    /// for the result instead of waiting on the request. `None`: no tasks
    /// (the extension is not offered). Default: tasks with
    /// [`TaskOptions::default`]. See [`tasks`] for the bounds.
    pub fn tasks(mut self, options: Option<TaskOptions>) -> Self {
        self.tasks = options.map(tasks::Tasks::new);
        *self.counted_tasks.lock().unwrap_or_else(|e| e.into_inner()) = self.tasks.clone();
        self
    }

    /// Reports each `tools/call` as a span (`tools/call {tool}`, kind
    /// SERVER, under the client's trace context from `_meta`, on every
    /// revision) and in metrics, including `mcp.server.operation.duration`.
    /// Default: none.
    #[cfg(feature = "otel")]
    pub fn telemetry(mut self, telemetry: Telemetry) -> Self {
        let counted = self.counted_tasks.clone();
        telemetry.observe_tasks(move || {
            let tasks = counted.lock().unwrap_or_else(|e| e.into_inner());
            tasks
                .as_ref()
                .map_or_else(Vec::new, |tasks| tasks.counts().to_vec())
        });
        self.telemetry = Some(telemetry);
        self
    }

    /// Reports progress for a call whose tool has been quiet for `interval`
    /// (and again each `interval` it stays quiet), when its request has a
    /// progress token; `None` never does. A zero interval is taken as
    /// `None`. Default: [`DEFAULT_KEEP_ALIVE`] (10 s).
    pub fn keep_alive(mut self, interval: Option<Duration>) -> Self {
        self.keep_alive = interval.filter(|i| !i.is_zero());
        self
    }

    /// The operator's permission rules. Default: deny every call.
    pub fn permissions(self, permissions: Permissions) -> Self {
        self.set_permissions(permissions);
        self
    }

    /// Replaces the permission rules, for this server and its clones, from
    /// the next call on: a call already running, and each nested call of a
    /// script running, is checked against them when its next nested call
    /// starts.
    pub fn set_permissions(&self, permissions: Permissions) {
        self.permissions.set(permissions);
    }

    /// A copy for another connection: the same tools and rules, its own log
    /// level.
    pub fn for_connection(&self) -> Self {
        McpServer {
            log_level: Arc::default(),
            ..self.clone()
        }
    }

    /// Serves one client on standard input and output until it closes its
    /// end. Standard output carries MCP messages only.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        self.serve_stdio_until(Shutdown::new()).await
    }

    /// Serves one client on standard input and output until it closes its
    /// end or `shutdown` is triggered. Either way the calls in flight finish
    /// (within their limits) and their results are sent before it returns.
    ///
    /// The client is served on a thread of its own, on a single-threaded
    /// runtime: reading a request, rmcp's service
    /// loop, the call and the answer hand nothing to another thread. When
    /// no call runs, that thread watches standard input for [`STDIO_SPIN`]
    /// before it sleeps, so a client's next request (an agent's next step)
    /// is read without waking a sleeping thread, which on a virtual machine
    /// costs more than the call itself.
    pub async fn serve_stdio_until(self, shutdown: Shutdown) -> Result<(), ServeError> {
        let idle = self.in_flight.clone();
        let core = cores::Cores::with_park_hook("toolcage-stdio", 1, move || {
            if idle.is_idle() {
                stdio::await_stdin(STDIO_SPIN);
            }
        })?;
        core.next()
            .spawn(self.serve_stdio_here(shutdown.token()))
            .await
            .unwrap_or_else(|e| Err(SessionError::thread(e).into()))
    }

    /// [`Self::serve_stdio_until`], on the current runtime.
    async fn serve_stdio_here(self, shutdown: CancellationToken) -> Result<(), ServeError> {
        let in_flight = self.in_flight.clone();
        // The end of stdin reaches rmcp only once no call is running, so
        // that it does not cut the last results short.
        // Pipes (as clients launch servers) are driven by the IO reactor
        // rather than a blocking thread per read and write.
        let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
        let input = stdio::DrainingInput {
            inner: stdin,
            in_flight: in_flight.clone(),
        };
        let (tasks, tools) = (self.tasks.clone(), self.tools.clone());
        let running = handler::Handler::from(self)
            .serve(stdio::StdioTransport::new(input, stdout))
            .await
            .map_err(SessionError::initialize)?;
        let stop = running.cancellation_token();
        let waiting = running.waiting();
        tokio::pin!(waiting);
        tokio::select! {
            quit = &mut waiting => { quit.map_err(SessionError::service_loop)?; }
            () = shutdown.cancelled() => {
                in_flight.idle().await;
                stop.cancel();
                waiting.await.map_err(SessionError::service_loop)?;
            }
        }
        // Nobody can ask for these tasks' results any more.
        if let Some(tasks) = tasks {
            tasks.cancel_all();
        }
        report_left_behind(&tools);
        Ok(())
    }

    /// The minimum level of guest log lines this request's client wants:
    /// per request on 2026-07-28, else what it set, else warnings.
    fn log_threshold(&self, meta: &RequestMetaObject) -> LoggingLevel {
        meta.log_level().unwrap_or_else(|| {
            self.log_level
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(DEFAULT_LOG_LEVEL)
        })
    }
}

/// What a `tools/call` takes from the request that carries it.
struct CallContext {
    id: RequestId,
    /// The request's `_meta`: its progress token, log level, trace context.
    meta: RequestMetaObject,
    /// Cancelled when the client cancels the request.
    ct: CancellationToken,
    notify: Notify,
    /// The request's HTTP head, for a call answered directly (rmcp keeps
    /// it in the session's context).
    http: Option<::http::request::Parts>,
    /// rmcp's context of the request; `None` for a call answered directly
    /// over HTTP ([`http::direct`]), whose client can be neither asked nor
    /// given a task.
    session: Option<RequestContext<RoleServer>>,
}

impl From<RequestContext<RoleServer>> for CallContext {
    fn from(context: RequestContext<RoleServer>) -> Self {
        CallContext {
            id: context.id.clone(),
            meta: context.meta.clone(),
            ct: context.ct.clone(),
            notify: Notify::Peer(context.peer.clone()),
            http: None,
            session: Some(context),
        }
    }
}

impl CallContext {
    /// The request's HTTP head, when it came over HTTP.
    #[cfg(feature = "otel")]
    fn http(&self) -> Option<&::http::request::Parts> {
        match &self.session {
            Some(session) => session.extensions.get(),
            None => self.http.as_ref(),
        }
    }
}

/// Where a call's notifications go.
#[derive(Clone)]
enum Notify {
    /// To rmcp's peer of the request's session or stream.
    Peer(Peer<RoleServer>),
    /// Into the response of the POST that carries the call, ahead of its
    /// result ([`http::direct`]).
    Response(tokio::sync::mpsc::UnboundedSender<ServerNotification>),
}

impl Notify {
    async fn send(&self, notification: ServerNotification) {
        match self {
            Notify::Peer(peer) => {
                peer.send_notification(notification).await.ok();
            }
            Notify::Response(sender) => {
                sender.send(notification).ok();
            }
        }
    }

    async fn progress(&self, param: ProgressNotificationParam) {
        let notification = ProgressNotification::new(param);
        self.send(ServerNotification::ProgressNotification(notification))
            .await;
    }

    async fn log(&self, param: LoggingMessageNotificationParam) {
        let notification = LoggingMessageNotification::new(param);
        self.send(ServerNotification::LoggingMessageNotification(notification))
            .await;
    }
}

impl McpServer {
    /// The tasks, for a `tasks/*` request (which rmcp only passes on when
    /// the server offers the extension).
    fn served_tasks(&self) -> Result<&tasks::Tasks, McpError> {
        self.tasks
            .as_ref()
            .ok_or_else(|| McpError::internal_error("this server keeps no tasks", None))
    }
}

impl Peers {
    /// Tells `peer` about changes of `tools` from now on, if it speaks a
    /// revision before 2026-07-28 (later ones use `subscriptions/listen`).
    fn add(&self, peer: Peer<RoleServer>, tools: &LiveRegistry) {
        let legacy = peer
            .peer_info()
            .is_some_and(|info| info.protocol_version.has_initialize());
        if !legacy || tools.is_fixed() {
            return;
        }
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.retain(|peer| !peer.is_transport_closed());
        peers.push(peer);
        drop(peers);
        self.announcer.get_or_init(|| {
            let (peers, mut changes) = (self.peers.clone(), tools.subscribe());
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                while let Ok(_) | Err(RecvError::Lagged(_)) = changes.recv().await {
                    let listeners: Vec<Peer<RoleServer>> = {
                        let mut peers = peers.lock().unwrap_or_else(|e| e.into_inner());
                        peers.retain(|peer| !peer.is_transport_closed());
                        peers.clone()
                    };
                    // Each at once, so a slow client delays nobody else.
                    let sends = listeners.into_iter().map(|peer| async move {
                        tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed())
                            .await
                            .ok();
                    });
                    futures::future::join_all(sends).await;
                }
            })
        });
    }
}

/// Counts the calls running, and wakes whoever waits for none.
#[derive(Clone, Default)]
pub(crate) struct InFlight {
    state: Arc<Mutex<(usize, Vec<Waker>)>>,
}

/// One running call; dropping it ends it.
pub(crate) struct Running(InFlight);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Vec<Waker>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn start(&self) -> Running {
        self.lock().0 += 1;
        Running(self.clone())
    }

    /// Ready when no call runs; otherwise registers `waker`.
    pub(crate) fn poll_idle(&self, waker: &Waker) -> Poll<()> {
        let mut state = self.lock();
        if state.0 == 0 {
            return Poll::Ready(());
        }
        state.1.push(waker.clone());
        Poll::Pending
    }

    /// Whether no call runs now.
    pub(crate) fn is_idle(&self) -> bool {
        self.lock().0 == 0
    }

    pub(crate) async fn idle(&self) {
        std::future::poll_fn(|cx| self.poll_idle(cx.waker())).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.0 -= 1;
        if state.0 == 0 {
            state.1.drain(..).for_each(Waker::wake);
        }
    }
}

/// Says, at shutdown, how many calls' workers are still blocked in a file
/// operation: their results went out at their deadline, and their threads
/// end with the process.
pub(crate) fn report_left_behind(tools: &LiveRegistry) {
    let stuck = tools.current().stuck_calls();
    if stuck > 0 {
        tracing::warn!(
            stuck,
            "shutting down with {stuck} given-up calls still blocked in a file operation (a FIFO or a stalled mount?); their threads end with the process"
        );
    }
}
