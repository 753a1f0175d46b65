//! What a run reports besides its outcome: the guest's events and captured
//! output, and the token that cancels it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::Notify;

/// A log line's severity, as the guest gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Trace.
    Trace,
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Warn.
    Warn,
    /// Error.
    Error,
}

/// What a guest reports while it runs, through its `log` and `progress`
/// imports. At most 1,000 per call, each message cut at 4 KiB.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GuestEvent {
    /// A log line.
    Log {
        /// Its severity.
        level: LogLevel,
        /// The text.
        message: String,
    },
    /// A progress report.
    Progress {
        /// What is happening.
        message: String,
        /// How far along, in `0.0..=1.0`, when known.
        fraction: Option<f32>,
    },
}

/// Cancels the calls it is given to. Cloning shares the token.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelState>,
}

#[derive(Debug, Default)]
struct CancelState {
    cancelled: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels every call using this token: a running guest is stopped at its
    /// next epoch tick (within milliseconds), with [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled).
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the token is cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What the guest printed during a call, each stream cut at
/// [`Limits::log_bytes`](crate::Limits::log_bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Logs {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Whether either stream was cut.
    pub truncated: bool,
}
