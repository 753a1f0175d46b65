//! MCP over Streamable HTTP, at `/mcp`, with `/healthz` for load balancers.
//!
//! Threat model: anything that can open a connection can send requests.
//! - A bearer token, when the operator sets any, is required for every
//!   method on `/mcp` (401 otherwise), compared in constant time. Each
//!   token's tasks are its own ([`super::tasks`]).
//! - A browser page from another origin must not drive the server (DNS
//!   rebinding): a request whose `Origin` is not the server's own address is
//!   refused with 403; requests without `Origin` (non-browser clients) pass.
//!   The `Host` header must name the server (loopback names, the address it
//!   is bound to, or a name the operator allows, such as the one a load
//!   balancer or a Kubernetes Service forwards).
//!   The head is read as HTTP defines it (`edge.rs`): one `Host` (400
//!   otherwise, or for userinfo in it), the target's authority when the
//!   target is absolute, one `Origin` (403 otherwise).
//! - The bearer scheme is read as RFC 9110 defines it: any case, one or
//!   more spaces or tabs before the token.
//! - A session is its opener's token's: another token naming it gets 404
//!   ([`sessions`]), and each token holds a bounded number of them.
//! - Request bodies are capped (413 past the cap); the server keeps serving.
//! - What a connection holds is bounded ([`limits`]): the connections open,
//!   and those that have shown no token, the size of a request's head and
//!   the time it takes, idle connections, and the wait for a body.
//! - A refusal never resets the connection under a client still sending
//!   its body, which a proxy would report as its upstream failing
//!   ([`unread_body`]: the body is discarded behind the answer, within bounds).
//! - Stateless mode keeps no session between requests, so replicas behind a
//!   load balancer need no sticky sessions. A plain `tools/call` is then
//!   answered without rmcp's per-request service (`direct.rs`), after the
//!   same checks.
//! - A shutdown loses no request sent on a connection already open
//!   ([`drain`]).
//! - `/metrics` (when the operator turns it on) names the tools and how
//!   they fare, so it is behind the same token as `/mcp`; on a listener of
//!   its own ([`serve_metrics`]) it is as open as the operator binds it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use futures::StreamExt;

use super::cores::Cores;
use super::handler::Handler;
use super::tasks::Owner;
use super::{InFlight, Listener, McpServer, ServeError, Shutdown};
#[cfg(feature = "otel")]
use crate::telemetry::Telemetry;

mod direct;
pub mod drain;
mod edge;
pub mod limits;
pub mod sessions;
pub mod unread_body;

pub use drain::{IDLE_GRACE, STRAGGLER_GRACE};
pub use limits::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_UNPROVEN_CONNECTIONS,
};
pub use sessions::{DEFAULT_MAX_SESSIONS_PER_TOKEN, DEFAULT_SESSION_IDLE};
pub use unread_body::{DISCARD_MAX_BYTES, DISCARD_MAX_TIME};

/// How long, once no call is running, the last results have to be sent
/// before the streams are closed at shutdown.
const RESULTS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The default cap on a request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

/// How the HTTP transport runs. By default: no token (anyone who can
/// connect is served: bind to loopback), sessions kept (`stateless` off),
/// bodies up to [`DEFAULT_MAX_BODY_BYTES`], and each limit of
/// [`limits`] and [`sessions`] at its `DEFAULT_`.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    tokens: Vec<String>,
    stateless: bool,
    max_body_bytes: usize,
    allowed_hosts: Vec<String>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    body_read_timeout: Duration,
    max_header_bytes: usize,
    max_connections: usize,
    max_unproven_connections: usize,
    max_sessions_per_token: usize,
    session_idle: Duration,
    #[cfg(feature = "otel")]
    metrics: Option<Telemetry>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            tokens: Vec::new(),
            stateless: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            allowed_hosts: Vec::new(),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_unproven_connections: DEFAULT_MAX_UNPROVEN_CONNECTIONS,
            max_sessions_per_token: DEFAULT_MAX_SESSIONS_PER_TOKEN,
            session_idle: DEFAULT_SESSION_IDLE,
            #[cfg(feature = "otel")]
            metrics: None,
        }
    }
}

/// Why [`HttpOptions`] cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpOptionsError {
    /// A cap or a timeout of zero would refuse every client.
    #[error("{0} must be greater than 0")]
    Zero(&'static str),
    /// Heads shorter than this cannot carry the headers MCP clients send.
    #[error("max_header_bytes must be at least {MIN_HEADER_BYTES}")]
    HeaderTooSmall,
}

/// The least [`HttpOptions::max_header_bytes`]: 1 KiB.
pub const MIN_HEADER_BYTES: usize = 1 << 10;

