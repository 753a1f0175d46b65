//! OpenTelemetry spans and metrics of calls (the `otel` feature).
//!
//! Every call made under a [`CallPolicy`] with telemetry (and so every
//! [`Runner`](crate::agent::Runner), CLI and MCP call) becomes one span,
//! whose stages are its attributes (the validation's, the slot wait's and
//! the run's durations), with child spans for them when the operator asks
//! for that detail ([`TelemetryBuilder::phase_spans`]); and it is counted
//! in metrics: what it cost in fuel, memory and time, against the limits it
//! ran under. Under MCP the span
//! follows the OpenTelemetry GenAI MCP conventions (`tools/call {tool}`, kind
//! SERVER, its parent the client's trace context from `_meta`); elsewhere it
//! is the GenAI `execute_tool {tool}` span.
//!
//! Threat model: telemetry leaves the sandbox's host, to collectors and
//! dashboards that more people can read than the tools' inputs were meant
//! for. So:
//! - arguments and results are recorded only when the operator opts in
//!   ([`TelemetryBuilder::capture_content`], or
//!   `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`), cut to the
//!   tool's output limit, after the host redacted its secrets from results;
//! - metric attributes are only the tool (a name the registry serves, never
//!   one a model made up), the component, the error type and the transport
//!   (and a task's status, a state store's operation and backend):
//!   never a session or request id, arguments or paths, so a client cannot
//!   grow the number of series;
//! - a collector that refuses, hangs or is slow never slows a call: spans and
//!   metrics are handed to the SDK's own threads, which drop what they cannot
//!   send, and [`Telemetry::shutdown`] waits a bounded time.
//!
//! Spans are made with the OpenTelemetry API directly rather than through
//! `tracing-opentelemetry`: a call's span needs its kind, a remote parent and
//! its timings set exactly, costs a few microseconds this way (a call costs
//! about 15), and is independent of the log filter by construction, so
//! `--log-level error` never drops one.

mod calls;
mod otlp;
mod prometheus;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Histogram, Meter, MeterProvider as _,
};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use calls::QUEUE_CALLS;
pub use otlp::{EnvSettings, TelemetryError};
pub use prometheus::PrometheusReader;

use crate::call::{CallPolicy, Tracer};
use crate::catalog::live::LiveRegistry;
use crate::sandbox::engine::Runtime;
use crate::sandbox::outcome::ErrorKind;

/// The instrumentation scope's name.
const SCOPE: &str = "toolcage";

/// The bucket boundaries the MCP conventions give `mcp.server.operation.duration`, in seconds.
const MCP_DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// toolcage's own call durations and slot waits, in seconds: calls take tens
/// of microseconds to minutes.
const CALL_SECONDS_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0,
    30.0, 120.0,
];
/// Fuel, in units of guest instructions (roughly).
const FUEL_BUCKETS: [f64; 11] = [1e3, 1e4, 1e5, 1e6, 1e7, 5e7, 1e8, 5e8, 1e9, 5e9, 1e10];
/// Peak linear memory, in bytes: one Wasm page (64 KiB) to 4 GiB.
const MEMORY_BUCKETS: [f64; 12] = [
    65536.0,
    262144.0,
    1048576.0,
    2097152.0,
    4194304.0,
    8388608.0,
    16777216.0,
    33554432.0,
    67108864.0,
    134217728.0,
    536870912.0,
    4294967296.0,
];

/// Where calls report their spans and metrics. Cheap to clone. Built by
/// [`Telemetry::builder`] over the embedder's providers, or by
/// [`Telemetry::from_env`] from the standard `OTEL_*` variables.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    tracer: Option<SdkTracer>,
    metrics: Option<Instruments>,
    capture_content: bool,
    phase_spans: bool,
    /// The export queue to the thread that builds calls' spans and metrics;
    /// none when nothing is recorded.
    queue: Option<calls::Queue>,
    /// Held to flush and shut down; `None` when the embedder owns them.
    providers: Providers,
    prometheus: Option<PrometheusReader>,
}

