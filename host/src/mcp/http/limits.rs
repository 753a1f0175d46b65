//! What a connection may hold before, between and during its requests.
//!
//! Threat model: anyone who can open a connection can hold it without ever
//! showing a token: open many, send an endless header, stay idle, or ask
//! for `100 Continue` and send no body. Each costs the server a socket, a
//! task and buffers. So:
//! - at most [`DEFAULT_MAX_CONNECTIONS`] connections are open at once, and
//!   at most [`DEFAULT_MAX_UNPROVEN_CONNECTIONS`] of them have not yet sent
//!   a request to `/mcp` that passed the token check (every request passes
//!   it when the server has no token). When the unproven cap is reached, a
//!   new connection takes the slot of the oldest unproven one that has no
//!   request in progress (silent, idle, or still sending its head), which
//!   is closed: a flood of idle or trickling sockets, reopened as fast as
//!   they are closed, keeps cycling through the slots while an honest
//!   client, which sends its request at once, is answered and proven. Only
//!   when every unproven connection has a request in progress is a new one
//!   refused. A connection beyond the cap on all connections is closed as
//!   soon as it is taken, before anything is read from it; one already
//!   proven keeps being served;
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

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
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
    /// The unproven connections, closing ones included.
    unproven: AtomicUsize,
    /// The unproven connections told to close, not yet closed: their slots
    /// are already given to newer ones.
    closing: AtomicUsize,
    /// The unproven connections by age, oldest first.
    by_age: Mutex<BTreeMap<u64, Weak<Watch>>>,
    next_age: AtomicU64,
}

impl Gate {
    pub(super) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Gate {
            limits,
            open: AtomicUsize::new(0),
            unproven: AtomicUsize::new(0),
            closing: AtomicUsize::new(0),
            by_age: Mutex::default(),
            next_age: AtomicU64::new(0),
        })
    }

    /// A slot for a new connection, or `None` when the cap on connections
    /// is reached, or the unproven cap is and no unproven connection can
    /// make room (see the module's docs).
    pub(super) fn accept(self: &Arc<Self>) -> Option<Accepted> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.limits.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let mut by_age = self.by_age.lock().unwrap_or_else(|e| e.into_inner());
        let holding = self
            .unproven
            .load(Ordering::Acquire)
            .saturating_sub(self.closing.load(Ordering::Acquire));
        if holding >= self.limits.max_unproven && !close_oldest_idle(&mut by_age) {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.unproven.fetch_add(1, Ordering::AcqRel);
        let age = self.next_age.fetch_add(1, Ordering::Relaxed);
        let watch = Watch::new(self.clone(), age);
        by_age.insert(age, Arc::downgrade(&watch));
        Some(Accepted(watch))
    }

    /// `watch` is no longer unproven: proven, or closed.
    fn forget(&self, watch: &Watch) {
        self.unproven.fetch_sub(1, Ordering::AcqRel);
        let mut by_age = self.by_age.lock().unwrap_or_else(|e| e.into_inner());
        by_age.remove(&watch.age);
    }
}

/// Tells the oldest unproven connection with no request in progress to
/// close, and takes it out of `by_age`; `false` when there is none.
fn close_oldest_idle(by_age: &mut BTreeMap<u64, Weak<Watch>>) -> bool {
    let oldest = by_age.iter().find_map(|(age, watch)| {
        let watch = watch.upgrade()?;
        (watch.busy.load(Ordering::Acquire) == 0).then_some((*age, watch))
    });
    let Some((age, watch)) = oldest else {
        return false;
    };
    by_age.remove(&age);
    if watch
        .state
        .compare_exchange(UNPROVEN, CLOSING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Proven or closed meanwhile: its slot is free already.
        return true;
    }
    watch.gate.closing.fetch_add(1, Ordering::AcqRel);
    watch.woken.wake();
    true
}

/// A connection's slot, given back when dropped (when the connection ends).
pub(super) struct Accepted(pub Arc<Watch>);