impl HttpOptions {
    /// Requires `Authorization: Bearer <token>` on every request to `/mcp`.
    /// Repeatable: any of the tokens is accepted (one per client, or an
    /// old and a new one while rotating), and the tasks made with one are
    /// invisible to the others. Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.tokens.push(token.into());
        self
    }

    /// Serves every request on its own, keeping no session: any replica can
    /// serve any request. Default: false (sessions, for the revisions before
    /// 2026-07-28, which has no sessions at all).
    pub fn stateless(mut self, stateless: bool) -> Self {
        self.stateless = stateless;
        self
    }

    /// The largest request body accepted. Default: [`DEFAULT_MAX_BODY_BYTES`].
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Serves `telemetry`'s metrics in Prometheus' text format at
    /// `GET /metrics`, behind the same token as `/mcp` (it needs a
    /// [`PrometheusReader`](crate::telemetry::PrometheusReader)). Default:
    /// no `/metrics`.
    #[cfg(feature = "otel")]
    pub fn metrics(mut self, telemetry: Telemetry) -> Self {
        self.metrics = Some(telemetry);
        self
    }

    /// Also serves requests whose `Host` header is `host` (`name`, any port,
    /// or `name:port`): the name clients reach the server by, through a
    /// Kubernetes Service or a load balancer that keeps the client's `Host`.
    /// Repeatable. Default: only loopback names and the bound address.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// How long a request's head (request line and headers) may take to
    /// arrive, from its first byte; also how long a new connection may
    /// stay open without sending anything. Default:
    /// [`DEFAULT_HEADER_READ_TIMEOUT`].
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a connection may stay open with no request in progress,
    /// after its first request. Default: [`DEFAULT_IDLE_TIMEOUT`], longer
    /// than the 60 s nginx keeps its upstream connections, so that a proxy
    /// closes them first.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How long a request body may take to arrive whole, from the server's
    /// first read of it (its `100 Continue`, if it asked for one): 408 past
    /// it. Default: [`DEFAULT_BODY_READ_TIMEOUT`].
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// The largest request head (request line and headers): 431 past it.
    /// At least [`MIN_HEADER_BYTES`]. Default: [`DEFAULT_MAX_HEADER_BYTES`].
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes;
        self
    }

    /// The most connections open at once; more are closed as they come.
    /// Default: [`DEFAULT_MAX_CONNECTIONS`].
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// The most connections open at once that have not yet sent a request
    /// to `/mcp` with a valid token (any request, without tokens); more are
    /// closed as they come. Default: [`DEFAULT_MAX_UNPROVEN_CONNECTIONS`].
    pub fn max_unproven_connections(mut self, connections: usize) -> Self {
        self.max_unproven_connections = connections;
        self
    }

    /// The most sessions one token may hold open at once (all clients
    /// together, without tokens). A new session past it takes the place of
    /// the token's session idle longest; when every one is in use (a
    /// request, an answer or an event stream in progress), its `initialize`
    /// is answered 429. Default: [`DEFAULT_MAX_SESSIONS_PER_TOKEN`].
    pub fn max_sessions_per_token(mut self, sessions: usize) -> Self {
        self.max_sessions_per_token = sessions;
        self
    }

    /// How long a session may go unused before it is closed (a client
    /// that exits without ending its session leaves it to this).
    /// Default: [`DEFAULT_SESSION_IDLE`].
    pub fn session_idle(mut self, idle: Duration) -> Self {
        self.session_idle = idle;
        self
    }

    /// Whether these options can be served: every cap and timeout above 0,
    /// heads of at least [`MIN_HEADER_BYTES`].
    pub fn check(&self) -> Result<(), HttpOptionsError> {
        let zero = [
            ("header_read_timeout", self.header_read_timeout.is_zero()),
            ("idle_timeout", self.idle_timeout.is_zero()),
            ("body_read_timeout", self.body_read_timeout.is_zero()),
            ("max_connections", self.max_connections == 0),
            (
                "max_unproven_connections",
                self.max_unproven_connections == 0,
            ),
            ("max_sessions_per_token", self.max_sessions_per_token == 0),
            ("session_idle", self.session_idle.is_zero()),
        ];
        if let Some((name, _)) = zero.into_iter().find(|(_, zero)| *zero) {
            return Err(HttpOptionsError::Zero(name));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(HttpOptionsError::HeaderTooSmall);
        }
        Ok(())
    }

    fn connection_limits(&self) -> limits::ConnectionLimits {
        limits::ConnectionLimits {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_header_bytes: self.max_header_bytes,
            max_connections: self.max_connections,
            max_unproven: self.max_unproven_connections,
        }
    }
}

impl McpServer {
    /// The HTTP application for a server reached at `addr`: `/mcp` and
    /// `/healthz`, for [`crate::integration::axum::router`]. `shutdown`
    /// ends its sessions and streams when cancelled.
    pub(crate) fn router(
        &self,
        addr: SocketAddr,
        options: &HttpOptions,
        shutdown: CancellationToken,
    ) -> Router {
        self.router_counting(addr, options, shutdown, InFlight::default())
    }

