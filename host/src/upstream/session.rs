//! An MCP session with one upstream server: reaching it (over HTTP, or
//! its process's pipes), initializing the session, listing the server's
//! tools, and calling them.
//!
//! Threat model: the server may be slow, silent or gone. A session that
//! does not initialize, or a `tools/list` that does not answer, within the
//! server's start-up timeout ends the start, reported as such. A remote
//! server is reached only through the egress policy (`http`), its secret
//! headers rendered at each start (a secret not set refuses the start,
//! naming it). A stdio server's process is killed when its connection is
//! dropped, and its session ended when the connection is. A call dropped
//! before its answer (at its timeout, or cancelled) is cancelled upstream,
//! and forgotten, so that its events stop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult, Tool,
};
use rmcp::service::{
    ClientInitializeError, Peer, PeerRequestOptions, RoleClient, RunningService,
    RunningServiceCancellationToken, ServiceExt,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value};
use tokio::process::Child;
use tokio::sync::Notify;

use super::client::{Calls, UpstreamClient, Watcher};
use super::error::LinkError;
use super::oversize::{self, Bounded};
use super::server::UpstreamServer;
use super::{http, process};
use crate::sandbox::net::NetPolicy;
use crate::sandbox::secrets::Secrets;

/// A running session: its peer, and the child it talks to (killed when
/// the connection is dropped).
pub(super) struct Connection {
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
        service: RunningService<RoleClient, UpstreamClient>,
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

    /// Whether the session ended, from either side.
    pub(super) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// How long since the session began.
    pub(super) fn ran(&self) -> Duration {
        self.started.elapsed()
    }

    /// Ends the session: a stdio server sees its input end.
    pub(super) fn end(&self) {
        let mut cancel = self.cancel.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cancel) = cancel.take() {
            cancel.cancel();
        }
    }

    /// A stdio server's process, for the one who waits for it to exit.
    pub(super) fn take_child(&self) -> Option<Child> {
        let mut child = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        child.take()
    }

    /// What `server` lists, within its start-up timeout.
    pub(super) async fn list_tools(&self, server: &UpstreamServer) -> Result<Vec<Tool>, LinkError> {
        let name = server.name().to_string();
        match tokio::time::timeout(server.startup(), self.peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(source)) => Err(LinkError::ListTools {
                server: name,
                source: Box::new(source),
            }),
            Err(_) => Err(LinkError::ListToolsTimeout {
                server: name,
                after: server.startup(),
            }),
        }
    }

    /// Calls the server's tool `tool` with `arguments`. Until the answer
    /// comes, the call is in `calls`, its events going to `watcher`;
    /// dropped early (at the timeout, or cancelled), it is cancelled
    /// upstream.
    pub(super) async fn call(
        &self,
        calls: &Calls,
        tool: &str,
        arguments: Map<String, Value>,
        watcher: Option<Arc<Watcher>>,
    ) -> Result<ServerResult, rmcp::ServiceError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::no_options();
        // In before the request goes: the server may ask its question
        // before the send returns.
        let mut in_flight = InFlight {
            calls: calls.clone(),
            key: watcher.map(|watcher| calls.enter(watcher)),
            id: None,
            peer: self.peer.clone(),
        };
        let handle = self.peer.send_cancellable_request(request, options).await?;
        in_flight.id = Some(handle.id.clone());
        if let Some(key) = in_flight.key {
            calls.sent(key, handle.progress_token.clone());
        }
        let response = handle.await_response().await;
        in_flight.id = None;
        response
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.end();
    }
}

/// What a connection is made with: the server's secrets, the egress
/// policy, the calls in flight, whom to tell of a changed tool list and of
/// the session's end, and the most bytes of one message
/// ([`oversize::bound`]).
pub(super) struct Wiring<'a> {
    pub secrets: &'a Secrets,
    pub egress: Option<&'a Arc<NetPolicy>>,
    pub calls: &'a Calls,
    pub changed: &'a Arc<Notify>,
    pub died: &'a Arc<Notify>,
    pub bound: usize,
}

/// Reaches `server` (starting its command, or over HTTP through the
/// egress policy) and initializes an MCP session with it, wired as
/// `wiring` says.
pub(super) async fn connect(
    server: &UpstreamServer,
    wiring: Wiring<'_>,
) -> Result<Connection, LinkError> {
    let handler = UpstreamClient::new(server, wiring.calls.clone(), wiring.changed.clone());
    let died = wiring.died.clone();
    match server.url() {
        Some(url) => connect_http(server, url, &wiring, handler, died).await,
        None => {
            let spawned = process::spawn(server, wiring.secrets)?;
            let stdout = oversize::Lines::new(spawned.stdout, wiring.bound);
            let transport = AsyncRwTransport::new_client(stdout, spawned.stdin)
                .with_max_line_length(wiring.bound.saturating_add(1));
            let serving = handler.serve(transport);
            initialized(server, serving, Some(spawned.child), died).await
        }
    }
}

/// A remote server: every request through the egress policy, with its
/// headers (secrets rendered now).
async fn connect_http(
    server: &UpstreamServer,
    url: &str,
    wiring: &Wiring<'_>,
    handler: UpstreamClient,
    died: Arc<Notify>,
) -> Result<Connection, LinkError> {
    let name = server.name();
    let refused = |why: String| LinkError::Refused {
        server: name.to_string(),
        why,
    };
    let Some(egress) = wiring.egress else {
        return Err(LinkError::NoNetwork {
            server: name.to_string(),
        });
    };
    let client = http::client(url, egress).map_err(refused)?;
    http::preflight(url, egress).await.map_err(refused)?;
    let set = wiring.secrets.current();
    let mut headers = HashMap::new();
    for injection in server.headers() {
        let (header, value) = injection
            .render(&set)
            .map_err(|secret| LinkError::HeaderSecret {
                server: name.to_string(),
                header: injection.header().to_string(),
                secret,
            })?;
        headers.insert(header, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .custom_headers(headers)
        .max_json_response_size(wiring.bound)
        .max_sse_event_size(wiring.bound);
    let transport = StreamableHttpClientTransport::with_client(Bounded(client), config);
    initialized(server, handler.serve(transport), None, died).await
}

/// The session `serving` makes, within `server`'s start-up timeout, with
/// the process it talks to (if any); `died` is told when it ends.
async fn initialized(
    server: &UpstreamServer,
    serving: impl Future<
        Output = Result<RunningService<RoleClient, UpstreamClient>, ClientInitializeError>,
    >,
    child: Option<Child>,
    died: Arc<Notify>,
) -> Result<Connection, LinkError> {
    let name = server.name().to_string();
    match tokio::time::timeout(server.startup(), serving).await {
        Ok(Ok(service)) => Ok(Connection::watched(service, child, died)),
        Ok(Err(source)) => Err(LinkError::Initialize {
            server: name,
            source: Box::new(source),
        }),
        Err(_) => Err(LinkError::InitializeTimeout {
            server: name,
            after: server.startup(),
        }),
    }
}

/// A call in flight: forgotten when it ends, and cancelled upstream when
/// it ends without an answer.
struct InFlight {
    calls: Calls,
    /// Its key in `calls`, when it has a watcher.
    key: Option<u64>,
    /// Its request's id, once sent and until answered.
    id: Option<RequestId>,
    peer: Peer<RoleClient>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.calls.leave(key);
        }
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