#[derive(Default)]
struct Providers {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces", &self.inner.tracer.is_some())
            .field("metrics", &self.inner.metrics.is_some())
            .field("capture_content", &self.inner.capture_content)
            .field("prometheus", &self.inner.prometheus.is_some())
            .field("dropped_calls", &self.dropped_calls())
            .finish()
    }
}

/// Builds a [`Telemetry`]. By default: no spans, no metrics, no content
/// captured; each is turned on by the method of its name.
#[derive(Default)]
pub struct TelemetryBuilder {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    capture_content: bool,
    phase_spans: bool,
    prometheus: Option<PrometheusReader>,
    owns_providers: bool,
}

impl TelemetryBuilder {
    /// Makes spans with a tracer of `provider`; public as
    /// [`SdkProviders::tracer_provider`](crate::integration::otel::SdkProviders::tracer_provider).
    pub(crate) fn with_tracer_provider(mut self, provider: SdkTracerProvider) -> Self {
        self.tracer_provider = Some(provider);
        self
    }

    /// Records metrics with a meter of `provider`; public as
    /// [`SdkProviders::meter_provider`](crate::integration::otel::SdkProviders::meter_provider).
    pub(crate) fn with_meter_provider(mut self, provider: SdkMeterProvider) -> Self {
        self.meter_provider = Some(provider);
        self
    }

    /// Records each call's arguments (`gen_ai.tool.call.arguments`) and
    /// result (`gen_ai.tool.call.result`) on its span, each cut to the
    /// tool's output limit. Default: false, as the GenAI conventions ask:
    /// they may hold what the user would not put in a trace.
    pub fn capture_content(mut self, capture: bool) -> Self {
        self.capture_content = capture;
        self
    }

    /// Adds to each call's span a child span per stage it went through
    /// (`toolcage.validate`, `toolcage.slot_wait`, `toolcage.run`). Default:
    /// false, and the stages' durations are attributes of the call's span
    /// (`toolcage.call.validate.duration`, `toolcage.call.slot_wait`,
    /// `toolcage.call.duration`): three spans cost a call about three times
    /// what one does, in the call and in the exporter.
    pub fn phase_spans(mut self, phase_spans: bool) -> Self {
        self.phase_spans = phase_spans;
        self
    }

    /// The reader (registered with the meter provider) that
    /// [`Telemetry::prometheus_text`] renders. Default: none.
    pub fn prometheus(mut self, reader: PrometheusReader) -> Self {
        self.prometheus = Some(reader);
        self
    }

    /// Builds it.
    pub fn build(self) -> Telemetry {
        let tracer = self
            .tracer_provider
            .as_ref()
            .map(|provider| provider.tracer(SCOPE));
        let metrics = self
            .meter_provider
            .as_ref()
            .map(|provider| Instruments::new(&provider.meter(SCOPE)));
        let providers = if self.owns_providers {
            Providers {
                tracer: self.tracer_provider,
                meter: self.meter_provider,
            }
        } else {
            Providers::default()
        };
        let records = tracer.is_some() || metrics.is_some();
        Telemetry {
            inner: Arc::new_cyclic(|inner| Inner {
                queue: records
                    .then(|| calls::Queue::start(inner.clone()))
                    .flatten(),
                tracer,
                metrics,
                capture_content: self.capture_content,
                phase_spans: self.phase_spans,
                providers,
                prometheus: self.prometheus,
            }),
        }
    }
}

impl Telemetry {
    /// A builder with every default (nothing recorded).
    pub fn builder() -> TelemetryBuilder {
        TelemetryBuilder::default()
    }

    /// Whether calls make spans.
    pub fn traces(&self) -> bool {
        self.inner.tracer.is_some()
    }

    /// Whether calls are counted in metrics.
    pub fn metrics(&self) -> bool {
        self.inner.metrics.is_some()
    }

    /// The metrics now, in Prometheus' text format (version 0.0.4), when a
    /// [`PrometheusReader`] was given.
    pub fn prometheus_text(&self) -> Option<String> {
        let reader = self.inner.prometheus.as_ref()?;
        self.flush();
        Some(reader.render())
    }

