//! toolcage's HTTP sender: the only way a tool's request leaves the host.
//!
//! Threat model: by the time a request gets here its destination is
//! granted, but the name still has to be resolved, and the answer is the
//! tool author's to choose. So: resolve once, check every address, connect
//! to a checked one (never a second lookup), verify TLS against the web PKI
//! roots (and the operator's own), speak HTTP/1.1 with the `Host` header
//! taken from the parse, and follow no redirect and no proxy. Every byte in
//! either direction counts against the call's budgets as it streams; the
//! connection lives in a future the call's store owns, so it ends with the
//! call.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::{Error, WasiBody};

use super::address;
use super::grant::{Destination, Host, Scheme};
use super::meter::{Budget, Meter, NetLimit, Notes, redacted_cut};
use super::policy::NetPolicy;
use crate::sandbox::secrets::redact::{self, Redactor};
use crate::sandbox::text::truncate;

/// Where a request goes, checked against the grants, not yet resolved; and
/// what it is sent within.
pub(super) struct Outgoing {
    /// The method and URL, as refusals name them.
    pub what: String,
    pub destination: Destination,
    /// Whether a grant names the destination's address or `localhost`
    /// exactly (so a special address is let through).
    pub named_exactly: bool,
    pub policy: Arc<NetPolicy>,
    pub budget: Budget,
    pub meter: Arc<Meter>,
    pub notes: Notes,
    pub deadline: Instant,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub between_bytes_timeout: Duration,
    /// Whether the response must come unencoded (its origin receives
    /// secrets).
    pub identity_only: bool,
    /// What redacts the response, when the operator holds secrets.
    pub redactor: Option<Arc<Redactor>>,
}

/// What [`send`] hands back: the response, and the connection's future.
pub(super) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Resolves, checks, connects and sends `request`, unless the call ends
/// first.
pub(super) async fn send(out: Outgoing, request: http::Request<WasiBody>) -> Result<Sent, Error> {
    let meter = out.meter.clone();
    tokio::select! {
        biased;
        () = meter.ended() => Err(Error::ConnectionTerminated),
        sent = send_checked(out, request) => sent,
    }
}

async fn send_checked(out: Outgoing, request: http::Request<WasiBody>) -> Result<Sent, Error> {
    // The connection slot first: a refusal here sends nothing at all.
    let connections = &out.policy.shared.open_connections;
    let open = Open::new(&out.meter, connections, out.budget.connections).ok_or_else(|| {
        out.meter.breach(NetLimit::Connections);
        out.meter.requests.fetch_sub(1, Ordering::AcqRel);
        out.meter.denied.fetch_add(1, Ordering::AcqRel);
        (out.notes)(format!(
            "toolcage: {} refused: the call already holds {} connections, its limit",
            out.what, out.budget.connections
        ));
        Error::ConnectionLimitReached
    })?;
    // One budget for the lookup, the connect and the TLS handshake.
    let connect_by = Instant::now() + out.connect_timeout;
    let addresses = checked_addresses(&out, connect_by).await?;
    let stream = connect(&out, &addresses, connect_by).await?;
    stream.set_nodelay(true).ok();
    match out.destination.scheme {
        Scheme::Https => {
            let name = match &out.destination.host {
                Host::Name(name) => rustls::pki_types::ServerName::try_from(name.clone())
                    .map_err(|_| Error::HttpRequestUriInvalid)?,
                Host::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
            };
            let connector = tokio_rustls::TlsConnector::from(out.policy.shared.tls.clone());
            let tls = tokio::time::timeout_at(connect_by, connector.connect(name, stream))
                .await
                .map_err(|_| Error::ConnectionTimeout)?
                .map_err(|e| tls_error(&out, e))?;
            exchange(out, request, tls, open).await
        }
        _ => exchange(out, request, stream, open).await,
    }
}