impl Drop for Accepted {
    fn drop(&mut self) {
        let watch = &self.0;
        match watch.state.swap(CLOSED, Ordering::AcqRel) {
            UNPROVEN => watch.gate.forget(watch),
            CLOSING => {
                watch.gate.closing.fetch_sub(1, Ordering::AcqRel);
                watch.gate.unproven.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        watch.gate.open.fetch_sub(1, Ordering::AcqRel);
    }
}

const UNPROVEN: u8 = 0;
const PROVEN: u8 = 1;
const CLOSED: u8 = 2;
/// Unproven, and told to close to make room for a newer connection.
const CLOSING: u8 = 3;

/// One connection's state: proven or not, and its requests in progress.
#[derive(Debug)]
pub(crate) struct Watch {
    gate: Arc<Gate>,
    /// Its place among the unproven connections, by age.
    age: u64,
    state: AtomicU8,
    busy: AtomicUsize,
    /// Counts the requests ended, so the reader sees each end.
    ended: AtomicU64,
    /// The reader, woken when the connection is told to close.
    woken: AtomicWaker,
}

impl Watch {
    fn new(gate: Arc<Gate>, age: u64) -> Arc<Self> {
        Arc::new(Watch {
            gate,
            age,
            state: AtomicU8::new(UNPROVEN),
            busy: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
            woken: AtomicWaker::new(),
        })
    }

    /// The connection sent a request that passed the token check. One told
    /// to close while that request was read is kept open after all.
    pub(crate) fn prove(&self) {
        let swap = |from| {
            self.state
                .compare_exchange(from, PROVEN, Ordering::AcqRel, Ordering::Acquire)
        };
        match swap(UNPROVEN) {
            Ok(_) => self.gate.forget(self),
            Err(CLOSING) if swap(CLOSING).is_ok() => {
                self.gate.closing.fetch_sub(1, Ordering::AcqRel);
                self.gate.unproven.fetch_sub(1, Ordering::AcqRel);
            }
            Err(_) => {}
        }
    }

    /// Whether the connection was told to close (see [`close_oldest_idle`]),
    /// after registering `cx` to be woken when it is.
    fn told_to_close(&self, cx: &Context<'_>) -> bool {
        match self.state.load(Ordering::Acquire) {
            UNPROVEN => {
                self.woken.register(cx.waker());
                self.state.load(Ordering::Acquire) == CLOSING
            }
            state => state == CLOSING,
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

    /// `written`, or an error once an unproven connection's writes (one
    /// told to close included) have waited past the header timeout for its
    /// client to read.
    fn unless_stalled<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() || self.watch.state.load(Ordering::Acquire) == PROVEN {
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
        if this.phase != Phase::Busy && this.watch.told_to_close(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a newer connection: it had not shown a token",
            )));
        }
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
        let first = gate.accept().unwrap();
        let second = gate.accept().unwrap();
        first.0.prove();
        first.0.prove();
        let third = gate.accept().unwrap();
        assert!(gate.accept().is_none(), "a fourth connection");
        drop(second);
        let fourth = gate.accept().unwrap();
        fourth.0.prove();
        drop((first, third));
        // A proof after the end counts nothing twice.
        let watch = fourth.0.clone();
        drop(fourth);
        watch.prove();
        assert_eq!(gate.open.load(Ordering::Acquire), 0);
        assert_eq!(gate.unproven.load(Ordering::Acquire), 0);
        assert!(gate.by_age.lock().unwrap().is_empty());
    }

    fn state(accepted: &Accepted) -> u8 {
        accepted.0.state.load(Ordering::Acquire)
    }

    #[test]
    fn a_new_connection_takes_the_slot_of_the_oldest_idle_unproven_one() {
        let gate = gate(10, 2);
        let oldest = gate.accept().unwrap();
        let busy_old = gate.accept().unwrap();
        // The oldest is told to close; the new one is let in.
        let third = gate.accept().unwrap();
        assert_eq!(state(&oldest), CLOSING);
        assert_eq!(state(&busy_old), UNPROVEN);
        // One with a request in progress is passed over.
        let _request = busy_old.0.begin();
        let fourth = gate.accept().unwrap();
        assert_eq!((state(&busy_old), state(&third)), (UNPROVEN, CLOSING));
        // Every unproven one busy: a new one is refused.
        let _other = fourth.0.begin();
        assert!(gate.accept().is_none());
        // A closing one that proves itself (its request passed the token
        // check) stays, and its slot counts no more.
        third.0.prove();
        assert_eq!(state(&third), PROVEN);
        drop((oldest, third));
        assert_eq!(gate.closing.load(Ordering::Acquire), 0);
        assert_eq!(gate.unproven.load(Ordering::Acquire), 2);
        assert!(gate.accept().is_none(), "both unproven ones are still busy");
    }
}
