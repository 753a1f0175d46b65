//! What a connection may hold before, between and during its requests.
//!
//! Threat model: anyone who can open a connection can hold it without ever
//! showing a token: open many, send an endless header, stay idle, or ask
//! for `100 Continue` and send no body. Each costs the server a socket, a
//! task and buffers. So:
//! - at most [`DEFAULT_MAX_CONNECTIONS`] connections are open at once, and
//!   at most [`DEFAULT_MAX_UNPROVEN_CONNECTIONS`] of them have not yet sent
//!   a request to `/mcp` that passed the token check (every request passes
//!   it when the server has no token). A connection beyond either cap is
//!   closed as soon as it is taken, before anything is read from it; one
//!   already proven keeps being served. While a flood holds every unproven
//!   slot, new clients are turned away until a slot frees (a connection
//!   that sends nothing frees its slot within the header timeout, one
//!   between requests within the idle timeout): clients that keep their
//!   connections open are served throughout;
//! - a request's head (request line and headers) is at most
//!   [`DEFAULT_MAX_HEADER_BYTES`] (431 past it, and the connection closed),
//!   and must arrive whole within [`DEFAULT_HEADER_READ_TIMEOUT`] of its
//!   first byte;
//! - a connection that sends nothing is closed after
//!   [`DEFAULT_HEADER_READ_TIMEOUT`]; one with no request in progress after
//!   its first is closed after [`DEFAULT_IDLE_TIMEOUT`] (longer than the
//!   60 s that nginx keeps its upstream connections, so that the proxy, not
//!   the server, closes them: nginx may send a POST on a connection it used
//!   only for `/healthz`, so this holds for unproven connections too, which
//!   the cap on them bounds);
//! - a request body must arrive whole within [`DEFAULT_BODY_READ_TIMEOUT`]
//!   of the server's first read of it (which, for `Expect: 100-continue`,
//!   is when `100 Continue` is sent): 408 past it, and the connection is
//!   closed (see `edge.rs`).
//!
//! - an unproven connection whose answers its client does not read (it
//!   pipelines requests and never reads, so the answers wait unwritten and
//!   its requests never end) is closed once a write has waited
//!   [`DEFAULT_HEADER_READ_TIMEOUT`] without progress.
//!
//! A request in progress (its answer being computed or streamed, such as an
//! event stream) has no other time limit here: the token holder's calls have
//! the runner's own limits.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The default of [`HttpOptions::header_read_timeout`](super::HttpOptions::header_read_timeout): 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default of [`HttpOptions::idle_timeout`](super::HttpOptions::idle_timeout): 75 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// The default of [`HttpOptions::body_read_timeout`](super::HttpOptions::body_read_timeout): 30 s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`HttpOptions::max_header_bytes`](super::HttpOptions::max_header_bytes): 64 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 << 10;

/// The default of [`HttpOptions::max_connections`](super::HttpOptions::max_connections): 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The default of
/// [`HttpOptions::max_unproven_connections`](super::HttpOptions::max_unproven_connections): 256.
pub const DEFAULT_MAX_UNPROVEN_CONNECTIONS: usize = 256;

/// The connection limits of one server.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
    pub max_unproven: usize,
}

/// Counts the open connections, and those not yet proven, against the caps.
#[derive(Debug)]
pub(super) struct Gate {
    pub limits: ConnectionLimits,
    open: AtomicUsize,
    unproven: AtomicUsize,
}

impl Gate {
    pub(super) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Gate {
            limits,
            open: AtomicUsize::new(0),
            unproven: AtomicUsize::new(0),
        })
    }

    /// A slot for a new connection, or `None` when either cap is reached.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.limits.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if self.unproven.fetch_add(1, Ordering::AcqRel) >= self.limits.max_unproven {
            self.unproven.fetch_sub(1, Ordering::AcqRel);
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Admitted(Watch::new(self.clone())))
    }
}

/// A connection's slot, given back when dropped (when the connection ends).
pub(super) struct Admitted(pub Arc<Watch>);

impl Drop for Admitted {
    fn drop(&mut self) {
        let watch = &self.0;
        if watch.state.swap(CLOSED, Ordering::AcqRel) == UNPROVEN {
            watch.gate.unproven.fetch_sub(1, Ordering::AcqRel);
        }
        watch.gate.open.fetch_sub(1, Ordering::AcqRel);
    }
}

