//! What a call uses of the network, against its budgets: the figures its
//! requests, bodies and connections share ([`Meter`]), the budgets
//! ([`Budget`]), what the call reports ([`NetUsage`], [`NetLimit`]), and the
//! redaction of what is noted.
//!
//! Threat model: a tool may try to exhaust the host's network, or to smuggle
//! a secret out through a note. Every request, byte and connection is
//! counted here as it happens, the first budget breached is kept, and no
//! line is noted before the operator's secrets are redacted from it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::sandbox::limits::Limits;
use crate::sandbox::secrets::redact::Redactor;
use crate::sandbox::text::truncate;

/// Where a call's refusals are noted: its logs (stderr, the events its
/// caller receives). The tracing log is written here, after the line is
/// redacted and cut.
pub(crate) type Notes = Arc<dyn Fn(String) + Send + Sync>;

/// What a call used of the network, on [`CallResult::net`](crate::CallResult::net).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetUsage {
    /// Requests past the grant check and within the budget: each HTTP
    /// request, lookup and TCP connect, counted when it goes out, even when
    /// its answer is then refused (a lookup is a message too).
    pub requests: u64,
    /// Requests refused: no grant, a special address, a budget spent.
    pub denied: u64,
    /// Request bytes sent: heads and bodies.
    pub bytes_out: u64,
    /// Response body bytes received.
    pub bytes_in: u64,
    /// Secrets replaced with `[redacted secret NAME]`: in responses the tool
    /// received, and in what the call handed back (output, details, logs,
    /// progress, stdout, stderr). Anything above 0 in the second place means
    /// the tool got hold of a secret another way and tried to pass it on.
    pub redactions: u64,
    /// The first network budget the call breached, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<NetLimit>,
}

/// A per-call network budget ([`Limits`](crate::Limits)`::net_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetLimit {
    /// [`Limits::net_requests`](crate::Limits::net_requests).
    Requests,
    /// [`Limits::net_bytes_out`](crate::Limits::net_bytes_out).
    BytesOut,
    /// [`Limits::net_bytes_in`](crate::Limits::net_bytes_in).
    BytesIn,
    /// [`Limits::net_connections`](crate::Limits::net_connections).
    Connections,
    /// [`Limits::net_first_byte_timeout`](crate::Limits::net_first_byte_timeout).
    FirstByte,
    /// [`Limits::net_between_bytes_timeout`](crate::Limits::net_between_bytes_timeout).
    BetweenBytes,
}

impl NetLimit {
    const ALL: [NetLimit; 6] = [
        NetLimit::Requests,
        NetLimit::BytesOut,
        NetLimit::BytesIn,
        NetLimit::Connections,
        NetLimit::FirstByte,
        NetLimit::BetweenBytes,
    ];
}

/// A call's network budgets, from its [`Limits`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub requests: u32,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub connections: u32,
    pub first_byte: Duration,
    pub between_bytes: Duration,
}

impl Budget {
    pub(crate) fn of(limits: &Limits) -> Self {
        Budget {
            requests: limits.net_requests,
            bytes_out: limits.net_bytes_out,
            bytes_in: limits.net_bytes_in,
            connections: limits.net_connections,
            first_byte: limits.net_first_byte_timeout,
            between_bytes: limits.net_between_bytes_timeout,
        }
    }
}

/// What a call has used so far, shared by its hooks and the bodies and
/// connections they spawn.
#[derive(Default)]
pub(crate) struct Meter {
    pub(super) requests: AtomicU64,
    pub(super) denied: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) bytes_in: AtomicU64,
    pub(super) redactions: AtomicU64,
    pub(super) open: AtomicUsize,
    /// 1 + the index in [`NetLimit::ALL`] of the first breach; 0 for none.
    pub(super) limit: AtomicU8,
    pub(super) refusals_noted: AtomicUsize,
    /// Notified when the last open connection closes.
    pub(super) closed: tokio::sync::Notify,
    /// Set when the call has ended: whatever of its network work is left
    /// stops.
    pub(super) ended: std::sync::atomic::AtomicBool,
    pub(super) ending: tokio::sync::Notify,
}

impl Meter {
    pub(super) fn breach(&self, limit: NetLimit) {
        let index = NetLimit::ALL.iter().position(|l| *l == limit).unwrap_or(0) as u8;
        let _ = self
            .limit
            .compare_exchange(0, index + 1, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Counts `n` secrets redacted.
    pub(crate) fn redacted(&self, n: u64) {
        if n > 0 {
            self.redactions.fetch_add(n, Ordering::AcqRel);
        }
    }

    /// Ends the call's network work: requests still being sent and
    /// connections still open stop at their next poll, even if the call's
    /// store outlives it (a worker stuck in a file operation).
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.ending.notify_waiters();
    }

    /// Resolves when [`Meter::end`] is called.
    pub(super) async fn ended(&self) {
        loop {
            let ending = self.ending.notified();
            if self.ended.load(Ordering::Acquire) {
                return;
            }
            ending.await;
        }
    }

    /// Waits, at most `grace`, for the call's connections to close. A call's
    /// connections live in tasks its store owns; dropping the store aborts
    /// them, and an abort takes effect when the runtime next polls them.
    pub(crate) async fn closed(&self, grace: Duration) {
        if self.open.load(Ordering::Acquire) == 0 {
            return;
        }
        // Boxed: only a call with connections open carries the wait.
        Box::pin(self.wait_closed(grace)).await;
    }

    async fn wait_closed(&self, grace: Duration) {
        let wait = async {
            loop {
                let closed = self.closed.notified();
                if self.open.load(Ordering::Acquire) == 0 {
                    return;
                }
                closed.await;
            }
        };
        if tokio::time::timeout(grace, wait).await.is_err() {
            tracing::warn!(
                target: "toolcage::net",
                open = self.open.load(Ordering::Acquire),
                "a call's connections were still open {} ms after it ended",
                grace.as_millis()
            );
        }
    }

    /// The figures so far.
    pub(crate) fn usage(&self) -> NetUsage {
        NetUsage {
            requests: self.requests.load(Ordering::Acquire),
            denied: self.denied.load(Ordering::Acquire),
            bytes_out: self.bytes_out.load(Ordering::Acquire),
            bytes_in: self.bytes_in.load(Ordering::Acquire),
            redactions: self.redactions.load(Ordering::Acquire),
            limit: match self.limit.load(Ordering::Acquire) {
                0 => None,
                n => NetLimit::ALL.get(usize::from(n) - 1).copied(),
            },
        }
    }
}

/// `text` with the secrets `redactor` knows replaced, counted on `meter`.
pub(crate) fn redacted(redactor: Option<&Redactor>, meter: &Meter, text: String) -> String {
    match redactor.map(|r| r.text(&text)) {
        Some((std::borrow::Cow::Owned(redacted), n)) => {
            meter.redacted(n);
            redacted
        }
        _ => text,
    }
}

/// `text` with the call's secrets redacted (counted on `meter`), then cut
/// to `max` bytes so that no secret's start survives the cut.
pub(crate) fn redacted_cut(
    redactor: Option<&Redactor>,
    meter: &Meter,
    text: String,
    max: usize,
) -> String {
    match redactor {
        None => truncate(text, max),
        Some(redactor) => {
            let (text, n) = redactor.cut(&text, max);
            meter.redacted(n);
            text
        }
    }
}
