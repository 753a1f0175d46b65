//! The life of one upstream server: starting it, calling it, closing it,
//! and starting it again, in the background, after it died.
//!
//! Threat model: a server may die at any time, start slowly, or die again
//! as soon as it starts. A server that dies is started again after a pause
//! ([`FIRST_PAUSE`]) that doubles at each failed start, and at each death
//! of a server that ran for less than [`STABLE`], up to [`LAST_PAUSE`]: a
//! server that dies at once is not started twice a second for ever, and
//! meanwhile its tools answer `unavailable`, saying when it starts again.
//! A call waits for a start under way, within its own timeout only. A
//! server closed on purpose is not started again in the background, only
//! by a call; a start that ends after a close ends what it started, and a
//! start given up half-way (its call ended) ends its process and counts as
//! failed. The state's lock is never held while starting, so that a close,
//! and the calls that find the server dead, answer at once. A call waits at
//! most the call's timeout for its answer, then is cancelled upstream; a
//! close waits at most its bound for the process to exit, then kills it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{ServerResult, Tool};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, MutexGuard, Notify};

use super::answer;
use super::client::{Calls, Watcher};
use super::error::LinkError;
use super::oversize;
use super::server::UpstreamServer;
use super::session::{Connection, Wiring, connect};
use crate::catalog::elicit::Elicitor;
use crate::catalog::upstream::{Answering, Closing, Upstream, UpstreamAnswer};
use crate::sandbox::net::NetPolicy;
use crate::sandbox::outcome::{ErrorKind, EventSink};
use crate::sandbox::secrets::Secrets;
use crate::sandbox::text::{human_bytes, human_duration};

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
    server: UpstreamServer,
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
    /// The output limit of the server's calls.
    output_bytes: usize,
}

impl Drop for Link {
    /// Wakes the link's background restarts, which then end.
    fn drop(&mut self) {
        self.died.notify_one();
    }
}

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
        let ran = self.connection.take().map(|c| c.ran());
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
        if !connection.has_ended() {
            return Some(connection.clone());
        }
        self.forget("it exited".into());
        None
    }
}