const UNPROVEN: u8 = 0;
const PROVEN: u8 = 1;
const CLOSED: u8 = 2;

/// One connection's state: proven or not, and its requests in progress.
#[derive(Debug)]
pub(crate) struct Watch {
    gate: Arc<Gate>,
    state: AtomicU8,
    busy: AtomicUsize,
    /// Counts the requests ended, so the reader sees each end.
    ended: AtomicU64,
}

impl Watch {
    fn new(gate: Arc<Gate>) -> Arc<Self> {
        Arc::new(Watch {
            gate,
            state: AtomicU8::new(UNPROVEN),
            busy: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
        })
    }

    /// The connection sent a request that passed the token check.
    pub(crate) fn prove(&self) {
        if self
            .state
            .compare_exchange(UNPROVEN, PROVEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.gate.unproven.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(super) fn limits(&self) -> ConnectionLimits {
        self.gate.limits
    }

    /// A request is in progress until the returned guard is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }
}

/// A request in progress: its answer is not yet all sent.
pub(super) struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::AcqRel);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a connection waits for when it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request: the idle timeout runs.
    Idle,
    /// A request's head has begun: the header timeout runs.
    Head,
    /// A request is in progress: no timeout here.
    Busy,
}

/// A connection's socket, which fails its reads once the connection has
/// been idle, or a request's head unfinished, for too long.
pub(super) struct Timed<IO> {
    io: IO,
    watch: Arc<Watch>,
    phase: Phase,
    ended: u64,
    deadline: Pin<Box<Sleep>>,
    /// Since when a write of an unproven connection has waited for its
    /// client to read.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<IO> Timed<IO> {
    pub(super) fn new(io: IO, watch: Arc<Watch>) -> Self {
        let first = Instant::now() + watch.gate.limits.header_read_timeout;
        Timed {
            io,
            watch,
            phase: Phase::Idle,
            ended: 0,
            deadline: Box::pin(tokio::time::sleep_until(first)),
            stalled: None,
        }
    }

    /// `written`, or an error once an unproven connection's writes have
    /// waited past the header timeout for its client to read.
    fn unless_stalled<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() || self.watch.state.load(Ordering::Acquire) != UNPROVEN {
            self.stalled = None;
            return written;
        }
        let timeout = self.watch.gate.limits.header_read_timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read its answers",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Follows the requests' ends, and starts the idle timeout at each.
    fn follow(&mut self) {
        if self.watch.busy.load(Ordering::Acquire) > 0 {
            self.phase = Phase::Busy;
            return;
        }
        let ended = self.watch.ended.load(Ordering::Acquire);
        if self.phase == Phase::Busy || ended != self.ended {
            self.ended = ended;
            self.phase = Phase::Idle;
            let idle = self.watch.gate.limits.idle_timeout;
            self.deadline.as_mut().reset(Instant::now() + idle);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Timed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.follow();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.phase == Phase::Idle && buf.filled().len() > before {
                    this.phase = Phase::Head;
                    let timeout = this.watch.gate.limits.header_read_timeout;
                    this.deadline.as_mut().reset(Instant::now() + timeout);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.phase != Phase::Busy => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    match this.phase {
                        Phase::Head => "the request's head took too long",
                        _ => "the connection was idle too long",
                    },
                ))),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Timed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.unless_stalled(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.unless_stalled(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        this.unless_stalled(cx, flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max_connections: usize, max_unproven: usize) -> Arc<Gate> {
        Gate::new(ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_connections,
            max_unproven,
        })
    }

    #[test]
    fn caps_count_open_and_unproven_connections() {
        let gate = gate(3, 2);
        let first = gate.admit().unwrap();
        let second = gate.admit().unwrap();
        assert!(gate.admit().is_none(), "a third unproven connection");
        first.0.prove();
        first.0.prove();
        let third = gate.admit().unwrap();
        assert!(gate.admit().is_none(), "a fourth connection");
        drop(second);
        let fourth = gate.admit().unwrap();
        fourth.0.prove();
        drop((first, third));
        // A proof after the end counts nothing twice.
        let watch = fourth.0.clone();
        drop(fourth);
        watch.prove();
        assert_eq!(gate.open.load(Ordering::Acquire), 0);
        assert_eq!(gate.unproven.load(Ordering::Acquire), 0);
    }
}
