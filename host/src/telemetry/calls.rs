//! A call's span and metrics, built off the call's thread.
//!
//! The call path hands what it saw ([`Ended`]: times, costs, limits, the
//! rule that applied) to a bounded export queue; a thread of the
//! telemetry's own builds the span (with the times the call had, so it is
//! the same span) and records the metrics. A call pays for a few copies and
//! one send, whatever the exporters cost.
//!
//! Threat model: a collector that refuses, hangs or is slow, or a flood of
//! calls, never slows a call or grows the host's memory: the queue holds at
//! most [`QUEUE_CALLS`] calls, and a call that finds it full is dropped
//! from telemetry (counted, and logged), never waited for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, StringValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::{CallOrigin, Inner, MAX_UNKNOWN_NAME_BYTES, Telemetry, Transport, clamp, cut};
use crate::call::{CallResult, CallSpan, Timings, Tracer};
use crate::catalog::permissions::Permission;
use crate::catalog::table::ToolInfo;
use crate::sandbox::limits::Limits;
use crate::sandbox::net::NetUsage;
use crate::sandbox::outcome::ErrorKind;

/// The most calls waiting for their spans and metrics: past it, a call is
/// left out of telemetry rather than waited for.
pub const QUEUE_CALLS: usize = 8192;

/// How long the export thread sleeps when it finds the queue empty: spans
/// and metrics appear at most this late (or at once after a
/// [`Telemetry::flush`]).
const IDLE: Duration = Duration::from_millis(5);

/// Telemetry as the call path's [`Tracer`], for calls from `origin`.
pub(super) struct CallTracer {
    telemetry: Telemetry,
    origin: Option<Arc<CallOrigin>>,
    /// For nested calls: their caller's children, exported with it.
    into: Option<Children>,
}

impl CallTracer {
    /// The tracer of calls from `origin` (none: an embedder's own).
    pub(super) fn new(telemetry: Telemetry, origin: Option<Arc<CallOrigin>>) -> Self {
        CallTracer {
            telemetry,
            origin,
            into: None,
        }
    }
}

/// The nested calls of a call, ended, waiting for their caller to end:
/// their spans are children of its span, built after it.
type Children = Arc<Mutex<Vec<Ended>>>;

/// The most nested calls exported under one call.
const MAX_CHILDREN: usize = 1_000;

impl Tracer for CallTracer {
    fn start(
        &self,
        _tool: &str,
        _info: Option<&ToolInfo>,
        arguments: &dyn Fn() -> String,
        permission: Permission,
    ) -> Box<dyn CallSpan> {
        let inner = &self.telemetry.inner;
        Box::new(Traced {
            telemetry: self.telemetry.clone(),
            origin: self.origin.clone(),
            into: self.into.clone(),
            children: OnceLock::new(),
            started: SystemTime::now(),
            arguments: inner.capture_content.then(arguments),
            permission: permission.as_str(),
        })
    }
}

/// A call being traced, from its start to its result.
struct Traced {
    telemetry: Telemetry,
    origin: Option<Arc<CallOrigin>>,
    into: Option<Children>,
    /// Its nested calls, once its tool makes some.
    children: OnceLock<Children>,
    started: SystemTime,
    /// The arguments, kept only when content is captured.
    arguments: Option<String>,
    /// The permission rule that applied: `allow`, `ask` or `deny`.
    permission: &'static str,
}

impl CallSpan for Traced {
    fn timed(&self) -> bool {
        self.telemetry.inner.tracer.is_some()
    }

    fn children(&self) -> Option<Arc<dyn Tracer>> {
        let children = self.children.get_or_init(Children::default).clone();
        Some(Arc::new(CallTracer {
            telemetry: self.telemetry.clone(),
            origin: None,
            into: Some(children),
        }))
    }

    fn finish(
        self: Box<Self>,
        info: Option<&ToolInfo>,
        limits: Option<&Limits>,
        result: &CallResult,
        granted: bool,
        timings: &Timings,
    ) {
        let Traced {
            telemetry,
            origin,
            into,
            children,
            started,
            arguments,
            permission,
        } = *self;
        let Some(queue) = &telemetry.inner.queue else {
            return;
        };
        let captured = arguments.map(|arguments| (arguments, result.output.clone()));
        let children = children.into_inner().map_or_else(Vec::new, |children| {
            std::mem::take(&mut *children.lock().unwrap_or_else(|e| e.into_inner()))
        });
        let ended = Ended {
            tool: cut(result.tool.clone(), MAX_UNKNOWN_NAME_BYTES),
            served: info.map(|info| Served::of(info, limits)),
            origin,
            started,
            ended: SystemTime::now(),
            permission,
            granted,
            error_kind: result.error_kind,
            is_error: result.is_error,
            fuel_used: result.fuel_used,
            peak_memory: result.peak_memory_bytes,
            duration: result.duration,
            slot_wait: result.slot_wait,
            net: result.net,
            captured,
            timings: *timings,
            children,
        };
        match into {
            None => queue.push(ended),
            Some(siblings) => {
                let mut siblings = siblings.lock().unwrap_or_else(|e| e.into_inner());
                if siblings.len() < MAX_CHILDREN {
                    siblings.push(ended);
                }
            }
        }
    }
}