    /// [`Self::router`], counting in `posts` the POSTs whose responses are
    /// still being sent.
    fn router_counting(
        &self,
        addr: SocketAddr,
        options: &HttpOptions,
        shutdown: CancellationToken,
        posts: InFlight,
    ) -> Router {
        let port = addr.port();
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        hosts.push(addr.ip().to_string());
        let origins: Vec<String> = hosts
            .iter()
            .map(|host| match host.contains(':') {
                true => format!("http://[{host}]:{port}"),
                false => format!("http://{host}:{port}"),
            })
            .collect();
        // Allowed names are for non-browser clients (which send no
        // `Origin`): browser pages keep to the server's own origins.
        hosts.extend(options.allowed_hosts.iter().cloned());
        let direct = direct::Direct::new(
            self,
            hosts.clone(),
            options.max_body_bytes,
            shutdown.clone(),
        );
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .with_legacy_session_mode(!options.stateless)
            // Without sessions, a call that sends no notification is
            // answered as plain JSON rather than an event stream.
            .with_json_response(options.stateless)
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(shutdown);
        let server = self.clone();
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(options.session_idle);
        let manager = Arc::new(manager);
        let service = StreamableHttpService::new(
            move || Ok(Handler::from(server.for_connection())),
            manager.clone(),
            config,
        );
        let tokens: Arc<Vec<String>> = Arc::new(options.tokens.clone());
        #[allow(unused_mut)]
        // axum clones a route's service for every request, and rmcp's
        // service holds its configuration by value: share one instead.
        let service = Arc::new(service);
        let mut mcp = Router::new().route(
            "/mcp",
            axum::routing::any(move |request: Request| {
                let service = service.clone();
                async move { service.handle(request).await }
            }),
        );
        // On `/mcp` only, not on the fallback of unknown paths; the answer
        // to a body that is no JSON text is nearest to rmcp, after the
        // sessions' checks.
        mcp = mcp.route_layer(axum::middleware::from_fn_with_state(
            direct.clone(),
            direct::answer_unreadable,
        ));
        mcp = match options.stateless {
            true => mcp.route_layer(axum::middleware::from_fn_with_state(
                direct,
                direct::answer_calls,
            )),
            false => mcp.route_layer(axum::middleware::from_fn_with_state(
                sessions::SessionOwners::new(manager, options.max_sessions_per_token),
                sessions::bind_sessions,
            )),
        };
        mcp = mcp.layer(axum::middleware::from_fn_with_state(posts, count_posts));
        #[cfg(feature = "otel")]
        if let Some(telemetry) = &options.metrics {
            mcp = mcp.merge(metrics_router(telemetry.clone()));
        }
        let mcp = mcp.layer(axum::middleware::from_fn_with_state(tokens, require_token));
        Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .merge(mcp)
            .layer(axum::middleware::from_fn(edge::check_head))
            .layer(axum::middleware::from_fn(unread_body::discard_unread_body))
            .layer(axum::middleware::from_fn_with_state(
                options.body_read_timeout,
                edge::bound_body,
            ))
    }

    /// Serves `/mcp` and `/healthz` on `listener` until `shutdown` is
    /// triggered, then stops taking connections, serves what arrives on
    /// those already open for [`IDLE_GRACE`] (with `Connection: close`),
    /// lets calls in flight finish and their results go out, and returns.
    /// The limits on connections ([`limits`]: their number, head size and
    /// time, idle time) are kept here, as it takes the connections; the
    /// rest (the body timeout, the session cap) by the application itself.
    pub async fn serve_http(
        &self,
        listener: Listener,
        options: &HttpOptions,
        shutdown: Shutdown,
    ) -> Result<(), ServeError> {
        options.check()?;
        let listener = listener.into_tokio();
        let addr = listener.local_addr()?;
        // The sessions and event streams (which would keep connections
        // open for ever) end once the calls in flight have answered.
        let streams = CancellationToken::new();
        let posts = InFlight::default();
        let app = self.router_counting(addr, options, streams.clone(), posts.clone());
        let finish = async {
            loop {
                self.in_flight.idle().await;
                // A call's POST response ends with its result; give those a
                // moment to be sent. (A 2026-07-28 `subscriptions/listen`
                // POST never ends on its own: cancelling the streams ends
                // it.) A call that began meanwhile is waited for too.
                let sent = tokio::time::timeout(RESULTS_GRACE, posts.idle()).await;
                if sent.is_ok() || self.in_flight.is_idle() {
                    break;
                }
            }
            streams.cancel();
        };
        let cores = Cores::per_core("toolcage-http")?;
        let gate = limits::Gate::new(options.connection_limits());
        drain::serve_until(listener, app, &gate, &cores, shutdown.token(), finish).await;
        super::report_left_behind(&self.tools);
        Ok(())
    }
}