/// The addresses the destination may be reached at, every one checked.
async fn checked_addresses(out: &Outgoing, connect_by: Instant) -> Result<Vec<IpAddr>, Error> {
    let allow_private = &out.policy.allow_private;
    let name = match &out.destination.host {
        Host::Ip(ip) => return Ok(vec![*ip]),
        Host::Name(name) if name == "localhost" && out.named_exactly => {
            return Ok(vec![
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ]);
        }
        Host::Name(name) if name == "localhost" || name.ends_with(".localhost") => {
            return Err(out.prohibited(&format!(
                "{name} is loopback; only a grant naming localhost itself reaches it"
            )));
        }
        Host::Name(name) => name,
    };
    let lookup = out.policy.shared.resolver.resolve(name);
    let answer = match tokio::time::timeout_at(connect_by, lookup).await {
        Err(_) => {
            (out.notes)(format!(
                "toolcage: {} failed: looking up {name} took longer than {} ms",
                out.what,
                out.connect_timeout.as_millis()
            ));
            return Err(Error::DnsTimeout);
        }
        Ok(Err(error)) => {
            (out.notes)(format!(
                "toolcage: {} failed: looking up {name}: {error}",
                out.what
            ));
            return Err(Error::DnsError {
                rcode: Some(if error.kind() == io::ErrorKind::NotFound {
                    "NXDOMAIN".into()
                } else {
                    error.to_string()
                }),
                info_code: None,
            });
        }
        Ok(Ok(answer)) => answer,
    };
    // A mixed answer (public and special addresses) is refused as a whole:
    // it is what a rebinding attack looks like, and trying only the public
    // half would hide a misconfigured internal name.
    if let Some(bad) = answer
        .iter()
        .find(|ip| !address::allowed(**ip, allow_private))
    {
        let why = address::special(*bad).unwrap_or("special");
        return Err(out.prohibited(&format!(
            "{name} resolves to {bad}, which is {why}; let names resolve into that range with allow_private"
        )));
    }
    if answer.is_empty() {
        return Err(Error::DnsError {
            rcode: Some("no addresses".into()),
            info_code: None,
        });
    }
    Ok(answer)
}

/// Connects to the first of `addresses` that answers, within the connect
/// timeout.
async fn connect(
    out: &Outgoing,
    addresses: &[IpAddr],
    connect_by: Instant,
) -> Result<TcpStream, Error> {
    let attempt = async {
        let mut last = None;
        for ip in addresses {
            match TcpStream::connect(SocketAddr::new(*ip, out.destination.port)).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::NotFound.into()))
    };
    match tokio::time::timeout_at(connect_by, attempt).await {
        Err(_) => Err(Error::ConnectionTimeout),
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => {
            if tracing::enabled!(target: "toolcage::net", tracing::Level::DEBUG) {
                let line = format!("{}: connect failed: {error}", out.destination);
                let line = redacted_cut(out.redactor.as_deref(), &out.meter, line, usize::MAX);
                tracing::debug!(target: "toolcage::net", "{}", line.escape_debug());
            }
            Err(match error.kind() {
                io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
                io::ErrorKind::TimedOut => Error::ConnectionTimeout,
                _ => Error::DestinationUnavailable,
            })
        }
    }
}

fn tls_error(out: &Outgoing, error: io::Error) -> Error {
    (out.notes)(format!("toolcage: {} failed: TLS: {error}", out.what));
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => Error::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => Error::TlsProtocolError,
    }
}

/// Sends the request over `stream` and waits for the response head.
async fn exchange<S>(
    out: Outgoing,
    request: http::Request<WasiBody>,
    stream: S,
    open: Open,
) -> Result<Sent, Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Hyper)?;
    let (parts, body) = origin_form(request, &out.destination)?;
    // The wait for the first byte counts from the last chunk of the request
    // body sent, so a long upload is not taken for a slow server.
    let uploading = Arc::new(Activity::new());
    let body = Metered {
        inner: body,
        meter: out.meter.clone(),
        direction: Direction::Out,
        budget: out.budget,
        stall: None,
        activity: Some(uploading.clone()),
    };
    let request = http::Request::from_parts(parts, body);
    // The connection's future drives the request while the response head is
    // awaited; should it end first, it is not polled again.
    let mut connection = Some(Box::pin(connection));
    let first_byte = FirstByte {
        deadline: out.deadline,
        timeout: out.first_byte_timeout,
        uploading: &uploading,
    };
    let response = sender.send_request(request);
    let response = response_head(response, &mut connection, first_byte, &out.meter).await?;
    if tracing::enabled!(target: "toolcage::net", tracing::Level::DEBUG) {
        let line = format!(
            "{}: response {}",
            out.destination,
            response.status().as_u16()
        );
        let line = redacted_cut(out.redactor.as_deref(), &out.meter, line, usize::MAX);
        tracing::debug!(target: "toolcage::net", "{}", line.escape_debug());
    }
    let (mut head, incoming) = response.into_parts();
    if out.identity_only
        && let Some(coding) = encoded(&head.headers, out.redactor.as_deref(), &out.meter)
    {
        (out.notes)(format!(
            "toolcage: {} failed: the response came {coding}-encoded, but a response from an origin that receives secrets must come unencoded, so that it can be searched for them",
            out.what
        ));
        return Err(Error::HttpResponseContentCoding(Some(coding)));
    }
    let body = response_body(&out, &mut head.headers, incoming);
    let response = http::Response::from_parts(head, body);
    let meter = out.meter;
    let io = async move {
        let _open = open;
        let Some(connection) = connection else {
            return Ok(());
        };
        tokio::select! {
            biased;
            () = meter.ended() => Ok(()),
            done = connection => done.map_err(Error::Hyper),
        }
    };
    Ok((response, Box::new(io)))
}