impl Link {
    /// Starts `server` and lists its tools, within its start-up timeout.
    /// From then on, the server is started again in the background each
    /// time it dies, for as long as the link lives.
    pub(super) async fn start(
        server: UpstreamServer,
        secrets: Secrets,
        egress: Option<Arc<NetPolicy>>,
        output_bytes: usize,
    ) -> Result<(Arc<Link>, Vec<Tool>), LinkError> {
        let calls = Calls::default();
        let changed = Arc::new(Notify::new());
        let died = Arc::new(Notify::new());
        let wiring = Wiring {
            secrets: &secrets,
            egress: egress.as_ref(),
            calls: &calls,
            changed: &changed,
            died: &died,
            bound: oversize::bound(output_bytes),
        };
        let connection = connect(&server, wiring).await?;
        let tools = connection.list_tools(&server).await?;
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
            output_bytes,
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
    async fn connection(&self, by_call: bool) -> Result<Arc<Connection>, LinkError> {
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
                state.forget(why.to_string());
                Err(self.unavailable(&state, state.next_start - now))
            }
        }
    }

    /// A new connection to the server.
    async fn start_again(&self) -> Result<Connection, LinkError> {
        let wiring = Wiring {
            secrets: &self.secrets,
            egress: self.egress.as_ref(),
            calls: &self.calls,
            changed: &self.changed,
            died: &self.died,
            bound: oversize::bound(self.output_bytes),
        };
        connect(&self.server, wiring).await
    }

    /// The state, with a start given up half-way counted as failed.
    async fn lock(&self) -> MutexGuard<'_, State> {
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
    async fn lost(&self, connection: &Arc<Connection>, error: rmcp::ServiceError) -> LinkError {
        let mut state = self.state.lock().await;
        let current = state.connection.as_ref();
        if current.is_some_and(|c| Arc::ptr_eq(c, connection)) {
            state.forget(format!("it failed a call: {error}"));
            self.died.notify_one();
        }
        let wait = state.next_start.saturating_duration_since(Instant::now());
        self.unavailable(&state, wait)
    }

    fn unavailable(&self, state: &State, wait: Duration) -> LinkError {
        LinkError::NotRunning {
            server: self.server.name().to_string(),
            why: state.why.clone(),
            wait,
        }
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
        let Some(mut child) = connection.take_child() else {
            return;
        };
        if tokio::time::timeout(bound, child.wait()).await.is_err() {
            tracing::warn!(server = %self.server.name(), "the MCP server did not exit within {} of its input ending; it is killed", human_duration(bound));
            child.kill().await.ok();
        }
    }

    /// What the server now lists, within its start-up timeout.
    pub(super) async fn list_tools(&self) -> Result<Vec<Tool>, LinkError> {
        let connection = self.connection(false).await?;
        connection.list_tools(&self.server).await
    }

    /// What is told when the server says its tool list changed.
    pub(super) fn changes(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// Calls the server's tool `tool`, within `timeout` in all (its start,
    /// if it must be started, included); what the call answers.
    async fn answer(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        watcher: Option<Arc<Watcher>>,
    ) -> UpstreamAnswer {
        let name = self.server.name();
        // The call's questions end with it, answered or not.
        let _ended = watcher.as_ref().map(|w| w.ending());
        let began = Instant::now();
        let connection = match tokio::time::timeout(timeout, self.connection(true)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                let kind = ErrorKind::Unavailable;
                let output = error.to_string();
                return UpstreamAnswer::Failed { kind, output };
            }
            Err(_) => {
                let kind = ErrorKind::Unavailable;
                let output = format!(
                    "The MCP server `{name}` is being started again, and did not start within the call's timeout of {}. Try again, or use another tool.",
                    human_duration(timeout)
                );
                return UpstreamAnswer::Failed { kind, output };
            }
        };
        // What is left of the call's time once the server runs.
        let left = timeout.saturating_sub(began.elapsed());
        let call = connection.call(&self.calls, tool, arguments, watcher);
        match tokio::time::timeout(left, call).await {
            Ok(Ok(ServerResult::CallToolResult(result))) => answer::from_result(result),
            Ok(Ok(_)) => UpstreamAnswer::Failed {
                kind: ErrorKind::ToolError,
                output: format!(
                    "The MCP server `{name}` answered with something other than a tool result (a request for more input, or a task), which toolcage does not take from an upstream server yet."
                ),
            },
            Err(_) => UpstreamAnswer::Failed {
                kind: ErrorKind::Timeout,
                output: format!(
                    "The MCP server `{name}` did not answer within the call's timeout of {}; the call was cancelled on the server.",
                    human_duration(timeout)
                ),
            },
            Ok(Err(rmcp::ServiceError::McpError(error))) if error.code == oversize::CODE => {
                self.too_long(tool)
            }
            Ok(Err(rmcp::ServiceError::McpError(error))) => UpstreamAnswer::Failed {
                kind: ErrorKind::ToolError,
                output: format!(
                    "The MCP server `{name}` refused the call: {} (JSON-RPC error {}).",
                    error.message, error.code.0
                ),
            },
            Ok(Err(error)) => UpstreamAnswer::Failed {
                kind: ErrorKind::Unavailable,
                output: self.lost(&connection, error).await.to_string(),
            },
        }
    }
}

impl Link {
    /// The answer of a call whose answer was too long to read.
    fn too_long(&self, tool: &str) -> UpstreamAnswer {
        let name = self.server.name();
        let (bound, limit) = (oversize::bound(self.output_bytes), self.output_bytes);
        UpstreamAnswer::Failed {
            kind: ErrorKind::OutputLimit,
            output: format!(
                "The MCP server `{name}` answered `{tool}` with more than {}, far over the output limit of {}; the answer was dropped unread, and the server still runs. Ask for less: a narrower query, a smaller range, or fewer results.",
                human_bytes(bound),
                human_bytes(limit)
            ),
        }
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
