//! Refusing a request without resetting its connection.
//!
//! Threat model: anyone who can reach the server can send a request that is
//! refused before its body is read: no token (401), a foreign `Host` or
//! `Origin` (403), a body over the cap (413), another method (405), content
//! type (415) or path (404). Were the connection then closed with the body
//! unread, the kernel would reset it under a client still sending. nginx,
//! which writes a whole body before it reads the answer, would turn the
//! refusal into a 502 and count the replica as failed: a few requests
//! without a token would take every replica out of the pool. An honest
//! client with a body too large would see a network error, not a 413.
//!
//! So a refusal is answered at once, and the rest of its body is read and
//! thrown away behind it, up to [`DISCARD_MAX_BYTES`] within
//! [`DISCARD_MAX_TIME`]. When the body ends within those bounds, the
//! connection stays open for the next request. A client that sends more,
//! or trickles for longer, has its connection closed at the bound, so no
//! client can hold one open by trickling. The cost to the server is
//! bandwidth only: reading and dropping at most that much per refusal, one
//! refusal at a time per connection. A request that asked for
//! `Expect: 100-continue` and was refused before its body was asked for has
//! sent no body: its connection is closed after the refusal, without the
//! "100 Continue" that would invite the body. Once the body was asked for
//! (hyper then sent "100 Continue"), it is read and discarded like any other.
//!
//! A handler that keeps a body it did not read to the end beyond its answer
//! leaves it to hyper, which closes the connection; none here does.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::sync::oneshot;

/// The most of a refused request's body read and thrown away after the
/// refusal: 32 MiB.
pub const DISCARD_MAX_BYTES: u64 = 32 << 20;

/// How long a refused request's body is read and thrown away, from the
/// refusal: 5 s.
pub const DISCARD_MAX_TIME: Duration = Duration::from_secs(5);

/// Runs the request; if it was answered without its body being read to the
/// end, reads and discards the rest behind the answer (see the module docs).
pub(super) async fn discard_unread_body(request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (parts, body) = request.into_parts();
    let (back, mut returned) = oneshot::channel();
    let body = Returned {
        body,
        ended: false,
        polled: false,
        back: Some(back),
    };
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    // Dropped before its end: the request was answered without it.
    if let Ok((unread, polled)) = returned.try_recv()
        && (polled || !expects_continue)
    {
        tokio::spawn(discard(unread));
    }
    response
}

/// Reads and drops `body` within the bounds; dropping it before its end
/// makes hyper close the connection once the answer is written.
async fn discard(body: Body) {
    let deadline = tokio::time::Instant::now() + DISCARD_MAX_TIME;
    let mut body = body.into_data_stream();
    let mut read = 0u64;
    while read <= DISCARD_MAX_BYTES {
        use futures::StreamExt;
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => read += chunk.len() as u64,
            // The end, a broken connection, or the time is up.
            _ => return,
        }
    }
}

/// A request body that, dropped before its end, goes back to
/// [`discard_unread_body`] rather than to hyper.
struct Returned {
    body: Body,
    ended: bool,
    /// Whether it was read from at all (so hyper answered any
    /// `Expect: 100-continue`).
    polled: bool,
    back: Option<oneshot::Sender<(Body, bool)>>,
}

impl HttpBody for Returned {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.polled = true;
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            self.ended = true;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        if !self.is_end_stream()
            && let Some(back) = self.back.take()
        {
            let body = std::mem::take(&mut self.body);
            // Nobody waits any more (the answer went out long ago): the
            // body is dropped, as it would have been.
            back.send((body, self.polled)).ok();
        }
    }
}
