//! MCP's stdio transport: rmcp's framing, one JSON-RPC message a line, with
//! a `tools/call` read by [`super::parse`] instead of rmcp's union of every
//! client message.
//!
//! [`StdioTransport`] does what rmcp's own `AsyncRwTransport` does, and
//! through rmcp's code wherever it can: every line that is not a plain call
//! goes to rmcp's codec, which strips a byte order mark and a carriage
//! return, parses, and skips a notification it cannot read; a line
//! that is JSON but no message is answered with `Invalid Request`; one that
//! is not JSON (not UTF-8, or a lone surrogate such as `"\ud800"` in a
//! string) is answered with `Parse error` when it is a request whose id can
//! still be read, so that its caller is not left waiting, and ignored
//! otherwise, as rmcp (and every official SDK) does; answers are written by
//! rmcp's codec.
//!
//! Threat model: the client writes every byte of standard input. A line is
//! held in memory up to [`LINE_CAP`] (rmcp's cap, so that what is accepted
//! over HTTP is over stdio too); a longer one is dropped as it arrives, and
//! the connection goes on. A call read here is the call rmcp would read
//! (see [`super::parse`]); a test holds the whole transport to rmcp's, line
//! by line.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::{SinkExt, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcRequest, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Mutex;
use tokio_util::codec::{Decoder, FramedRead, FramedWrite};

use super::InFlight;
use super::parse::{Quick, quick_parse, unreadable_request};
use rmcp::ErrorData as McpError;

/// The longest line read, its newline included: rmcp's
/// `DEFAULT_MAX_LINE_LENGTH` (16 MiB), the cap of its HTTP transport too.
const LINE_CAP: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

type Writer<W> = FramedWrite<W, JsonRpcMessageCodec<ServerJsonRpcMessage>>;
type Sending = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;

/// A server's end of a stdio connection: reads client messages from `R`,
/// writes server messages to `W`.
pub(super) struct StdioTransport<R, W> {
    lines: FramedRead<R, Lines>,
    /// rmcp's own reading of a line, for every line that is not a plain call.
    rmcp: JsonRpcMessageCodec<ClientJsonRpcMessage>,
    /// Shared with the futures [`Transport::send`] returns; `None` once
    /// closed.
    write: Arc<Mutex<Option<Writer<W>>>>,
    /// An `Invalid Request` answer being written, before the next line is
    /// read. Kept here, since [`Transport::receive`] may be dropped at any
    /// await.
    answering: Option<Sending>,
}

impl<R: AsyncRead, W: AsyncWrite> StdioTransport<R, W> {
    pub(super) fn new(read: R, write: W) -> Self {
        Self::with_line_cap(read, write, LINE_CAP)
    }

    fn with_line_cap(read: R, write: W, cap: usize) -> Self {
        StdioTransport {
            lines: FramedRead::new(read, Lines::new(cap)),
            rmcp: JsonRpcMessageCodec::default(),
            write: Arc::new(Mutex::new(Some(FramedWrite::new(
                write,
                JsonRpcMessageCodec::default(),
            )))),
            answering: None,
        }
    }
}