/// What a call's span and metrics are built from.
struct Ended {
    /// The name called (cut: a name the registry does not serve came from
    /// the model).
    tool: String,
    /// The tool, when the registry serves it.
    served: Option<Served>,
    origin: Option<Arc<CallOrigin>>,
    started: SystemTime,
    ended: SystemTime,
    permission: &'static str,
    granted: bool,
    error_kind: Option<ErrorKind>,
    is_error: bool,
    fuel_used: u64,
    peak_memory: u64,
    duration: Duration,
    slot_wait: Duration,
    net: NetUsage,
    /// The arguments and the output, when content is captured.
    captured: Option<(String, String)>,
    timings: Timings,
    /// The nested calls its tool made, each exported under it.
    children: Vec<Ended>,
}

/// What the span and metrics record of a tool the registry serves.
struct Served {
    component: String,
    digest: StringValue,
    fuel_limit: Option<u64>,
    memory_limit: usize,
    timeout: Duration,
    output_limit: usize,
}

impl Served {
    fn of(info: &ToolInfo, limits: Option<&Limits>) -> Self {
        let digest = match &info.source {
            crate::catalog::component::Source::Oci { digest, .. } => digest.clone().into(),
            _ => format!("blake3:{}", info.component_hash).into(),
        };
        Served {
            component: info.component.clone(),
            digest,
            fuel_limit: limits.and_then(|limits| limits.fuel),
            memory_limit: limits.map_or(0, |limits| limits.memory_bytes),
            timeout: limits.map_or(Duration::ZERO, |limits| limits.timeout),
            output_limit: limits.map_or(usize::MAX, |limits| limits.output_bytes),
        }
    }
}

/// The bounded queue to the export thread.
pub(super) struct Queue {
    jobs: SyncSender<Job>,
    worker: std::thread::Thread,
    dropped: AtomicU64,
}

enum Job {
    Ended(Box<Ended>),
    /// Answered once every call queued before it is recorded.
    Flush(SyncSender<()>),
}

impl Queue {
    /// Starts the export thread of `inner`, which stops when `inner` is gone.
    pub(super) fn start(inner: Weak<Inner>) -> Option<Queue> {
        let (jobs, queued) = std::sync::mpsc::sync_channel(QUEUE_CALLS);
        let worker = std::thread::Builder::new()
            .name("toolcage-telemetry".into())
            .spawn(move || work(&queued, &inner));
        match worker {
            Ok(worker) => Some(Queue {
                jobs,
                worker: worker.thread().clone(),
                dropped: AtomicU64::new(0),
            }),
            Err(e) => {
                tracing::error!("telemetry is off: its export thread did not start: {e}");
                None
            }
        }
    }

