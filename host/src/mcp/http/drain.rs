//! Taking connections, and stopping without losing a request.
//!
//! A connection beyond the caps of [`super::limits`] is closed as soon as it
//! is taken; each one taken is served through `limits::Timed`, which keeps its
//! header and idle timeouts.
//!
//! Threat model: none beyond the router's; this is about not failing honest
//! clients at shutdown. A client that keeps connections open between
//! requests (nginx's `keepalive` to its upstreams, any HTTP/1.1 client) may
//! write a request onto an idle connection at the very moment the server
//! closes it. That request is lost, and a proxy does not send a POST again:
//! its client gets a 502. So, once the shutdown begins:
//! - no new connection is taken (a proxy tries another replica on a
//!   refused connection, safely, since that carried nothing); those the
//!   kernel had already taken are served;
//! - a request that arrives on a connection already open is still served,
//!   and its answer says `Connection: close`, so the client uses that
//!   connection no more;
//! - idle connections are closed only after [`IDLE_GRACE`], time enough
//!   for a busy client to send on each of them once more or to see the
//!   replica refuse a new connection and leave it out;
//! - calls in flight finish and their answers go out, then the event
//!   streams still open are ended;
//! - connections still open after that (a client slow to send a request
//!   or to read an answer) get [`STRAGGLER_GRACE`], then the server returns.
//!
//! Two races remain, as HTTP/1.1 allows no better from the server's side:
//! a connection that stayed idle through the whole grace is closed then,
//! and one whose answer began before the shutdown (an event stream) cannot
//! say `Connection: close` and is closed at its end. A client that writes
//! a request onto either just then loses it. Under load the first does not
//! arise (every connection is used, and closed, within the grace); to lose
//! nothing at all, take the replica out of the balancer before the signal
//! (Kubernetes' `preStop` pause, or `down` in nginx).

use std::pin::pin;
use std::time::Duration;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

use super::limits::{Accepted, Gate, Timed};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mcp::cores::Cores;

/// How long, once the shutdown begins, idle connections are kept open
/// (requests on them are served, with `Connection: close`): 1 s.
pub const IDLE_GRACE: Duration = Duration::from_secs(1);

/// How long, once the calls in flight are answered, connections still open
/// are waited for: 5 s.
pub const STRAGGLER_GRACE: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown` is cancelled, then closes as
/// the module docs say: `finish` runs once the idle connections are closed,
/// and returns once the calls in flight are answered and the streams ended.
pub(super) async fn serve_until(
    listener: TcpListener,
    app: Router,
    gate: &Arc<Gate>,
    cores: &Cores,
    shutdown: CancellationToken,
    finish: impl Future<Output = ()>,
) {
    let app = app.layer(axum::middleware::from_fn_with_state(
        shutdown.clone(),
        close_when_draining,
    ));
    let close_idle = CancellationToken::new();
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => match (gate.accept(), stream.into_std()) {
                (Some(accepted), Ok(stream)) => {
                    serve_on(cores, &connections, (stream, accepted), &app, &close_idle)
                }
                // Beyond a cap: closed at once, unread.
                (None, _) => tracing::debug!("a connection beyond the caps was closed"),
                (_, Err(error)) => tracing::warn!("cannot serve a connection: {error}"),
            },
            Err(error) => accept_failed(error, &shutdown).await,
        }
    }
    // The connections the kernel took before the shutdown are served too:
    // their clients may have sent requests on them already.
    for stream in queued(listener) {
        if let Some(accepted) = gate.accept() {
            serve_on(cores, &connections, (stream, accepted), &app, &close_idle);
        }
    }
    connections.close();
    tokio::select! {
        _ = connections.wait() => {}
        _ = tokio::time::sleep(IDLE_GRACE) => {}
    }
    close_idle.cancel();
    finish.await;
    if tokio::time::timeout(STRAGGLER_GRACE, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "stopping with connections still open after {STRAGGLER_GRACE:?}: their clients were slow to send or read"
        );
    }
}

/// Serves `stream` on the next of the `cores`, where it stays (and its
/// socket is registered) for its whole life.
fn serve_on(
    cores: &Cores,
    connections: &TaskTracker,
    (stream, accepted): (std::net::TcpStream, Accepted),
    app: &Router,
    close_idle: &CancellationToken,
) {
    let (app, close_idle) = (app.clone(), close_idle.clone());
    let serve = async move {
        match TcpStream::from_std(stream) {
            Ok(stream) => serve_connection(stream, accepted, app, close_idle).await,
            Err(error) => tracing::warn!("cannot serve a connection: {error}"),
        }
    };
    connections.spawn_on(serve, cores.next());
}

/// Takes the connections waiting in `listener`'s queue, then closes it: the
/// next ones are refused.
fn queued(listener: TcpListener) -> Vec<std::net::TcpStream> {
    let Ok(listener) = listener.into_std() else {
        return Vec::new();
    };
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
    let mut queued = Vec::new();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_ok() {
                    queued.push(stream);
                }
            }
            // One client gave up; the next may not have.
            Err(e) if matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted) => {}
            // `WouldBlock`: the queue is empty (or it cannot be read).
            Err(_) => return queued,
        }
    }
}

/// One connection, HTTP/1.1 with keep-alive, until the client closes it,
/// a limit closes it ([`super::limits`]), or `close_idle` asks it to close
/// once idle. Each request carries the connection's
/// [`Watch`](super::limits::Watch), which the token check marks proven.
async fn serve_connection(
    stream: TcpStream,
    accepted: Accepted,
    app: Router,
    close_idle: CancellationToken,
) {
    let watch = accepted.0.clone();
    let max_header_bytes = watch.limits().max_header_bytes;
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        use hyper::service::Service;
        let busy = watch.begin();
        request.extensions_mut().insert(watch.clone());
        let answer = app.call(request);
        async move {
            let response = answer.await?;
            // In progress until its body is all sent, or dropped.
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                    let _busy = &busy;
                    frame
                }))
            }))
        }
    });
    let io = TokioIo::new(Timed::new(stream, accepted.0.clone()));
    let connection = http1::Builder::new()
        .max_header_size(max_header_bytes)
        // `Timed` keeps the time, from a head's first byte.
        .header_read_timeout(None)
        .serve_connection(io, service);
    let mut connection = pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = close_idle.cancelled() => {}
    }
    // Closes it now if idle, else after the answer being sent.
    connection.as_mut().graceful_shutdown();
    if let Err(error) = connection.await {
        tracing::trace!("connection ended: {error}");
    }
}

/// Once the shutdown has begun, every answer closes its connection.
async fn close_when_draining(
    State(shutdown): State<CancellationToken>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if shutdown.is_cancelled() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// As hyper and axum do: a connection that failed before it was taken is
/// the client's business; anything else (no file descriptors left, most
/// likely) is logged, and taking connections pauses for a second.
async fn accept_failed(error: std::io::Error, shutdown: &CancellationToken) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!("cannot take a connection: {error}");
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
}