impl<R, W> StdioTransport<R, W> {
    /// The message in `line` (a whole line, its newline included), `None`
    /// for a line rmcp ignores, or rmcp's error with the line it read.
    fn message(
        &mut self,
        mut line: BytesMut,
    ) -> Result<Option<ClientJsonRpcMessage>, (JsonRpcMessageCodecError, BytesMut)> {
        if let Quick::Call(call) = quick_parse(&line) {
            return Ok(Some(ClientJsonRpcMessage::Request(JsonRpcRequest {
                jsonrpc: call.jsonrpc,
                id: call.id,
                request: ClientRequest::CallToolRequest(call.request),
            })));
        }
        let kept = line.clone();
        self.rmcp.decode(&mut line).map_err(|e| (e, kept))
    }
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
        let write = self.write.clone();
        async move {
            match write.lock().await.as_mut() {
                Some(write) => write.send(item).await.map_err(Into::into),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the stdio transport is closed",
                )),
            }
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(answering) = self.answering.as_mut() {
                let written = answering.await;
                self.answering = None;
                written.ok()?;
            }
            let line = match self.lines.next().await? {
                Ok(Line::Whole(line)) => line,
                Ok(Line::Oversized) => {
                    tracing::error!(
                        max_line_length = self.lines.decoder().cap,
                        "Incoming message exceeded the maximum line length, discarding it"
                    );
                    continue;
                }
                Err(e) => {
                    tracing::error!("Error reading from stream: {e}");
                    return None;
                }
            };
            match self.message(line) {
                Ok(Some(message)) => return Some(message),
                Ok(None) => {}
                Err((JsonRpcMessageCodecError::Serde(e), line)) => {
                    use serde_json::error::Category;
                    if let Category::Data | Category::Io = e.classify() {
                        // JSON, but not a message: no id to answer to.
                        tracing::debug!("Protocol error on incoming message: {e}");
                        let answer = ServerJsonRpcMessage::error(
                            McpError::invalid_request("Invalid request", None),
                            None,
                        );
                        self.answering = Some(Box::pin(self.send(answer)));
                    } else if let Some(answer) = unreadable_request(&line) {
                        tracing::debug!("Unreadable request, answered: {e}");
                        self.answering = Some(Box::pin(self.send(answer)));
                    } else {
                        // Not JSON and no request: answering could start an
                        // error storm with a peer that echoes what it
                        // cannot read.
                        tracing::debug!("Ignoring unparsable incoming message: {e}");
                    }
                }
                Err((e, _)) => {
                    tracing::error!("Error reading from stream: {e}");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> std::io::Result<()> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// A frame of standard input.
enum Line {
    /// A whole line, its newline included.
    Whole(BytesMut),
    /// A line longer than the cap, dropped.
    Oversized,
}

/// Splits input into lines of at most `cap` bytes, dropping longer ones as
/// they arrive rather than holding them.
struct Lines {
    cap: usize,
    /// How much of the buffer is known to hold no newline.
    scanned: usize,
    /// Dropping the rest of a line already reported oversized.
    discarding: bool,
}

impl Lines {
    fn new(cap: usize) -> Self {
        Lines {
            cap,
            scanned: 0,
            discarding: false,
        }
    }
}

impl Decoder for Lines {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        loop {
            let window = buf.len().min(self.cap);
            let newline = buf[self.scanned..window].iter().position(|&b| b == b'\n');
            if let Some(at) = newline {
                let line = buf.split_to(self.scanned + at + 1);
                self.scanned = 0;
                if std::mem::take(&mut self.discarding) {
                    continue;
                }
                return Ok(Some(Line::Whole(line)));
            }
            if window < self.cap {
                if self.discarding {
                    buf.clear();
                    self.scanned = 0;
                } else {
                    self.scanned = window;
                }
                return Ok(None);
            }
            // `cap` bytes and no newline.
            buf.advance(window);
            self.scanned = 0;
            if !std::mem::replace(&mut self.discarding, true) {
                return Ok(Some(Line::Oversized));
            }
        }
    }

    /// A line the client did not end is not a message: rmcp drops it too.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        let line = self.decode(buf)?;
        if line.is_none() {
            buf.clear();
        }
        Ok(line)
    }
}

/// Standard input whose end is held back while calls are running.
pub(super) struct DrainingInput<R> {
    pub(super) inner: R,
    pub(super) in_flight: InFlight,
}

impl<R: AsyncRead + Unpin> AsyncRead for DrainingInput<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() == before => {
                // The end of input: report it once no call is running.
                self.in_flight.poll_idle(cx.waker()).map(Ok)
            }
            other => other,
        }
    }
}