    fn push(&self, ended: Ended) {
        match self.jobs.try_send(Job::Ended(Box::new(ended))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed);
                if dropped.is_power_of_two() || dropped == 0 {
                    tracing::warn!(
                        dropped = dropped + 1,
                        "telemetry is behind: calls left out of spans and metrics (the exporters are slower than the calls)"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Waits until every call queued so far is recorded.
    pub(super) fn flush(&self) {
        let (done, recorded) = std::sync::mpsc::sync_channel(1);
        if self.jobs.send(Job::Flush(done)).is_ok() {
            self.worker.unpark();
            let _ = recorded.recv();
        }
    }

    /// Calls left out because the queue was full.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The export thread: records each queued call, sleeping when there are none.
fn work(queued: &Receiver<Job>, inner: &Weak<Inner>) {
    loop {
        match queued.try_recv() {
            Ok(Job::Ended(ended)) => match inner.upgrade() {
                Some(inner) => inner.record(&ended),
                None => return,
            },
            Ok(Job::Flush(done)) => {
                let _ = done.send(());
            }
            Err(TryRecvError::Empty) => std::thread::park_timeout(IDLE),
            Err(TryRecvError::Disconnected) => return,
        }
    }
}

impl Inner {
    /// The span and metrics of a call that ended.
    fn record(&self, ended: &Ended) {
        if let Some(tracer) = &self.tracer {
            self.span(tracer, ended, None);
        }
        self.count(ended);
    }

    /// The metrics of a call that ended, and of its nested calls.
    fn count(&self, ended: &Ended) {
        for child in &ended.children {
            self.count(child);
        }
        if let Some(metrics) = &self.metrics {
            let transport = ended.request_transport();
            let served = ended.served.as_ref();
            let tool = served.map(|_| ended.tool.as_str());
            let component = served.map(|served| served.component.as_str());
            let series = metrics.series(tool, component, ended.error_kind, transport);
            series.calls.add(1);
            series.duration.record(ended.duration.as_secs_f64());
            // What a run cost; a call refused before the sandbox cost none.
            if ended.duration > Duration::ZERO {
                series.fuel.record(ended.fuel_used);
                series.memory.record(ended.peak_memory);
                series.slot_wait.record(ended.slot_wait.as_secs_f64());
            }
        }
    }

    /// The call's span (the standard `execute_tool`, or MCP's `tools/call`
    /// when the frontend said where the request came from), with its
    /// stages as children or as attributes.
    fn span(&self, tracer: &SdkTracer, ended: &Ended, parent: Option<&Context>) {
        let context = ended.start_span(tracer, parent);
        if self.phase_spans {
            ended.phases(tracer, &context);
        }
        for child in &ended.children {
            self.span(tracer, child, Some(&context));
        }
        let span = context.span();
        span.set_attributes(ended.end_attributes(!self.phase_spans));
        if ended.is_error {
            let kind = ended.error_kind.map_or("error", ErrorKind::as_str);
            span.set_status(Status::error(kind));
        }
        span.end_with_timestamp(ended.ended);
    }
}

impl Ended {
    fn request_transport(&self) -> Option<Transport> {
        let request = self.origin.as_ref()?.request.as_ref()?;
        Some(request.transport)
    }

    /// Starts the span, at the call's start, under `parent` (a nested
    /// call's caller) or its origin; returns the context its children
    /// start in.
    fn start_span(&self, tracer: &SdkTracer, parent: Option<&Context>) -> Context {
        let origin = self.origin.as_deref();
        let request = origin.and_then(|origin| origin.request.as_ref());
        // A name the registry does not serve came from the model: it names
        // no span.
        let target = if self.served.is_some() {
            self.tool.as_str()
        } else {
            ""
        };
        let (name, kind) = match request {
            Some(request) if target.is_empty() => (request.method.to_string(), SpanKind::Server),
            Some(request) => (format!("{} {target}", request.method), SpanKind::Server),
            None if target.is_empty() => ("execute_tool".to_string(), SpanKind::Internal),
            None => (format!("execute_tool {target}"), SpanKind::Internal),
        };
        let mut attributes = Vec::with_capacity(24);
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        attributes.push(KeyValue::new("gen_ai.tool.name", self.tool.clone()));
        if let Some(request) = request {
            attributes.push(KeyValue::new("mcp.method.name", request.method));
            let id = request.request_id.clone();
            attributes.push(KeyValue::new("jsonrpc.request.id", id));
            if let Some(version) = &request.protocol_version {
                attributes.push(KeyValue::new("mcp.protocol.version", version.clone()));
            }
            if let Some(session) = &request.session_id {
                attributes.push(KeyValue::new("mcp.session.id", session.clone()));
            }
            let transport = request.transport.as_str();
            attributes.push(KeyValue::new("network.transport", transport));
        }
        if let Some(served) = &self.served {
            let component = served.component.clone();
            attributes.push(KeyValue::new("toolcage.component", component));
            let digest = served.digest.clone();
            attributes.push(KeyValue::new("toolcage.component.digest", digest));
        }
        let parent = match parent {
            Some(parent) => parent.clone(),
            None => origin.map_or_else(Context::new, |origin| origin.parent.clone()),
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(self.started)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        parent.with_span(span)
    }

    /// What the call's span records at its end; with `stages`, the
    /// validation's duration too (the slot wait and the run are always there).
    fn end_attributes(&self, stages: bool) -> Vec<KeyValue> {
        let mut attributes = Vec::with_capacity(20);
        if let Some(kind) = self.error_kind {
            attributes.push(KeyValue::new("toolcage.error.kind", kind.as_str()));
            // The MCP conventions' value for a result with isError.
            attributes.push(KeyValue::new("error.type", "tool_error"));
        }
        if let Some((start, end)) = self.timings.validated.filter(|_| stages) {
            let took = end.duration_since(start).unwrap_or_default();
            let key = "toolcage.call.validate.duration";
            attributes.push(KeyValue::new(key, took.as_secs_f64()));
        }
        attributes.extend([
            KeyValue::new("toolcage.permission", self.permission),
            KeyValue::new("toolcage.permission.granted", self.granted),
            KeyValue::new("toolcage.call.fuel.used", clamp(self.fuel_used)),
            KeyValue::new("toolcage.call.memory.peak", clamp(self.peak_memory)),
            KeyValue::new("toolcage.call.duration", self.duration.as_secs_f64()),
            KeyValue::new("toolcage.call.slot_wait", self.slot_wait.as_secs_f64()),
        ]);
        if let Some(served) = &self.served {
            if let Some(fuel) = served.fuel_limit {
                attributes.push(KeyValue::new("toolcage.call.fuel.limit", clamp(fuel)));
            }
            let memory = clamp(served.memory_limit as u64);
            attributes.push(KeyValue::new("toolcage.call.memory.limit", memory));
            let timeout = served.timeout.as_secs_f64();
            attributes.push(KeyValue::new("toolcage.call.timeout", timeout));
        }
        let net = &self.net;
        if net.requests > 0 || net.denied > 0 {
            attributes.extend([
                KeyValue::new("toolcage.net.requests", clamp(net.requests)),
                KeyValue::new("toolcage.net.denied", clamp(net.denied)),
                KeyValue::new("toolcage.net.bytes_out", clamp(net.bytes_out)),
                KeyValue::new("toolcage.net.bytes_in", clamp(net.bytes_in)),
            ]);
        }
        if let Some((arguments, output)) = &self.captured {
            let limit = self.served.as_ref().map_or(usize::MAX, |s| s.output_limit);
            attributes.extend([
                KeyValue::new("gen_ai.tool.call.arguments", cut(arguments.clone(), limit)),
                KeyValue::new("gen_ai.tool.call.result", cut(output.clone(), limit)),
            ]);
        }
        attributes
    }

    /// The child spans of the stages the call went through.
    fn phases(&self, tracer: &SdkTracer, context: &Context) {
        let child = |name: &'static str, start: SystemTime, end: SystemTime| {
            let mut span = tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(start)
                .start_with_context(tracer, context);
            span.end_with_timestamp(end);
        };
        if let Some((start, end)) = self.timings.validated {
            child("toolcage.validate", start, end);
        }
        if let Some(start) = self.timings.sandbox_start {
            // A call that found a slot free did not wait: no span for it.
            let waited = start + self.slot_wait;
            if !self.slot_wait.is_zero() {
                child("toolcage.slot_wait", start, waited);
            }
            child("toolcage.run", waited, start + self.duration);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended() -> Ended {
        Ended {
            tool: "t".into(),
            served: None,
            origin: None,
            started: SystemTime::now(),
            ended: SystemTime::now(),
            permission: "allow",
            granted: true,
            error_kind: None,
            is_error: false,
            fuel_used: 0,
            peak_memory: 0,
            duration: Duration::ZERO,
            slot_wait: Duration::ZERO,
            net: NetUsage::default(),
            captured: None,
            timings: Timings::default(),
            children: Vec::new(),
        }
    }

    /// A queue of `capacity` calls whose export thread never drains it.
    fn stalled(capacity: usize) -> (Queue, Receiver<Job>) {
        let (jobs, queued) = std::sync::mpsc::sync_channel(capacity);
        let queue = Queue {
            jobs,
            worker: std::thread::current(),
            dropped: AtomicU64::new(0),
        };
        (queue, queued)
    }

    #[test]
    fn calls_within_the_queue_wait_for_export() {
        let (queue, queued) = stalled(2);
        queue.push(ended());
        queue.push(ended());
        assert_eq!(queue.dropped(), 0);
        assert_eq!(queued.try_iter().count(), 2);
    }

    #[test]
    fn a_full_queue_drops_calls_and_counts_them_without_waiting() {
        let (queue, queued) = stalled(2);
        let started = std::time::Instant::now();
        for _ in 0..5 {
            queue.push(ended());
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a push never waits"
        );
        assert_eq!(queue.dropped(), 3);
        assert_eq!(queued.try_iter().count(), 2);
        // Once the export thread is gone, a call is neither kept nor counted.
        drop(queued);
        queue.push(ended());
        assert_eq!(queue.dropped(), 3);
    }

    #[test]
    fn a_flush_waits_for_the_calls_queued_before_it() {
        let (queue, queued) = stalled(4);
        queue.push(ended());
        let exporter = std::thread::spawn(move || work_without_inner(&queued));
        queue.flush();
        assert_eq!(
            exporter.join().unwrap(),
            1,
            "the call before the flush was taken first"
        );
    }

    /// An export thread that counts the calls it takes until a flush.
    fn work_without_inner(queued: &Receiver<Job>) -> usize {
        let mut taken = 0;
        loop {
            match queued.recv() {
                Ok(Job::Ended(_)) => taken += 1,
                Ok(Job::Flush(done)) => {
                    done.send(()).unwrap();
                    return taken;
                }
                Err(_) => return taken,
            }
        }
    }
}