    /// Waits until every call that ended so far has its span and metrics
    /// recorded: they are built off the call's thread, a few milliseconds
    /// later (see [`QUEUE_CALLS`]). Then the providers' own flush sends them.
    pub fn flush(&self) {
        if let Some(queue) = &self.inner.queue {
            queue.flush();
        }
    }

    /// How many calls were left out of spans and metrics because the export
    /// queue was full (the exporters slower than the calls).
    pub fn dropped_calls(&self) -> u64 {
        self.inner.queue.as_ref().map_or(0, calls::Queue::dropped)
    }

    /// The call path's tracer for calls from `origin`; none when this
    /// telemetry records nothing, so that its calls pay nothing for it.
    pub(crate) fn tracer(&self, origin: Option<Arc<CallOrigin>>) -> Option<Arc<dyn Tracer>> {
        self.inner.queue.as_ref()?;
        Some(Arc::new(calls::CallTracer::new(self.clone(), origin)))
    }

    /// Reports, as gauges, how many of `runtime`'s sandbox slots are busy
    /// (`toolcage.slots.busy`) and how many calls are stuck in a file
    /// operation after their caller gave up (`toolcage.calls.stuck`). The
    /// meter holds `runtime` until it is shut down.
    pub fn observe_runtime(&self, runtime: &Runtime) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        let busy = runtime.clone();
        metrics
            .meter
            .u64_observable_gauge("toolcage.slots.busy")
            .with_unit("{slot}")
            .with_description("Sandbox slots running a call now.")
            .with_callback(move |gauge| gauge.observe(busy.busy_slots() as u64, &[]))
            .build();
        let stuck = runtime.clone();
        metrics
            .meter
            .u64_observable_gauge("toolcage.calls.stuck")
            .with_unit("{call}")
            .with_description(
                "Calls given up on while their guest was blocked in a file operation.",
            )
            .with_callback(move |gauge| gauge.observe(stuck.stuck_calls() as u64, &[]))
            .build();
    }

    /// Reports `registry`'s loads and reloads (`toolcage.reloads`) and the
    /// component files they rejected (`toolcage.files.rejected`), as
    /// counters read at each collection. The meter holds `registry` until it
    /// is shut down.
    pub fn observe_reloads(&self, registry: &LiveRegistry) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        let reloads = registry.clone();
        metrics
            .meter
            .u64_observable_counter("toolcage.reloads")
            .with_unit("{reload}")
            .with_description("Loads and reloads of the tools.")
            .with_callback(move |counter| counter.observe(reloads.reloads(), &[]))
            .build();
        let rejected = registry.clone();
        metrics
            .meter
            .u64_observable_counter("toolcage.files.rejected")
            .with_unit("{file}")
            .with_description("Component files a load or reload rejected.")
            .with_callback(move |counter| counter.observe(rejected.rejected_files(), &[]))
            .build();
    }

    /// `store` with each of its operations measured
    /// (`toolcage.state.operation.duration`, `toolcage.state.errors`, by
    /// operation and `backend`); `store` itself when no metrics are kept.
    pub fn metered_store(
        &self,
        store: Arc<dyn crate::state::StateStore>,
        backend: &'static str,
    ) -> Arc<dyn crate::state::StateStore> {
        match &self.inner.metrics {
            Some(metrics) => Arc::new(store::MeteredStore::new(store, backend, &metrics.meter)),
            None => store,
        }
    }

    /// Reports, as a gauge (`toolcage.tasks`, by `toolcage.task.status`),
    /// how many tasks this server holds in each state, as `counts` says.
    pub(crate) fn observe_tasks(
        &self,
        counts: impl Fn() -> Vec<(&'static str, u64)> + Send + Sync + 'static,
    ) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        metrics
            .meter
            .u64_observable_gauge("toolcage.tasks")
            .with_unit("{task}")
            .with_description("Tasks this server holds, by status.")
            .with_callback(move |gauge| {
                for (status, count) in counts() {
                    gauge.observe(count, &[KeyValue::new("toolcage.task.status", status)]);
                }
            })
            .build();
    }

    /// Records one MCP request in `mcp.server.operation.duration`.
    /// `tool` is a tool the registry serves (never a name a client made
    /// up); `error_type` is `tool_error` or the JSON-RPC error code.
    pub fn record_operation(
        &self,
        request: &ServerRequest,
        tool: Option<&str>,
        error_type: Option<&str>,
        duration: Duration,
    ) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        let mut attributes = Vec::with_capacity(4);
        attributes.push(KeyValue::new("mcp.method.name", request.method));
        if let Some(tool) = tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
        }
        if let Some(error) = error_type {
            attributes.push(KeyValue::new("error.type", error.to_string()));
        }
        attributes.push(KeyValue::new(
            "network.transport",
            request.transport.as_str(),
        ));
        metrics
            .operation_duration
            .record(duration.as_secs_f64(), &attributes);
    }

    /// Flushes what is pending and stops the exporters this telemetry
    /// started ([`Telemetry::from_env`]; an embedder's own providers are
    /// theirs to shut down), waiting at most `deadline`. Returns how it went
    /// (for one log line): an error when something could not be sent.
    pub fn shutdown(&self, deadline: Duration) -> Result<(), TelemetryError> {
        self.flush();
        otlp::shutdown(
            self.inner.providers.tracer.clone(),
            self.inner.providers.meter.clone(),
            deadline,
        )
    }
}

