//! A stateless `tools/call` answered directly: one parse, one call, one
//! write.
//!
//! rmcp serves each stateless POST by building a service for it: a service
//! loop, a handler task, a sink task and a channel between each, for a
//! request that is one call and one answer. This layer answers the common
//! case itself, with rmcp's types: a single `tools/call` request without
//! `_meta` (so without a progress token, a trace context or a per-request
//! protocol version) from a client of a revision before 2026-07-28. The
//! call goes through the same [`McpServer::call`](super::super::McpServer)
//! as every other; a log line the tool sends turns the answer into an
//! event stream, as rmcp does.
//!
//! Threat model: this path must not accept what rmcp would refuse. It takes
//! a request only when every check rmcp makes of it passes, by rmcp's own
//! rules (the `Host` header, no `Origin`, `Accept`, `Content-Type`, the
//! protocol version, a declared body length within the cap), and passes
//! anything else to rmcp unchanged, so every refusal is still rmcp's. The
//! bearer token is checked before this layer, and the call's client, which
//! declared no capabilities, can neither be asked to approve a call nor be
//! given a task.
//!
//! Where it answers otherwise than rmcp, on purpose:
//! - a body that cannot be read (the client went away, or sent less than
//!   its `Content-Length`) is the client's fault: 400, where rmcp answers
//!   500;
//! - a call on a connection still open once the shutdown has ended the
//!   event streams is run, and answered when its answer is plain JSON (the
//!   connection's answer says `Connection: close`, and the server waits for
//!   it within [`STRAGGLER_GRACE`](super::STRAGGLER_GRACE)), where rmcp's
//!   stateless service, its token cancelled, answers 500 (`empty
//!   response`) and drops the call, as it does every request it takes
//!   then. A call whose tool sends a notification first is answered as an
//!   event stream, which the shutdown has already ended: it is cancelled,
//!   as under rmcp.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::model::{
    CallToolRequest, CallToolResponse, ProtocolVersion, RequestId, RequestMetaObject,
    ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::super::parse::{call_request, unreadable_request};
use super::super::{CallContext, McpServer, Notify};
use rmcp::ErrorData as McpError;

/// How often an event stream that carries a call's notifications sends a
/// comment to keep proxies from closing it: rmcp's default.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// What the layer needs: the server, and rmcp's configuration of the checks.
pub(super) struct Direct {
    server: McpServer,
    allowed_hosts: Vec<AllowedHost>,
    max_body_bytes: usize,
    /// Ends the event streams, once the calls have answered.
    shutdown: CancellationToken,
}

impl Direct {
    /// Answers for `server` requests whose `Host` is one of
    /// `allowed_hosts` (as rmcp reads them) and whose body is at most
    /// `max_body_bytes`; `shutdown` ends its event streams.
    pub(super) fn new(
        server: &McpServer,
        allowed_hosts: Vec<String>,
        max_body_bytes: usize,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Direct {
            // Its log level is never set: stateless clients have none.
            server: server.for_connection(),
            allowed_hosts: allowed_hosts
                .iter()
                .filter_map(|entry| AllowedHost::parse(entry))
                .collect(),
            max_body_bytes,
            shutdown,
        })
    }
}

/// Answers a stateless `tools/call` POST directly (see the module's docs);
/// passes every other request on.
pub(super) async fn answer_calls(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(length) = takes(&direct, request.method(), request.headers()) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, length).await {
        Ok(bytes) => bytes,
        Err(e) => return unreadable_body(e),
    };
    let call = match call_request(&bytes) {
        Some((id, call)) if without_meta(&call) => (id, call.params),
        // Another method, `_meta`, a batch or bad JSON: rmcp's to answer.
        _ => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
    };
    let (id, params) = call;
    let (sender, notifications) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let context = CallContext {
        id: id.clone(),
        meta: Default::default(),
        ct: cancel.clone(),
        notify: Notify::Response(sender),
        http: Some(parts),
        session: None,
    };
    let shutdown = direct.shutdown.clone();
    let work = Finishing::new(
        async move {
            let response = direct.server.call(params, context).await;
            message(id, response)
        },
        cancel.clone(),
    );
    let mut messages = Box::pin(in_order(work, notifications));
    match messages.next().await {
        Some(answer @ (ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))) => {
            match serde_json::to_vec(&answer) {
                Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the answer could not be written: {e}"),
                )
                    .into_response(),
            }
        }
        // A notification came first: all of them, then the answer, as
        // events. The call goes on by itself, whether or not the client
        // reads; a client that goes away (its stream dropped) cancels it,
        // and a shutdown ends the stream once the calls have answered.
        first => {
            let (sender, mut received) = tokio::sync::mpsc::unbounded_channel();
            sender.send(first).ok();
            tokio::spawn(async move {
                while let Some(message) = messages.next().await {
                    sender.send(Some(message)).ok();
                }
            });
            let gone = cancel.drop_guard();
            let shutdown = shutdown.cancelled_owned();
            let events = futures::stream::poll_fn(move |cx| received.poll_recv(cx))
                .filter_map(std::future::ready)
                .take_until(shutdown)
                .map(move |message| {
                    let _gone = &gone;
                    let data = serde_json::to_string(&message).unwrap_or_default();
                    Ok::<_, Infallible>(Event::default().data(data))
                });
            let mut response = Sse::new(events)
                .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
                .into_response();
            response
                .headers_mut()
                .insert("x-accel-buffering", HeaderValue::from_static("no"));
            response
        }
    }
}