/// `GET /metrics`: `telemetry`'s metrics in Prometheus' text format.
#[cfg(feature = "otel")]
fn metrics_router(telemetry: Telemetry) -> Router {
    Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let telemetry = telemetry.clone();
            async move {
                let text = telemetry.prometheus_text().unwrap_or_default();
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    )
}

/// Serves `telemetry`'s metrics at `GET /metrics` on `listener`, and
/// nothing else, without a token (an address only the operator's scraper
/// reaches), until `shutdown` is triggered.
#[cfg(feature = "otel")]
pub async fn serve_metrics(
    listener: Listener,
    telemetry: Telemetry,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    axum::serve(listener.into_tokio(), metrics_router(telemetry))
        .with_graceful_shutdown(shutdown.token().cancelled_owned())
        .await?;
    Ok(())
}

/// Counts a POST until its response body has been sent (or dropped): the
/// response of a call streams its notifications and ends with its result.
async fn count_posts(State(posts): State<InFlight>, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let running = posts.start();
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _running = &running;
        chunk
    });
    Response::from_parts(parts, axum::body::Body::from_stream(body))
}

/// Refuses a request to `/mcp` without one of the operator's bearer
/// tokens, and marks the request with the token's [`Owner`] (whose tasks
/// it may see), and its connection as proven ([`limits`]).
async fn require_token(
    State(tokens): State<Arc<Vec<String>>>,
    mut request: Request,
    next: Next,
) -> Response {
    if !tokens.is_empty() {
        let mut values = request.headers().get_all(header::AUTHORIZATION).iter();
        let presented = match (values.next(), values.next()) {
            (Some(value), None) => bearer_token(value.as_bytes()).unwrap_or(b""),
            // None, or more than one: no token.
            _ => b"",
        };
        // Every token is compared, so timing tells nothing of which.
        let matched = tokens.iter().fold(false, |matched, token| {
            constant_time_eq(presented, token.as_bytes()) | matched
        });
        if !matched {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required\n",
            )
                .into_response();
        }
        let owner = Owner(*blake3::hash(presented).as_bytes());
        request.extensions_mut().insert(owner);
    }
    if let Some(watch) = request.extensions().get::<Arc<limits::Watch>>() {
        watch.prove();
    }
    next.run(request).await
}

/// The token of `Authorization: Bearer <token>`, read as RFC 9110 §11.4
/// and RFC 6750 §2.1 define it: the scheme in any case, then one or more
/// spaces or tabs, then the token (trailing whitespace is not part of it).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let blank = |byte: &u8| *byte == b' ' || *byte == b'\t';
    let split = value.iter().position(blank)?;
    let (scheme, rest) = value.split_at(split);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|byte| !blank(byte))?;
    let end = rest.iter().rposition(|byte| !blank(byte))?;
    Some(&rest[start..=end])
}

/// Compares without an early exit, so timing does not tell how much of a
/// guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut differ = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        differ |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::{HttpOptions, HttpOptionsError, bearer_token, constant_time_eq};

    #[test]
    fn bearer_scheme_as_rfc_9110_reads_it() {
        let token = |value: &str| bearer_token(value.as_bytes()).map(|t| t.to_vec());
        let secret = Some(b"s3cret".to_vec());
        assert_eq!(token("Bearer s3cret"), secret);
        assert_eq!(token("bearer s3cret"), secret);
        assert_eq!(token("BEARER s3cret"), secret);
        assert_eq!(token("Bearer  s3cret"), secret);
        assert_eq!(token("Bearer \t s3cret "), secret);
        assert_eq!(token("Bearer"), None);
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearers3cret"), None);
        assert_eq!(token("Basic s3cret"), None);
        assert_eq!(token(" Bearer s3cret"), None);
    }

    #[test]
    fn options_with_a_zero_limit_are_refused() {
        assert_eq!(HttpOptions::default().check(), Ok(()));
        assert_eq!(
            HttpOptions::default().max_connections(0).check(),
            Err(HttpOptionsError::Zero("max_connections"))
        );
        assert_eq!(
            HttpOptions::default()
                .idle_timeout(std::time::Duration::ZERO)
                .check(),
            Err(HttpOptionsError::Zero("idle_timeout"))
        );
        assert_eq!(
            HttpOptions::default()
                .session_idle(std::time::Duration::ZERO)
                .check(),
            Err(HttpOptionsError::Zero("session_idle"))
        );
        assert_eq!(
            HttpOptions::default().max_header_bytes(100).check(),
            Err(HttpOptionsError::HeaderTooSmall)
        );
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret-and-more", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }
}