impl CallPolicy {
    /// Reports each call made under this policy as a span and in metrics
    /// to `telemetry`, from `origin` (its spans' parent; none: each call's
    /// span is a root). Default: none.
    pub fn telemetry(mut self, telemetry: &Telemetry, origin: Option<CallOrigin>) -> Self {
        self.tracer = telemetry.tracer(origin.map(Arc::new));
        self
    }
}

/// Where a call came from: the caller's trace context, and for a request a
/// server received, what the MCP conventions record of it.
#[derive(Clone, Debug, Default)]
pub struct CallOrigin {
    parent: Context,
    request: Option<ServerRequest>,
}

impl CallOrigin {
    /// An origin with no parent span (the call's span is a root).
    pub fn new() -> Self {
        CallOrigin::default()
    }

    /// The W3C trace context (`traceparent`, `tracestate`) and `baggage`
    /// headers' values, such as MCP's `params._meta` fields. A malformed or
    /// missing `traceparent` leaves the call a root span.
    pub fn from_w3c(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Self {
        struct Carrier<'a>([(&'static str, Option<&'a str>); 3]);
        impl Extractor for Carrier<'_> {
            fn get(&self, key: &str) -> Option<&str> {
                self.0.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v)
            }
            fn keys(&self) -> Vec<&str> {
                self.0
                    .iter()
                    .filter(|(_, v)| v.is_some())
                    .map(|(k, _)| *k)
                    .collect()
            }
        }
        let carrier = Carrier([
            ("traceparent", traceparent),
            ("tracestate", tracestate),
            ("baggage", baggage),
        ]);
        let context = TraceContextPropagator::new().extract(&carrier);
        let parent = BaggagePropagator::new().extract_with_context(&context, &carrier);
        CallOrigin {
            parent,
            request: None,
        }
    }

    /// The request a server received, if any.
    pub fn server_request(&self) -> Option<&ServerRequest> {
        self.request.as_ref()
    }

    /// The request a server received, which makes the call's span the
    /// server's (`{method} {tool}`, kind SERVER).
    pub fn request(mut self, request: ServerRequest) -> Self {
        self.request = Some(request);
        self
    }
}

/// An MCP request, as the conventions record it.
#[derive(Clone, Debug)]
pub struct ServerRequest {
    /// `mcp.method.name`, such as `tools/call`.
    pub method: &'static str,
    /// `jsonrpc.request.id`.
    pub request_id: String,
    /// `mcp.protocol.version`, when negotiated.
    pub protocol_version: Option<String>,
    /// `mcp.session.id`, when the transport has sessions.
    pub session_id: Option<String>,
    /// `network.transport`.
    pub transport: Transport,
}

/// How a request arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A pipe: MCP over stdio.
    Pipe,
    /// TCP: MCP over Streamable HTTP.
    Tcp,
}