/// Answers a POST whose body is not JSON text (not UTF-8, or a lone
/// surrogate in a string) but names a request id with a JSON-RPC parse
/// error for that id, as over stdio (see [`unreadable_request`]); rmcp
/// would answer 415 with no message for the client to match to its call.
/// Only a request that passes rmcp's checks of its head (`Host`, no
/// `Origin`, `Content-Type`, a declared body within the cap) is read here;
/// anything else, and every readable body, goes on to rmcp unchanged.
pub(super) async fn answer_unreadable(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let checked = request.method() == Method::POST
        && !headers.contains_key(header::ORIGIN)
        && host_allowed(headers, &direct.allowed_hosts)
        && content_is_json(headers);
    let Some(length) = declared_length(headers).filter(|n| checked && *n <= direct.max_body_bytes)
    else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, length).await {
        Ok(bytes) => bytes,
        Err(e) => return unreadable_body(e),
    };
    match unreadable_request(&bytes).map(|answer| serde_json::to_vec(&answer)) {
        Some(Ok(body)) => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        _ => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// The answer to a body that could not be read: the client went away, or
/// sent less than its `Content-Length`.
fn unreadable_body(e: axum::Error) -> Response {
    (
        StatusCode::BAD_REQUEST,
        format!("Bad Request: the request body could not be read ({e})"),
    )
        .into_response()
}

/// The body's length, as `Content-Length` declares it.
fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A call that, dropped before its end (its client went away before the
/// answer), is cancelled and finished on a task of its own, as rmcp's
/// are: the guest stops within milliseconds, and what ends a call (its
/// sandbox's release, the count of calls running, its telemetry) still
/// happens.
struct Finishing {
    work: Option<Pin<Box<dyn Future<Output = ServerJsonRpcMessage> + Send>>>,
    cancel: CancellationToken,
}

impl Finishing {
    fn new(
        work: impl Future<Output = ServerJsonRpcMessage> + Send + 'static,
        cancel: CancellationToken,
    ) -> Self {
        Finishing {
            work: Some(Box::pin(work)),
            cancel,
        }
    }
}

impl Future for Finishing {
    type Output = ServerJsonRpcMessage;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Pending;
        };
        let answer = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(answer)
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            self.cancel.cancel();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(work);
            }
        }
    }
}

/// The call has no `_meta` (rmcp keeps it in the extensions), or an empty
/// one.
fn without_meta(call: &CallToolRequest) -> bool {
    call.extensions
        .get::<RequestMetaObject>()
        .is_none_or(|meta| meta.is_empty())
        && call.params.meta.as_ref().is_none_or(|meta| meta.is_empty())
}

/// The JSON-RPC message answering request `id` with `response`, as rmcp
/// writes it for a client of a revision before 2026-07-28.
fn message(id: RequestId, response: Result<CallToolResponse, McpError>) -> ServerJsonRpcMessage {
    let result = response.and_then(|response| match response {
        CallToolResponse::InputRequired(_) => Err(McpError::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        )),
        response => {
            let mut result = ServerResult::from(response);
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            Ok(result)
        }
    });
    match result {
        Ok(result) => ServerJsonRpcMessage::response(result, id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    }
}

/// The call's notifications as it sends them, then its answer.
fn in_order(
    work: Finishing,
    notifications: UnboundedReceiver<ServerNotification>,
) -> impl Stream<Item = ServerJsonRpcMessage> + Send + 'static {
    struct Progress {
        work: Option<Finishing>,
        answer: Option<ServerJsonRpcMessage>,
        notifications: UnboundedReceiver<ServerNotification>,
    }
    let progress = Progress {
        work: Some(work),
        answer: None,
        notifications,
    };
    futures::stream::unfold(progress, |mut progress| async move {
        if let Some(work) = progress.work.as_mut() {
            tokio::select! {
                biased;
                Some(notification) = progress.notifications.recv() => {
                    return Some((ServerJsonRpcMessage::notification(notification), progress));
                }
                answer = work => {
                    progress.work = None;
                    progress.answer = Some(answer);
                }
            }
        }
        // The call is over: what it sent before its answer goes first.
        if let Ok(notification) = progress.notifications.try_recv() {
            return Some((ServerJsonRpcMessage::notification(notification), progress));
        }
        let answer = progress.answer.take()?;
        Some((answer, progress))
    })
}

/// The declared body length, when the layer takes this request: a POST
/// that passes each check rmcp would make of its head.
fn takes(direct: &Direct, method: &Method, headers: &HeaderMap) -> Option<usize> {
    if method != Method::POST || headers.contains_key(header::ORIGIN) {
        return None;
    }
    if !host_allowed(headers, &direct.allowed_hosts)
        || !accepts_json_and_events(headers)
        || !content_is_json(headers)
        || !version_served_by_headers(headers)
    {
        return None;
    }
    declared_length(headers).filter(|length| *length <= direct.max_body_bytes)
}

