//! Answers too large to read: an upstream message past the connection's
//! bound is dropped unread and turned into a JSON-RPC error for the call
//! it answered, so that the call ends as `output_limit` and the server,
//! which answered honestly if too much, is neither marked dead nor paused.
//!
//! Threat model: the server may answer a call with any number of bytes.
//! toolcage holds at most [`bound`] bytes of one message (over stdio, a
//! line; over HTTP, a JSON body or an SSE event), and reads the rest of a
//! longer one only to skip it, with a scan that keeps a few bytes: whether
//! the message is a response (no `method` key at its top level), and its
//! `id`. A response's id gets [`CODE`] in its place; anything else that
//! long (a notification, a request of the server's) is dropped, as rmcp
//! drops it. A server that sends [`CODE`] itself only makes its own call
//! end as `output_limit`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;
use sse_stream::Sse;
use tokio::io::{AsyncRead, ReadBuf};

/// The JSON-RPC error code of an answer dropped for its size (one of the
/// codes JSON-RPC leaves to implementations).
pub(super) const CODE: ErrorCode = ErrorCode(-32_090);

/// The least bound of a message: tool lists and honest answers near the
/// output limit pass whole, to be measured against the limit itself.
const FLOOR: usize = 16 << 20;

/// The most bytes of one message read from a server whose calls may
/// return `output_bytes`: room for JSON's escapes (six bytes for one) and
/// the envelope, and never less than [`FLOOR`].
pub(super) fn bound(output_bytes: usize) -> usize {
    output_bytes
        .saturating_mul(6)
        .saturating_add(64 << 10)
        .max(FLOOR)
}

/// The error that answers request `id` in place of a message over `bound`.
pub(super) fn error(id: RequestId, bound: usize) -> ServerJsonRpcMessage {
    let message = format!("the answer was longer than {bound} bytes, and was dropped unread");
    ServerJsonRpcMessage::error(ErrorData::new(CODE, message, None), Some(id))
}

/// An HTTP client whose responses past the transport's limits (set to a
/// [`bound`]) answer their request with [`error`] rather than failing the
/// request's send, which rmcp reports as a transport gone.
#[derive(Clone)]
pub(super) struct Bounded(pub reqwest::Client);

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type Events = BoxStream<'static, Result<Sse, SseError>>;