/// `request` as it goes on the wire to `destination`: HTTP/1.1, its target
/// in origin form (the path and query), its `Host` header the one parsed
/// and granted, whatever the guest set.
fn origin_form(
    request: http::Request<WasiBody>,
    destination: &Destination,
) -> Result<(http::request::Parts, WasiBody), Error> {
    let (mut parts, body) = request.into_parts();
    parts.uri = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    parts.version = http::Version::HTTP_11;
    parts.headers.remove(http::header::HOST);
    parts.headers.insert(
        http::header::HOST,
        http::HeaderValue::from_str(&destination.host_header())
            .map_err(|_| Error::HttpRequestUriInvalid)?,
    );
    Ok((parts, body))
}

/// How long a response head may take: until `timeout` after the request
/// body's last chunk went out, and never past the call's `deadline`.
struct FirstByte<'a> {
    deadline: Instant,
    timeout: Duration,
    uploading: &'a Activity,
}

impl FirstByte<'_> {
    fn due(&self) -> Instant {
        self.deadline.min(self.uploading.last() + self.timeout)
    }
}

/// Waits for the response head, driving `connection` meanwhile (left
/// `None` should it end first), within `first_byte`.
async fn response_head<R, C>(
    response: R,
    connection: &mut Option<Pin<Box<C>>>,
    first_byte: FirstByte<'_>,
    meter: &Meter,
) -> Result<http::Response<hyper::body::Incoming>, Error>
where
    R: Future<Output = Result<http::Response<hyper::body::Incoming>, hyper::Error>>,
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut timer = std::pin::pin!(tokio::time::sleep_until(first_byte.due()));
    let mut response = std::pin::pin!(response);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = response.as_mut().poll(cx) {
            return Poll::Ready(result.map_err(hyper_error));
        }
        if let Some(driving) = connection
            && let Poll::Ready(result) = driving.as_mut().poll(cx)
        {
            *connection = None;
            result.map_err(hyper_error)?;
            return response.as_mut().poll(cx).map_err(hyper_error);
        }
        while timer.as_mut().poll(cx).is_ready() {
            let next = first_byte.due();
            if next <= Instant::now() {
                meter.breach(NetLimit::FirstByte);
                return Poll::Ready(Err(Error::HttpResponseTimeout));
            }
            timer.as_mut().reset(next);
        }
        Poll::Pending
    })
    .await
}

/// The response body as the guest reads it: metered against the call's
/// budget and its between-bytes timeout, and, when the operator holds
/// secrets, redacted (its headers too, and its length dropped).
fn response_body(
    out: &Outgoing,
    headers: &mut http::HeaderMap,
    incoming: hyper::body::Incoming,
) -> WasiBody {
    let body = Metered {
        inner: incoming.map_err(Error::Hyper),
        meter: out.meter.clone(),
        direction: Direction::In,
        budget: out.budget,
        stall: Some(Stall::new(out.between_bytes_timeout, out.deadline)),
        activity: None,
    };
    match out.redactor.clone() {
        None => body.boxed_unsync(),
        Some(redactor) => {
            out.meter.redacted(redact_headers(&redactor, headers));
            // Redaction changes the body's length.
            headers.remove(http::header::CONTENT_LENGTH);
            Redacting {
                inner: body,
                stream: redact::Stream::new(redactor.clone()),
                redactor,
                meter: out.meter.clone(),
                next: None,
                trailers: None,
                finished: false,
            }
            .boxed_unsync()
        }
    }
}