/// rmcp's rule: the `Host` header's name (bracketless, any case) is an
/// allowed one, and so is its port if the allowed entry names one.
fn host_allowed(headers: &HeaderMap, allowed_hosts: &[AllowedHost]) -> bool {
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<http::uri::Authority>().ok())
    else {
        return false;
    };
    let name = host.host().trim_matches(['[', ']']);
    allowed_hosts.iter().any(|allowed| {
        allowed.name.eq_ignore_ascii_case(name)
            && allowed
                .port
                .is_none_or(|port| host.port_u16() == Some(port))
    })
}

/// An allowed `Host`, read once as rmcp reads each entry on each request.
struct AllowedHost {
    /// Bracketless, lowercase.
    name: String,
    /// `None`: any port.
    port: Option<u16>,
}

impl AllowedHost {
    /// `None` for an empty entry, which rmcp skips.
    fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        Some(match entry.parse::<http::uri::Authority>() {
            Ok(authority) => AllowedHost {
                name: normalized(authority.host()),
                port: authority.port_u16(),
            },
            Err(_) => AllowedHost {
                name: normalized(entry),
                port: None,
            },
        })
    }
}

fn normalized(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// `Accept` names both `application/json` and `text/event-stream`. A
/// header with weights or quotes is left to rmcp, which reads them.
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains(['"', ';']) {
            return false;
        }
        for media_type in value.split(',').map(str::trim) {
            json |= media_type.eq_ignore_ascii_case("application/json");
            events |= media_type.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// `Content-Type` is `application/json`, with or without parameters.
fn content_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// No `MCP-Protocol-Version` (rmcp then assumes 2025-03-26), or a known
/// version before 2026-07-28, whose requests carry no standard headers or
/// per-request metadata to check.
fn version_served_by_headers(headers: &HeaderMap) -> bool {
    let Some(version) = headers.get("mcp-protocol-version") else {
        return true;
    };
    let Ok(version) = version.to_str() else {
        return false;
    };
    ProtocolVersion::KNOWN_VERSIONS.iter().any(|known| {
        known.as_str() == version
            && *known < ProtocolVersion::STANDARD_HEADERS
            && *known < ProtocolVersion::V_2026_07_28
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn hosts_as_rmcp_reads_them() {
        let allowed: Vec<_> = ["localhost", "::1", "tools:8080", " "]
            .into_iter()
            .filter_map(AllowedHost::parse)
            .collect();
        let host = |value| host_allowed(&headers(&[("host", value)]), &allowed);
        assert!(host("localhost:3000"));
        assert!(host("LOCALHOST"));
        assert!(host("[::1]:3000"));
        assert!(host("tools:8080"));
        assert!(!host("tools:8081"));
        assert!(!host("tools"));
        assert!(!host("evil.example:3000"));
        assert!(!host("not a host"));
        assert!(!host_allowed(&HeaderMap::new(), &allowed));
    }

    #[test]
    fn accept_must_name_both_without_weights() {
        let accept = |value| accepts_json_and_events(&headers(&[("accept", value)]));
        assert!(accept("application/json, text/event-stream"));
        assert!(accept("TEXT/EVENT-STREAM,application/json"));
        assert!(!accept("application/json"));
        // A zero weight excludes a type: rmcp decides.
        assert!(!accept("application/json, text/event-stream;q=0"));
        assert!(!accepts_json_and_events(&HeaderMap::new()));
        let split = headers(&[
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ]);
        assert!(accepts_json_and_events(&split));
    }

    #[test]
    fn only_calls_without_meta() {
        let parse = |body: &str| match call_request(body.as_bytes()) {
            Some((_, call)) => Ok(without_meta(&call)),
            None => Err(()),
        };
        let plain = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}"#;
        assert!(parse(plain).unwrap());
        let empty =
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","_meta":{}}}"#;
        assert!(parse(empty).unwrap());
        let progress = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1}}}"#;
        assert!(!parse(progress).unwrap());
        let listing = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#;
        assert!(parse(listing).is_err());
        let notification = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#;
        assert!(parse(notification).is_err());
        let old = r#"{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"t"}}"#;
        assert!(parse(old).is_err());
        // rmcp refuses a request with a response's fields.
        let mixed =
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"},"result":{}}"#;
        assert!(parse(mixed).is_err());
    }

    #[test]
    fn content_type_and_versions() {
        assert!(content_is_json(&headers(&[(
            "content-type",
            "application/json; charset=utf-8"
        )])));
        assert!(!content_is_json(&headers(&[(
            "content-type",
            "text/plain"
        )])));
        assert!(!content_is_json(&HeaderMap::new()));
        let version =
            |value| version_served_by_headers(&headers(&[("mcp-protocol-version", value)]));
        assert!(version_served_by_headers(&HeaderMap::new()));
        assert!(version("2025-06-18"));
        assert!(version("2025-11-25"));
        // Standard headers and per-request metadata: rmcp checks them.
        assert!(!version("2026-07-28"));
        assert!(!version("1999-01-01"));
    }
}
