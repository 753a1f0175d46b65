//! The connection to one upstream server over stdio: starting it, calling
//! it, and starting it again after it died.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use super::answer;
use super::server::{EnvValue, McpServer};
use crate::ErrorKind;
use crate::catalog::upstream::{Answer, Answering, Upstream};
use crate::sandbox::secrets::Secrets;
use crate::sandbox::text::human_duration;

/// The most of one stderr line, and of a connection's stderr, that reaches
/// toolcage's log: a chatty or hostile server cannot flood it.
const STDERR_LINE_BYTES: usize = 1024;
const STDERR_BYTES: usize = 64 << 10;
/// The pause before the first restart of a dead server, doubled at each
/// failed one up to the last.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LAST_PAUSE: Duration = Duration::from_secs(30);

/// One upstream server: its settings, and its connection when it has one.
pub(super) struct Link {
    server: McpServer,
    secrets: Secrets,
    state: Mutex<State>,
}

struct State {
    connection: Option<Arc<Connection>>,
    /// When the server may next be started, after it died or failed.
    next_start: Instant,
    pause: Duration,
    /// Why it is not running, for the calls that find it so.
    why: String,
}

/// A running server: the MCP session, and the child it talks to (killed
/// when the connection is dropped).
struct Connection {
    service: RunningService<RoleClient, ClientConfig>,
    _child: Child,
}

impl Connection {
    fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }
}

impl Link {
    /// Starts `server` and lists its tools, within its start-up timeout.
    pub(super) async fn start(
        server: McpServer,
        secrets: Secrets,
    ) -> Result<(Link, Vec<Tool>), String> {
        let connection = connect(&server, &secrets).await?;
        let tools = within(&server, connection.peer().list_all_tools()).await?;
        let link = Link {
            server,
            secrets,
            state: Mutex::new(State {
                connection: Some(Arc::new(connection)),
                next_start: Instant::now(),
                pause: FIRST_PAUSE,
                why: String::new(),
            }),
        };
        Ok((link, tools))
    }

    /// The running connection: the current one, or a new one when the
    /// server died and its pause is over.
    async fn connection(&self) -> Result<Arc<Connection>, String> {
        let mut state = self.state.lock().await;
        if let Some(connection) = &state.connection {
            if !connection.service.is_closed() {
                return Ok(connection.clone());
            }
            state.connection = None;
            state.why = "it exited".into();
            state.next_start = Instant::now() + state.pause;
            tracing::warn!(server = %self.server.name(), "the MCP server exited; it is started again on a call after {}", human_duration(state.pause));
        }
        let now = Instant::now();
        if now < state.next_start {
            return Err(self.unavailable(&state, state.next_start - now));
        }
        match connect(&self.server, &self.secrets).await {
            Ok(connection) => {
                tracing::info!(server = %self.server.name(), "the MCP server was started again");
                let connection = Arc::new(connection);
                state.connection = Some(connection.clone());
                state.pause = FIRST_PAUSE;
                Ok(connection)
            }
            Err(why) => {
                tracing::warn!(server = %self.server.name(), "{why}");
                state.why = why;
                state.next_start = now + state.pause;
                let pause = state.pause;
                state.pause = (state.pause * 2).min(LAST_PAUSE);
                Err(self.unavailable(&state, pause))
            }
        }
    }

    /// Forgets `connection` after a call on it failed with `error` (it
    /// exited, or broke the protocol), so that the server is started again
    /// after its pause; what the call answers.
    async fn lost(&self, connection: &Arc<Connection>, error: rmcp::ServiceError) -> String {
        let mut state = self.state.lock().await;
        let current = state.connection.as_ref();
        if current.is_some_and(|c| Arc::ptr_eq(c, connection)) {
            tracing::warn!(server = %self.server.name(), "the MCP server failed a call ({error}); it is started again on a call after {}", human_duration(state.pause));
            state.connection = None;
            state.why = format!("it failed a call: {error}");
            state.next_start = Instant::now() + state.pause;
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

    async fn answer(&self, tool: &str, arguments: Map<String, Value>, timeout: Duration) -> Answer {
        let name = self.server.name();
        let connection = match self.connection().await {
            Ok(connection) => connection,
            Err(output) => {
                let kind = ErrorKind::Unavailable;
                return Answer::Failed { kind, output };
            }
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        // Dropping the call (at the timeout, or when the caller cancels)
        // sends `notifications/cancelled` upstream.
        match tokio::time::timeout(timeout, connection.peer().call_tool(params)).await {
            Ok(Ok(result)) => answer::from_result(result),
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

impl Upstream for Link {
    fn call(&self, tool: &str, arguments: Map<String, Value>, timeout: Duration) -> Answering<'_> {
        let tool = tool.to_string();
        Box::pin(async move { self.answer(&tool, arguments, timeout).await })
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

/// Starts `server`'s command and initializes an MCP session with it.
async fn connect(server: &McpServer, secrets: &Secrets) -> Result<Connection, String> {
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
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("toolcage", env!("CARGO_PKG_VERSION")),
    );
    let started = tokio::time::timeout(server.startup(), client.serve((stdout, stdin))).await;
    match started {
        Ok(Ok(service)) => Ok(Connection {
            service,
            _child: child,
        }),
        Ok(Err(e)) => Err(format!("the MCP server `{name}` did not initialize: {e}")),
        Err(_) => Err(format!(
            "the MCP server `{name}` did not initialize within {}",
            human_duration(server.startup())
        )),
    }
}

/// The command that starts `server`: an empty environment but for the
/// variables it names, its streams piped, killed with its connection.
fn command(server: &McpServer, secrets: &Secrets) -> Result<Command, String> {
    let program = which(server.command()).ok_or_else(|| {
        format!(
            "the MCP server `{}`'s command `{}` is not on PATH",
            server.name(),
            server.command()
        )
    })?;
    let mut command = Command::new(program);
    command
        .args(server.arguments())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = server.directory() {
        command.current_dir(dir);
    }
    let current = secrets.current();
    for (name, value) in server.environment() {
        let value = match value {
            EnvValue::Text(text) => text.as_str(),
            EnvValue::Secret(secret) => current.get(secret).map(|s| s.value()).ok_or_else(|| {
                format!(
                    "the MCP server `{}`'s variable {name} names the secret `{secret}`, which is not set",
                    server.name()
                )
            })?,
        };
        command.env(name, value);
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
