//! The request's head read as HTTP defines it, and its body bounded in time.
//!
//! Threat model: a client writes every byte of the head, and the checks
//! behind this layer (rmcp's `Host` and `Origin` checks, the direct path's)
//! read one value of each header. A head that says two things at once must
//! not let one of them pass the check while the other is what counts:
//! - more than one `Host` line, a `Host` with userinfo
//!   (`attacker.test@127.0.0.1`), or one that is no valid authority: 400,
//!   as RFC 9112 §3.2 requires;
//! - an absolute-form target (`POST http://attacker.test/mcp`): its
//!   authority is the request's host (RFC 9112 §3.2.2), so the `Host`
//!   header is replaced by it before any check reads it (userinfo in it:
//!   400);
//! - more than one `Origin` line: 403, whatever each says.
//!
//! A body that cannot be read (bad chunked encoding, a connection that
//! ended early) is the client's fault: 400 where the handler answered 500.
//! One that has not arrived whole within the body timeout
//! ([`super::limits::DEFAULT_BODY_READ_TIMEOUT`], from the first read of it,
//! so from the `100 Continue` of a request that expects one): 408, and the
//! connection is closed.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Refuses a head that says two things at once (see the module docs), and
/// makes the target's authority the `Host` of an absolute-form request.
pub(super) async fn check_head(mut request: Request, next: Next) -> Response {
    if let Err(refusal) = one_host(&mut request) {
        return refusal.into_response();
    }
    if request.headers().get_all(header::ORIGIN).iter().count() > 1 {
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: more than one Origin header\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// Why a head's host is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum HostError {
    #[error("more than one Host header")]
    Several,
    #[error("the Host header is no valid host[:port]")]
    Invalid,
    #[error("the host names a user (userinfo), which HTTP does not allow")]
    Userinfo,
}

impl IntoResponse for HostError {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("Bad Request: {self}\n")).into_response()
    }
}

/// One valid `Host`; an absolute-form target's authority replaces it.
fn one_host(request: &mut Request) -> Result<(), HostError> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(HostError::Several);
    }
    if let Some(host) = host {
        checked_authority(host.as_bytes())?;
    }
    if let Some(authority) = request.uri().authority() {
        checked_authority(authority.as_str().as_bytes())?;
        let value = HeaderValue::from_str(authority.as_str()).map_err(|_| HostError::Invalid)?;
        request.headers_mut().insert(header::HOST, value);
    }
    Ok(())
}

/// `host[:port]`, without userinfo.
fn checked_authority(value: &[u8]) -> Result<(), HostError> {
    if value.contains(&b'@') {
        return Err(HostError::Userinfo);
    }
    let authority = http::uri::Authority::try_from(value).map_err(|_| HostError::Invalid)?;
    if authority.host().is_empty() {
        return Err(HostError::Invalid);
    }
    Ok(())
}

/// How a body failed to arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum BodyError {
    #[error("the request body could not be read")]
    Unreadable,
    #[error("the request body did not arrive within the body timeout")]
    TimedOut,
}

/// Bounds the body's arrival in time, and answers a request whose body
/// failed as the client's error (see the module docs).
pub(super) async fn bound_body(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let failed = Arc::new(Mutex::new(None));
    let (parts, body) = request.into_parts();
    let body = Bounded {
        body,
        timeout,
        deadline: None,
        failed: failed.clone(),
    };
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    let failure = *failed.lock().unwrap_or_else(|e| e.into_inner());
    match failure {
        Some(error) if is_server_error_or_bad_request(response.status()) => {
            let status = match error {
                BodyError::Unreadable => StatusCode::BAD_REQUEST,
                BodyError::TimedOut => StatusCode::REQUEST_TIMEOUT,
            };
            let mut refusal = (status, format!("{error}\n")).into_response();
            refusal
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            refusal
        }
        _ => response,
    }
}

fn is_server_error_or_bad_request(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::BAD_REQUEST
}

/// A body that fails once its time is up, and says why it failed.
struct Bounded {
    body: Body,
    timeout: Duration,
    /// From the first read.
    deadline: Option<Pin<Box<Sleep>>>,
    failed: Arc<Mutex<Option<BodyError>>>,
}

impl Bounded {
    fn fail(&self, error: BodyError) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
        Poll::Ready(Some(Err(axum::Error::new(error))))
    }
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let timeout = self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + timeout)));
        if deadline.as_mut().poll(cx).is_ready() {
            return self.fail(BodyError::TimedOut);
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Err(_))) => self.fail(BodyError::Unreadable),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(target: &str, hosts: &[&str]) -> Request {
        let mut request = Request::builder().uri(target);
        for host in hosts {
            request = request.header(header::HOST, *host);
        }
        request.body(Body::empty()).unwrap()
    }

    #[test]
    fn one_valid_host_without_userinfo() {
        let host = |target, hosts: &[&str]| one_host(&mut request(target, hosts));
        assert_eq!(host("/mcp", &["127.0.0.1:8080"]), Ok(()));
        assert_eq!(host("/mcp", &["[::1]:8080"]), Ok(()));
        assert_eq!(host("/mcp", &[]), Ok(()));
        assert_eq!(
            host("/mcp", &["127.0.0.1:8080", "attacker.test"]),
            Err(HostError::Several)
        );
        assert_eq!(
            host("/mcp", &["attacker.test@127.0.0.1:8080"]),
            Err(HostError::Userinfo)
        );
        assert_eq!(host("/mcp", &["not a host"]), Err(HostError::Invalid));
        assert_eq!(host("/mcp", &[""]), Err(HostError::Invalid));
        assert_eq!(
            host("http://user@127.0.0.1/mcp", &["127.0.0.1"]),
            Err(HostError::Userinfo)
        );
    }

    #[test]
    fn an_absolute_target_names_the_host() {
        let mut absolute = request("http://attacker.test/mcp", &["127.0.0.1:8080"]);
        one_host(&mut absolute).unwrap();
        assert_eq!(absolute.headers()[header::HOST], "attacker.test");
        assert_eq!(absolute.uri().path(), "/mcp");
    }
}
