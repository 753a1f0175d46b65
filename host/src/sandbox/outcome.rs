//! A call's outcome and what it reports besides: why it failed
//! ([`ErrorKind`]), the guest's events and captured output, and the token
//! that cancels it. Also the guest's host interface (`toolcage:tool/host`),
//! whose `log` and `progress` become those events.
//!
//! Threat model: the guest may try to flood the host's logs or its caller
//! with events. It may send at most [`MAX_GUEST_EVENTS`] a call, each cut at
//! [`MAX_EVENT_MESSAGE`] bytes, with the operator's secrets redacted; later
//! ones are dropped. A caller's callback is held only until the call's
//! outcome is decided, so a guest that outlives its call (stuck in a file
//! operation) cannot reach it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::bindings::{Level, toolcage};
use super::net::{Meter, redacted};
use super::secrets::redact::Redactor;
use super::text::truncate;

/// The most `log` lines and `progress` reports a call may make; later ones
/// are dropped.
pub(crate) const MAX_GUEST_EVENTS: usize = 1_000;
/// The longest `log` or `progress` message kept, in bytes.
pub(crate) const MAX_EVENT_MESSAGE: usize = 4 << 10;

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

/// Why a call failed. Every kind reaches the model as an error outcome whose
/// `output` says what to do next; none of them affects other calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// No tool has that name.
    NotFound,
    /// The arguments are not JSON, or do not match the tool's input schema.
    InvalidArguments,
    /// The tool ran and reported a failure (its `Err` outcome), or returned
    /// something malformed.
    ToolError,
    /// The call used up its fuel (its instruction budget).
    OutOfFuel,
    /// The call ran past its wall-clock timeout.
    Timeout,
    /// The call tried to grow its memory past the limit.
    MemoryLimit,
    /// The call's output and details together were larger than allowed.
    OutputLimit,
    /// The guest trapped: a panic, a stack overflow, an unreachable, a failed
    /// host call.
    Trap,
    /// The call was cancelled by its caller.
    Cancelled,
    /// The operator's permission rules refused the call.
    PermissionDenied,
    /// The call is of a kind toolcage cannot run, such as an OpenAI custom
    /// tool call (free-text input, where toolcage's tools take JSON): it did
    /// not run.
    Unsupported,
    /// A nested call (a tool calling a tool) was refused because its call
    /// tree used up a budget: its number of nested calls, its depth, or the
    /// bytes crossing between callers and callees.
    NestedLimit,
    /// The tool's upstream MCP server is not running (it failed to start or
    /// died, and is being restarted), or broke the protocol.
    Unavailable,
}

impl ErrorKind {
    /// Every kind.
    #[cfg(test)]
    const ALL: [ErrorKind; 13] = [
        ErrorKind::NotFound,
        ErrorKind::InvalidArguments,
        ErrorKind::ToolError,
        ErrorKind::OutOfFuel,
        ErrorKind::Timeout,
        ErrorKind::MemoryLimit,
        ErrorKind::OutputLimit,
        ErrorKind::Trap,
        ErrorKind::Cancelled,
        ErrorKind::PermissionDenied,
        ErrorKind::Unsupported,
        ErrorKind::NestedLimit,
        ErrorKind::Unavailable,
    ];

    /// The kind's name as it appears in JSON (`out_of_fuel`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::ToolError => "tool_error",
            ErrorKind::OutOfFuel => "out_of_fuel",
            ErrorKind::Timeout => "timeout",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::OutputLimit => "output_limit",
            ErrorKind::Trap => "trap",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NestedLimit => "nested_limit",
            ErrorKind::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the guest's `log` and `progress` go: the caller's callback, held
/// only until the call's outcome is decided. A worker stuck in a file
/// operation keeps its store (and this observer) alive past that, so the
/// callback is detached then, and whatever the caller's callback holds (an
/// event channel its answer waits to see closed) is dropped with it.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    events: Option<Arc<Mutex<Option<EventSink>>>>,
}

/// The caller's callback for the guest's events.
pub(crate) type EventSink = Arc<dyn Fn(GuestEvent) + Send + Sync>;

impl Observer {
    /// An observer that sends each event to `events`, when there is one.
    pub(crate) fn new(events: Option<EventSink>) -> Observer {
        Observer {
            events: events.map(|events| Arc::new(Mutex::new(Some(events)))),
        }
    }

    /// Whether anybody receives the events.
    fn is_watched(&self) -> bool {
        self.events.is_some()
    }

    /// Sends `event`, unless the observer was detached.
    pub(crate) fn send(&self, event: GuestEvent) {
        let Some(slot) = &self.events else {
            return;
        };
        let sink = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(sink) = sink {
            sink(event);
        }
    }