fn hyper_error(error: hyper::Error) -> Error {
    // A request body that breached its budget fails the request with its
    // own code, not as a protocol error.
    match std::error::Error::source(&error).and_then(|source| source.downcast_ref::<Error>()) {
        Some(Error::HttpRequestBodySize(size)) => Error::HttpRequestBodySize(*size),
        _ => Error::Hyper(error),
    }
}

/// One open connection: counted for the call's limit and the runtime's
/// figure until dropped.
struct Open {
    meter: Arc<Meter>,
    runtime: Arc<AtomicUsize>,
}

impl Open {
    fn new(meter: &Arc<Meter>, runtime: &Arc<AtomicUsize>, limit: u32) -> Option<Open> {
        meter
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < limit as usize).then_some(open + 1)
            })
            .ok()?;
        runtime.fetch_add(1, Ordering::AcqRel);
        Some(Open {
            meter: meter.clone(),
            runtime: runtime.clone(),
        })
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.runtime.fetch_sub(1, Ordering::AcqRel);
        if self.meter.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.meter.closed.notify_waiters();
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Out,
    In,
}

/// A body whose bytes are counted against the call's budget as they pass,
/// and (for responses) that may not stall longer than the between-bytes
/// timeout.
struct Metered<B> {
    inner: B,
    meter: Arc<Meter>,
    direction: Direction,
    budget: Budget,
    stall: Option<Stall>,
    /// Where progress is recorded (for a request body).
    activity: Option<Arc<Activity>>,
}

/// When a request body last made progress, as nanoseconds after its start.
struct Activity {
    start: Instant,
    nanos: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            nanos: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.store(nanos, Ordering::Release);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

/// The between-bytes timer, never past the call's deadline. Progress only
/// records the time; the timer is re-armed when it fires early, so a fast
/// body does not touch the timer wheel once per chunk.
struct Stall {
    sleep: Pin<Box<Sleep>>,
    every: Duration,
    deadline: Instant,
    progress: Instant,
}

impl Stall {
    fn new(every: Duration, deadline: Instant) -> Self {
        let now = Instant::now();
        Stall {
            sleep: Box::pin(tokio::time::sleep_until(deadline.min(now + every))),
            every,
            deadline,
            progress: now,
        }
    }

    /// Whether the body has stalled past the limit (registering for a wake
    /// otherwise).
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.deadline.min(self.progress + self.every);
            if due <= Instant::now() {
                return true;
            }
            self.sleep.as_mut().reset(due);
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes, Error = Error> + Unpin,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if let Some(stall) = &mut this.stall
                    && stall.stalled(cx)
                {
                    this.meter.breach(NetLimit::BetweenBytes);
                    return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
                }
                return Poll::Pending;
            }
            Poll::Ready(frame) => frame,
        };
        if let Some(stall) = &mut this.stall {
            stall.progress = Instant::now();
        }
        if let Some(activity) = &this.activity {
            activity.touch();
        }
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            let Some(data) = data else {
                return Poll::Ready(frame);
            };
            let length = data.len() as u64;
            let (counter, limit, breach, code) = match this.direction {
                Direction::Out => (
                    &this.meter.bytes_out,
                    this.budget.bytes_out,
                    NetLimit::BytesOut,
                    Error::HttpRequestBodySize(Some(this.budget.bytes_out)),
                ),
                Direction::In => (
                    &this.meter.bytes_in,
                    this.budget.bytes_in,
                    NetLimit::BytesIn,
                    Error::HttpResponseBodySize(Some(this.budget.bytes_in)),
                ),
            };
            // Only what passes is counted: a chunk past the budget is
            // neither sent nor delivered.
            let before = counter.fetch_add(length, Ordering::AcqRel);
            if before.saturating_add(length) > limit {
                counter.fetch_sub(length, Ordering::AcqRel);
                this.meter.breach(breach);
                return Poll::Ready(Some(Err(code)));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The longest content coding a refusal names, in bytes.
const MAX_CODING_NOTED: usize = 64;

/// The content or transfer coding of a response other than identity (and
/// chunked framing), if any, as the response spelled it, cut to
/// [`MAX_CODING_NOTED`]. Each header value is redacted whole before it is
/// split, so a secret echoed in it never reaches a note or an error, not
/// even a piece of it or its lower-cased spelling.
fn encoded(
    headers: &http::HeaderMap,
    redactor: Option<&Redactor>,
    meter: &Meter,
) -> Option<String> {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .chain(headers.get_all(http::header::TRANSFER_ENCODING))
        .find_map(|value| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let value = redacted_cut(redactor, meter, value, usize::MAX);
            value
                .split(',')
                .map(str::trim)
                .find(|c| {
                    !c.is_empty()
                        && !c.eq_ignore_ascii_case("identity")
                        && !c.eq_ignore_ascii_case("chunked")
                })
                .map(|c| truncate(c.to_string(), MAX_CODING_NOTED))
        })
}