/// Returns once standard input has something to read (or has ended), or
/// after `limit`: a check without sleeping, each a system call.
pub(super) fn await_stdin(limit: Duration) {
    let until = std::time::Instant::now() + limit;
    let mut input = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    while std::time::Instant::now() < until {
        // SAFETY: one valid `pollfd`, and a zero timeout.
        #[allow(unsafe_code)]
        let ready = unsafe { libc::poll(&mut input, 1, 0) };
        if ready != 0 {
            return;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::async_rw::AsyncRwTransport;
    use tokio::io::AsyncReadExt;

    use super::*;

    /// What a transport makes of `input`: the messages it receives, as
    /// JSON, and what it writes back.
    async fn read_all<T: Transport<RoleServer>>(
        make: impl FnOnce(std::io::Cursor<Vec<u8>>, tokio::io::DuplexStream) -> T,
        input: &[u8],
    ) -> (Vec<String>, String) {
        let (write, mut written) = tokio::io::duplex(1 << 20);
        let mut transport = make(std::io::Cursor::new(input.to_vec()), write);
        let mut messages = Vec::new();
        while let Some(message) = transport.receive().await {
            messages.push(serde_json::to_string(&message).unwrap());
        }
        transport.close().await.unwrap();
        drop(transport);
        let mut output = String::new();
        written.read_to_string(&mut output).await.unwrap();
        (messages, output)
    }

    /// Every line rmcp's transport reads, read the same by this one: the
    /// same messages, the same answers, with a line cap of 128 bytes.
    #[tokio::test]
    async fn a_request_that_is_not_unicode_is_answered_when_its_id_can_be_read() {
        let mut input = Vec::new();
        for line in [
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"run_code","arguments":{"code":"\ud800"}}}"#.as_bytes(),
            b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"a\xff\"},\"id\":\"twelve\"}",
            // No id, or not a request: nothing to answer.
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"v":"\udc00"}}"#.as_bytes(),
            r#"{"id":13,"v":"\ud800"}"#.as_bytes(),
        ] {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        let (messages, answers) = read_all(
            |read, write| StdioTransport::with_line_cap(read, write, 1024),
            &input,
        )
        .await;
        assert!(messages.is_empty(), "{messages:#?}");
        let answers: Vec<serde_json::Value> = answers
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(answers.len(), 2, "{answers:#?}");
        assert_eq!(answers[0]["id"], 11);
        assert_eq!(answers[1]["id"], "twelve");
        for answer in &answers {
            assert_eq!(answer["error"]["code"], -32700, "{answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("not valid JSON text"), "{message}");
        }
    }

    #[tokio::test]
    async fn lines_are_read_as_rmcp_reads_them() {
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}"#;
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"{}"}}}}"#,
            "t".repeat(100)
        );
        let lines = [
            call.to_string(),
            // A call with `_meta`, and one without `params`.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1}}}"#.into(),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call"}"#.into(),
            format!("\u{feff}{call}"),
            format!("{call}\r"),
            String::new(),
            "\r".into(),
            "   ".into(),
            long.clone(),
            call.to_string(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{}}"#.into(),
            r#"{"jsonrpc":"2.0","method":"notifications/vendor","params":{}}"#.into(),
            r#"{"jsonrpc":"2.0","id":3,"method":"vendor/call","params":{}}"#.into(),
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#.into(),
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.into(),
            r#"[1,2]"#.into(),
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call""#.into(),
            "not json".into(),
            "\u{ff}".into(),
        ];
        let mut input = lines.join("\n").into_bytes();
        // A long line split across reads, and an unfinished one at the end.
        input.extend_from_slice(format!("\n{long}{long}\n{call}\n{call}").as_bytes());

        let rmcp = read_all(
            |read, write| {
                AsyncRwTransport::<RoleServer, _, _>::new(read, write).with_max_line_length(128)
            },
            &input,
        )
        .await;
        let ours = read_all(
            |read, write| StdioTransport::with_line_cap(read, write, 128),
            &input,
        )
        .await;
        assert_eq!(ours, rmcp);
        // The test reads what it means to: calls, ignored lines, answers.
        let (messages, answers) = ours;
        assert_eq!(messages.len(), 13, "{messages:#?}");
        let calls = messages.iter().filter(|m| m.contains("tools/call"));
        assert_eq!(calls.count(), 7, "{messages:#?}");
        assert_eq!(answers.matches("Invalid request").count(), 1, "{answers}");
    }

    /// A line longer than the cap is dropped as it arrives, even when it
    /// comes a byte at a time, and the next line is read.
    #[test]
    fn long_lines_are_dropped_as_they_arrive() {
        let mut lines = Lines::new(8);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for &byte in b"0123456789abcdef\nok\n" {
            buf.extend_from_slice(&[byte]);
            while let Some(line) = lines.decode(&mut buf).unwrap() {
                frames.push(match line {
                    Line::Whole(line) => String::from_utf8(line.to_vec()).unwrap(),
                    Line::Oversized => "oversized".into(),
                });
            }
            assert!(buf.len() < 8, "{} bytes held", buf.len());
        }
        assert_eq!(frames, ["oversized", "ok\n"]);
    }
}