    /// Drops the caller's callback: no event is sent after this.
    pub(crate) fn detach(&self) {
        if let Some(slot) = &self.events {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

/// The guest's events during one call: where they go, how many it sent,
/// and what redacts the operator's secrets from them. What
/// `toolcage:tool/host` works on.
pub(crate) struct GuestEvents {
    observer: Observer,
    sent: usize,
    redactor: Option<Arc<Redactor>>,
    meter: Arc<Meter>,
}

impl GuestEvents {
    /// Events sent to `observer`, redacted by `redactor` (counted on
    /// `meter`).
    pub(crate) fn new(
        observer: Observer,
        redactor: Option<Arc<Redactor>>,
        meter: Arc<Meter>,
    ) -> GuestEvents {
        GuestEvents {
            observer,
            sent: 0,
            redactor,
            meter,
        }
    }

    /// `message` with the operator's secrets redacted (and counted), cut to
    /// [`MAX_EVENT_MESSAGE`].
    fn bounded(&self, message: String) -> String {
        let message = redacted(self.redactor.as_deref(), &self.meter, message);
        truncate(message, MAX_EVENT_MESSAGE)
    }

    /// Whether one more event is within [`MAX_GUEST_EVENTS`].
    fn admit(&mut self) -> bool {
        self.sent += 1;
        if self.sent == MAX_GUEST_EVENTS + 1 {
            tracing::warn!(
                "the tool sent more than {MAX_GUEST_EVENTS} log lines or progress reports; dropping the rest"
            );
        }
        self.sent <= MAX_GUEST_EVENTS
    }
}

impl toolcage::tool::host::Host for GuestEvents {
    fn log(&mut self, level: Level, message: String) {
        if !self.admit() {
            return;
        }
        let message = self.bounded(message);
        match level {
            Level::Trace => {
                tracing::trace!(target: "toolcage::guest", "{}", message.escape_debug())
            }
            Level::Debug => {
                tracing::debug!(target: "toolcage::guest", "{}", message.escape_debug())
            }
            Level::Info => tracing::info!(target: "toolcage::guest", "{}", message.escape_debug()),
            Level::Warn => tracing::warn!(target: "toolcage::guest", "{}", message.escape_debug()),
            Level::Error => {
                tracing::error!(target: "toolcage::guest", "{}", message.escape_debug())
            }
        }
        if self.observer.is_watched() {
            let level = match level {
                Level::Trace => LogLevel::Trace,
                Level::Debug => LogLevel::Debug,
                Level::Info => LogLevel::Info,
                Level::Warn => LogLevel::Warn,
                Level::Error => LogLevel::Error,
            };
            self.observer.send(GuestEvent::Log { level, message });
        }
    }

    fn progress(&mut self, message: String, fraction: Option<f32>) {
        if !self.admit() {
            return;
        }
        let message = self.bounded(message);
        let fraction = fraction
            .filter(|f| f.is_finite())
            .map(|f| f.clamp(0.0, 1.0));
        tracing::debug!(target: "toolcage::guest", fraction, "progress: {}", message.escape_debug());
        self.observer
            .send(GuestEvent::Progress { message, fraction });
    }
}

/// `message`, followed by the last lines the guest wrote to stderr (where a
/// Rust panic message lands), if any.
pub(crate) fn with_stderr(message: String, stderr: &str) -> String {
    const TAIL_LINES: usize = 10;
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return message;
    }
    let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    format!(
        "{message}\nThe tool's last words (stderr):\n{}",
        tail.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolcage::tool::host::Host;

    #[test]
    fn every_kind_serializes_as_its_name() {
        for kind in ErrorKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.as_str());
            assert_eq!(serde_json::from_value::<ErrorKind>(json).unwrap(), kind);
        }
        assert!(serde_json::from_str::<ErrorKind>("\"no_such_kind\"").is_err());
    }

    #[test]
    fn events_are_capped_in_count_and_size() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink: EventSink = {
            let seen = seen.clone();
            Arc::new(move |event| seen.lock().unwrap().push(event))
        };
        let mut events = GuestEvents::new(Observer::new(Some(sink)), None, Arc::default());
        for _ in 0..MAX_GUEST_EVENTS + 5 {
            events.progress("x".repeat(MAX_EVENT_MESSAGE + 1), Some(f32::NAN));
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), MAX_GUEST_EVENTS);
        let GuestEvent::Progress { message, fraction } = &seen[0] else {
            panic!("{:?}", seen[0]);
        };
        assert!(message.ends_with('…') && message.len() <= MAX_EVENT_MESSAGE + 3);
        assert_eq!(*fraction, None, "a NaN fraction is dropped");
    }

    #[test]
    fn a_detached_observer_sends_nothing() {
        let seen = Arc::new(Mutex::new(0));
        let sink: EventSink = {
            let seen = seen.clone();
            Arc::new(move |_| *seen.lock().unwrap() += 1)
        };
        let mut events = GuestEvents::new(Observer::new(Some(sink)), None, Arc::default());
        events.log(Level::Info, "before".into());
        events.observer.detach();
        events.log(Level::Info, "after".into());
        assert_eq!(*seen.lock().unwrap(), 1);
    }
}