impl Transport {
    /// `pipe` or `tcp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

struct Instruments {
    meter: Meter,
    /// The call instruments bound to each attribute set seen, by tool:
    /// bounded by the tools served, their components, the error kinds and
    /// the transports.
    series: Mutex<HashMap<String, Vec<Arc<Series>>>>,
    operation_duration: Histogram<f64>,
    calls: Counter<u64>,
    duration: Histogram<f64>,
    fuel: Histogram<u64>,
    memory: Histogram<u64>,
    slot_wait: Histogram<f64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        Instruments {
            operation_duration: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("MCP request duration as observed on the receiver.")
                .with_boundaries(MCP_DURATION_BUCKETS.to_vec())
                .build(),
            calls: meter
                .u64_counter("toolcage.calls")
                .with_unit("{call}")
                .with_description("Tool calls, by tool and by error type.")
                .build(),
            duration: meter
                .f64_histogram("toolcage.call.duration")
                .with_unit("s")
                .with_description("Wall time of a tool call, from the sandbox's view.")
                .with_boundaries(CALL_SECONDS_BUCKETS.to_vec())
                .build(),
            fuel: meter
                .u64_histogram("toolcage.call.fuel")
                .with_unit("{fuel}")
                .with_description("Fuel a tool call consumed.")
                .with_boundaries(FUEL_BUCKETS.to_vec())
                .build(),
            memory: meter
                .u64_histogram("toolcage.call.memory.peak")
                .with_unit("By")
                .with_description("The most linear memory a tool call held.")
                .with_boundaries(MEMORY_BUCKETS.to_vec())
                .build(),
            slot_wait: meter
                .f64_histogram("toolcage.call.slot_wait")
                .with_unit("s")
                .with_description("Time a tool call waited for a free sandbox slot.")
                .with_boundaries(CALL_SECONDS_BUCKETS.to_vec())
                .build(),
            meter: meter.clone(),
            series: Mutex::default(),
        }
    }

    /// The instruments of the series of a call to `info`'s tool (none: a
    /// name the registry does not serve, which came from the model and never
    /// becomes a label value) that ended with `error`, over `transport`.
    fn series(
        &self,
        tool: Option<&str>,
        component: Option<&str>,
        error: Option<ErrorKind>,
        transport: Option<Transport>,
    ) -> Arc<Series> {
        let served = tool.is_some();
        let (tool, component) = (tool.unwrap_or(""), component.unwrap_or(""));
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let of_tool = match series.get_mut(tool) {
            Some(of_tool) => of_tool,
            None => series.entry(tool.to_string()).or_default(),
        };
        if let Some(found) = of_tool
            .iter()
            .find(|s| s.component == component && s.error == error && s.transport == transport)
        {
            return found.clone();
        }
        let mut attributes = vec![KeyValue::new("gen_ai.tool.name", tool.to_string())];
        if served {
            attributes.push(KeyValue::new("toolcage.component", component.to_string()));
        }
        if let Some(kind) = error {
            attributes.push(KeyValue::new("error.type", kind.as_str()));
        }
        if let Some(transport) = transport {
            attributes.push(KeyValue::new("network.transport", transport.as_str()));
        }
        let bound = Arc::new(Series {
            component: component.to_string(),
            error,
            transport,
            calls: self.calls.bind(&attributes),
            duration: self.duration.bind(&attributes),
            fuel: self.fuel.bind(&attributes),
            memory: self.memory.bind(&attributes),
            slot_wait: self.slot_wait.bind(&attributes),
        });
        of_tool.push(bound.clone());
        bound
    }
}

/// The call instruments, bound to one series' attributes.
struct Series {
    component: String,
    error: Option<ErrorKind>,
    transport: Option<Transport>,
    calls: BoundCounter<u64>,
    duration: BoundHistogram<f64>,
    fuel: BoundHistogram<u64>,
    memory: BoundHistogram<u64>,
    slot_wait: BoundHistogram<f64>,
}

/// How much of a tool name the registry does not serve a span keeps.
const MAX_UNKNOWN_NAME_BYTES: usize = 256;

/// OpenTelemetry integers are signed.
fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `text` cut to at most `limit` bytes, at a character boundary.
fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}