impl StreamableHttpClient for Bounded {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let limits = StreamableHttpResponseLimits::default();
        let (session, auth, headers) = (session_id, auth_header, custom_headers);
        self.post_message_with_response_limits(uri, message, session, auth, headers, limits)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        let id = match &message {
            JsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let (session, auth, headers) = (session_id, auth_header, custom_headers);
        let posted = self
            .0
            .post_message_with_response_limits(uri, message, session, auth, headers, limits)
            .await;
        let Some(id) = id else { return posted };
        match posted {
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                Ok(StreamableHttpPostResponse::Json(error(id, max_size), None))
            }
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let bound = limits.max_sse_event_size;
                let events = answered_when_too_large(events, id, bound);
                Ok(StreamableHttpPostResponse::Sse(events, session))
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        let (auth, headers) = (auth_header, custom_headers);
        self.0.delete_session(uri, session_id, auth, headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<reqwest::Error>> {
        let (last, auth, headers) = (last_event_id, auth_header, custom_headers);
        self.0
            .get_stream(uri, session_id, last, auth, headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<reqwest::Error>> {
        let (last, auth, headers) = (last_event_id, auth_header, custom_headers);
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last,
                auth,
                headers,
                max_sse_event_size,
            )
            .await
    }
}

/// `events`, a request's stream, with an event too large turned into
/// [`error`] for `id`: rmcp's limit fails the stream with it, which then
/// ends. rmcp's error type for it is private, so it is told by its text
/// (`upstream::http`'s SSE test fails if that ever changes).
fn answered_when_too_large(events: Events, id: RequestId, bound: usize) -> Events {
    events
        .map(move |event| match event {
            Err(SseError::Body(e)) if e.to_string().contains("exceeded the maximum size") => {
                Ok(Sse {
                    event: None,
                    data: serde_json::to_string(&error(id.clone(), bound)).ok(),
                    id: None,
                    retry: None,
                })
            }
            other => other,
        })
        .boxed()
}

/// A server's stdout, whose lines longer than `bound` bytes (its newline
/// not counted) are each followed by the error line of the response they
/// were. rmcp's reader, bounded at `bound + 1` (it counts the newline),
/// drops the long line itself; nothing here holds more than one read.
pub(super) struct Lines<R> {
    inner: R,
    bound: usize,
    /// The current line's length, and its scan (every line is scanned: its
    /// `id` may come before it is known to be too long).
    length: usize,
    scan: Scan,
    /// Bytes read and not yet handed on (the read, then an error line).
    pending: Vec<u8>,
    handed: usize,
}

impl<R> Lines<R> {
    pub(super) fn new(inner: R, bound: usize) -> Self {
        Lines {
            inner,
            bound,
            length: 0,
            scan: Scan::default(),
            pending: Vec::new(),
            handed: 0,
        }
    }

    /// Looks at `read`, queuing it and, after each long line, its error.
    fn take(&mut self, read: &[u8]) {
        let mut start = 0;
        for (at, &byte) in read.iter().enumerate() {
            if byte != b'\n' {
                self.length += 1;
                self.scan.byte(byte);
                continue;
            }
            let long = self.length > self.bound;
            let scan = std::mem::take(&mut self.scan);
            self.length = 0;
            if !long {
                continue;
            }
            self.pending.extend_from_slice(&read[start..=at]);
            start = at + 1;
            if let Some(id) = scan.response_id() {
                let line = serde_json::to_vec(&error(id, self.bound)).expect("an error serialises");
                self.pending.extend_from_slice(&line);
                self.pending.push(b'\n');
            }
        }
        self.pending.extend_from_slice(&read[start..]);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Lines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.handed == this.pending.len() {
            this.pending.clear();
            this.handed = 0;
            let mut chunk = [0u8; 8 << 10];
            let mut read = ReadBuf::new(&mut chunk);
            if let Err(e) = std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read)) {
                return Poll::Ready(Err(e));
            }
            this.take(read.filled());
        }
        let left = &this.pending[this.handed..];
        let n = left.len().min(buf.remaining());
        buf.put_slice(&left[..n]);
        this.handed += n;
        Poll::Ready(Ok(()))
    }
}

/// What a scan of one JSON message keeps: its nesting, where it is in a
/// string, and of its top level only whether it has a `method` and the
/// text of its `id` (a short string or a number; a longer one is ignored).
#[derive(Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At the top level: reading a key, and the key's first bytes.
    key: Option<Vec<u8>>,
    last_key: Vec<u8>,
    /// The `id` value's bytes as they come, and once it ended.
    id: Option<Vec<u8>>,
    id_done: Option<Vec<u8>>,
    method: bool,
}

/// The most bytes of a key, or of an id, a scan keeps.
const KEPT: usize = 128;

impl Scan {
    fn byte(&mut self, byte: u8) {
        if let Some(id) = &mut self.id {
            let ends = !self.in_string && self.depth == 1 && matches!(byte, b',' | b'}');
            if ends {
                self.id_done = self.id.take();
            } else if id.len() < KEPT + 2 {
                id.push(byte);
            }
        }
        if self.in_string {
            self.string_byte(byte);
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expects_key() {
                    self.key = Some(Vec::new());
                }
            }
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if self.depth == 1 && self.id.is_none() && self.last_key == b"id" => {
                self.id = Some(Vec::new());
            }
            b',' if self.depth == 1 => self.last_key.clear(),
            _ => {}
        }
    }

    /// Whether a string at the top level now is a key (none read since
    /// the last comma or the opening brace).
    fn expects_key(&self) -> bool {
        self.last_key.is_empty() && self.id.is_none()
    }

    fn string_byte(&mut self, byte: u8) {
        if self.escaped {
            self.escaped = false;
        } else if byte == b'\\' {
            self.escaped = true;
        } else if byte == b'"' {
            self.in_string = false;
            if let Some(key) = self.key.take() {
                self.method |= key == b"method";
                self.last_key = if key.is_empty() { b"\"".to_vec() } else { key };
            }
            return;
        }
        if let Some(key) = &mut self.key
            && key.len() < KEPT
        {
            key.push(byte);
        }
    }

    /// The id of a response: a message with an id and no method.
    fn response_id(self) -> Option<RequestId> {
        if self.method {
            return None;
        }
        let text = self.id_done.or(self.id)?;
        match serde_json::from_slice::<Value>(&text).ok()? {
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            Value::String(s) => Some(RequestId::String(s.into())),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "oversize_tests.rs"]
mod tests;