/// Redacts every header's value, and any name that holds a secret (renamed
/// `x-redacted-secret`); returns how many were replaced.
fn redact_headers(redactor: &Redactor, headers: &mut http::HeaderMap) -> u64 {
    let mut count = 0;
    let mut renamed = Vec::new();
    for (name, value) in headers.iter_mut() {
        if let (std::borrow::Cow::Owned(redacted), n) = redactor.bytes(value.as_bytes()) {
            count += n;
            *value = http::HeaderValue::from_bytes(&redacted)
                .unwrap_or_else(|_| http::HeaderValue::from_static("[redacted secret]"));
        }
        if let (std::borrow::Cow::Owned(_), n) = redactor.bytes(name.as_str().as_bytes()) {
            count += n;
            renamed.push(name.clone());
        }
    }
    for name in renamed {
        let values: Vec<_> = headers.get_all(&name).iter().cloned().collect();
        headers.remove(&name);
        for value in values {
            headers.append("x-redacted-secret", value);
        }
    }
    count
}

/// A response body with every secret replaced as it streams (see
/// [`redact`]).
struct Redacting<B> {
    inner: B,
    stream: redact::Stream,
    redactor: Arc<Redactor>,
    meter: Arc<Meter>,
    /// The second piece of a chunk, sent next.
    next: Option<Bytes>,
    /// Trailers, sent after what the stream held back.
    trailers: Option<Frame<Bytes>>,
    finished: bool,
}

impl<B> Body for Redacting<B>
where
    B: Body<Data = Bytes, Error = Error> + Unpin,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if let Some(next) = this.next.take() {
            return Poll::Ready(Some(Ok(Frame::data(next))));
        }
        loop {
            if this.finished {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.finished = true;
                    let (rest, n) = this.stream.finish();
                    this.meter.redacted(n);
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let ([first, second], n) = this.stream.push(&data);
                    this.meter.redacted(n);
                    match (first.is_empty(), second.is_empty()) {
                        (true, true) => {}
                        (false, true) => return Poll::Ready(Some(Ok(Frame::data(first)))),
                        (true, false) => return Poll::Ready(Some(Ok(Frame::data(second)))),
                        (false, false) => {
                            this.next = Some(second);
                            return Poll::Ready(Some(Ok(Frame::data(first))));
                        }
                    }
                }
                Err(frame) => {
                    this.finished = true;
                    if let Ok(mut trailers) = frame.into_trailers() {
                        let n = redact_headers(&this.redactor, &mut trailers);
                        this.meter.redacted(n);
                        this.trailers = Some(Frame::trailers(trailers));
                    }
                    let (rest, n) = this.stream.finish();
                    this.meter.redacted(n);
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.trailers.is_none() && self.next.is_none()
    }
}

impl Outgoing {
    /// Counts and notes a refusal for an address reason.
    fn prohibited(&self, why: &str) -> Error {
        // Still counted as a request: it passed the grants, and any lookup
        // it needed went out.
        self.meter.denied.fetch_add(1, Ordering::AcqRel);
        (self.notes)(format!("toolcage: {} refused: {why}", self.what));
        Error::DestinationIpProhibited
    }
}

#[cfg(test)]
mod tests;
