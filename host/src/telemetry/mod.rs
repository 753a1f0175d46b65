//! OpenTelemetry spans and metrics of calls (the `otel` feature).
//!
//! Every call a [`Runner`](crate::agent::Runner) makes (and so every CLI and
//! MCP call) becomes one span, with child spans for validation, the wait for
//! a sandbox slot and the run, and is counted in metrics: what it cost in
//! fuel, memory and time, against the limits it ran under. Under MCP the span
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
//!   one a model made up), the component, the error type and the transport:
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

mod otlp;
mod prometheus;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Histogram, Meter, MeterProvider as _,
};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, StringValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use otlp::{EnvSettings, TelemetryError};
pub use prometheus::PrometheusReader;

use crate::call::Timings;
use crate::{CallResult, ErrorKind, LiveRegistry, Registry, Runtime, ToolInfo};

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
        Telemetry {
            inner: Arc::new(Inner {
                tracer,
                metrics,
                capture_content: self.capture_content,
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
        self.inner.prometheus.as_ref().map(PrometheusReader::render)
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
        otlp::shutdown(
            self.inner.providers.tracer.clone(),
            self.inner.providers.meter.clone(),
            deadline,
        )
    }
}

/// A call being traced, from its start to its result: its span (the
/// standard `execute_tool`, or MCP's `tools/call` when the frontend said
/// where the request came from) and its metrics.
pub(crate) struct Traced {
    telemetry: Telemetry,
    /// The call's span, in the context its children start in; `None`
    /// without traces.
    context: Option<Context>,
    /// The transport of the request, for a server's call.
    transport: Option<Transport>,
    /// Filled by the call path when the span wants child spans.
    pub timings: Option<Arc<Mutex<Timings>>>,
    /// The arguments, kept only when content is captured.
    arguments: Option<String>,
    /// The permission rule that applied: `allow`, `ask` or `deny`.
    permission: &'static str,
}

impl Telemetry {
    /// Starts tracing a call to `tool` in `registry` with `arguments`,
    /// whose permission rule is `permission`, from `origin`.
    pub(crate) fn trace_call(
        &self,
        registry: &Registry,
        tool: &str,
        arguments: impl FnOnce() -> String,
        permission: &'static str,
        origin: Option<&CallOrigin>,
    ) -> Traced {
        let request = origin.and_then(|origin| origin.request.as_ref());
        let context = self
            .inner
            .tracer
            .as_ref()
            .map(|tracer| call_span(tracer, tool, registry.tool(tool), origin));
        Traced {
            timings: context.as_ref().map(|_| Arc::default()),
            context,
            transport: request.map(|r| r.transport),
            arguments: self.inner.capture_content.then(arguments),
            permission,
            telemetry: self.clone(),
        }
    }
}

/// The span of a call to `tool` (`info` when the registry serves it) from
/// `origin`, in the context its children start in.
fn call_span(
    tracer: &SdkTracer,
    tool: &str,
    info: Option<&ToolInfo>,
    origin: Option<&CallOrigin>,
) -> Context {
    let request = origin.and_then(|origin| origin.request.as_ref());
    // A name the registry does not serve came from the model: it names no
    // span, and is kept short.
    let target = if info.is_some() { tool } else { "" };
    let (name, kind) = match request {
        Some(request) if target.is_empty() => (request.method.to_string(), SpanKind::Server),
        Some(request) => (format!("{} {target}", request.method), SpanKind::Server),
        None if target.is_empty() => ("execute_tool".to_string(), SpanKind::Internal),
        None => (format!("execute_tool {target}"), SpanKind::Internal),
    };
    let mut attributes = Vec::with_capacity(24);
    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    attributes.push(KeyValue::new(
        "gen_ai.tool.name",
        cut(tool.to_string(), MAX_UNKNOWN_NAME_BYTES),
    ));
    if let Some(request) = request {
        attributes.push(KeyValue::new("mcp.method.name", request.method));
        attributes.push(KeyValue::new(
            "jsonrpc.request.id",
            request.request_id.clone(),
        ));
        if let Some(version) = &request.protocol_version {
            attributes.push(KeyValue::new("mcp.protocol.version", version.clone()));
        }
        if let Some(session) = &request.session_id {
            attributes.push(KeyValue::new("mcp.session.id", session.clone()));
        }
        attributes.push(KeyValue::new(
            "network.transport",
            request.transport.as_str(),
        ));
    }
    if let Some(info) = info {
        attributes.push(KeyValue::new("toolcage.component", info.component.clone()));
        attributes.push(KeyValue::new("toolcage.component.digest", digest(info)));
    }
    let parent = origin.map_or_else(Context::new, |origin| origin.parent.clone());
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    parent.with_span(span)
}

impl Traced {
    /// Ends the call's span with `result` (`granted`: whether the
    /// permission checks let it run), with a child span for each phase it
    /// went through, and counts it.
    pub(crate) fn finish(mut self, registry: &Registry, result: &CallResult, granted: bool) {
        let entry = registry.entry(&result.tool);
        let info = entry.map(|entry| &entry.info);
        let limits = entry.map(|entry| &entry.component.sandbox.grants.limits);
        if let Some(timings) = &self.timings {
            let timings = *timings.lock().unwrap_or_else(|e| e.into_inner());
            self.phases(&timings, result);
        }
        let inner = &self.telemetry.inner;
        if let Some(context) = &self.context {
            let span = context.span();
            let mut attributes = Vec::with_capacity(16);
            if let Some(kind) = result.error_kind {
                attributes.push(KeyValue::new("toolcage.error.kind", kind.as_str()));
                // The MCP conventions' value for a result with isError.
                attributes.push(KeyValue::new("error.type", "tool_error"));
            }
            attributes.push(KeyValue::new("toolcage.permission", self.permission));
            attributes.push(KeyValue::new("toolcage.permission.granted", granted));
            attributes.push(KeyValue::new(
                "toolcage.call.fuel.used",
                clamp(result.fuel_used),
            ));
            attributes.push(KeyValue::new(
                "toolcage.call.memory.peak",
                clamp(result.peak_memory_bytes),
            ));
            attributes.push(KeyValue::new(
                "toolcage.call.duration",
                result.duration.as_secs_f64(),
            ));
            attributes.push(KeyValue::new(
                "toolcage.call.slot_wait",
                result.slot_wait.as_secs_f64(),
            ));
            if let Some(limits) = limits {
                if let Some(fuel) = limits.fuel {
                    attributes.push(KeyValue::new("toolcage.call.fuel.limit", clamp(fuel)));
                }
                attributes.push(KeyValue::new(
                    "toolcage.call.memory.limit",
                    clamp(limits.memory_bytes as u64),
                ));
                attributes.push(KeyValue::new(
                    "toolcage.call.timeout",
                    limits.timeout.as_secs_f64(),
                ));
            }
            let net = &result.net;
            if net.requests > 0 || net.denied > 0 {
                attributes.push(KeyValue::new("toolcage.net.requests", clamp(net.requests)));
                attributes.push(KeyValue::new("toolcage.net.denied", clamp(net.denied)));
                attributes.push(KeyValue::new(
                    "toolcage.net.bytes_out",
                    clamp(net.bytes_out),
                ));
                attributes.push(KeyValue::new("toolcage.net.bytes_in", clamp(net.bytes_in)));
            }
            if inner.capture_content {
                let limit = limits.map_or(usize::MAX, |l| l.output_bytes);
                attributes.push(KeyValue::new(
                    "gen_ai.tool.call.arguments",
                    cut(self.arguments.take().unwrap_or_default(), limit),
                ));
                attributes.push(KeyValue::new(
                    "gen_ai.tool.call.result",
                    cut(result.output.clone(), limit),
                ));
            }
            span.set_attributes(attributes);
            if result.is_error {
                let kind = result.error_kind.map_or("error", ErrorKind::as_str);
                span.set_status(Status::error(kind));
            }
            span.end();
        }
        if let Some(metrics) = &inner.metrics {
            let series = metrics.series(info, result.error_kind, self.transport);
            series.calls.add(1);
            series.duration.record(result.duration.as_secs_f64());
            // What a run cost; a call refused before the sandbox cost none.
            if result.duration > Duration::ZERO {
                series.fuel.record(result.fuel_used);
                series.memory.record(result.peak_memory_bytes);
                series.slot_wait.record(result.slot_wait.as_secs_f64());
            }
        }
    }

    /// Records the child spans of the phases `timings` saw.
    fn phases(&self, timings: &Timings, result: &CallResult) {
        let (Some(context), Some(tracer)) = (&self.context, &self.telemetry.inner.tracer) else {
            return;
        };
        let child = |name: &'static str, start: SystemTime, end: SystemTime| {
            let mut span = tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(start)
                .start_with_context(tracer, context);
            span.end_with_timestamp(end);
        };
        if let Some((start, end)) = timings.validated {
            child("toolcage.validate", start, end);
        }
        if let Some(start) = timings.sandbox_start {
            // A call that found a slot free did not wait: no span for it.
            let waited = start + result.slot_wait;
            if !result.slot_wait.is_zero() {
                child("toolcage.slot_wait", start, waited);
            }
            child("toolcage.run", waited, start + result.duration);
        }
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
        info: Option<&ToolInfo>,
        error: Option<ErrorKind>,
        transport: Option<Transport>,
    ) -> Arc<Series> {
        let (tool, component) = info.map_or(("", ""), |info| {
            (info.descriptor.name.as_str(), info.component.as_str())
        });
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
        if info.is_some() {
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

/// The component's digest: the OCI manifest's for a pulled component,
/// else the BLAKE3 of its bytes.
fn digest(info: &ToolInfo) -> StringValue {
    match &info.source {
        crate::Source::Oci { digest, .. } => digest.clone().into(),
        _ => format!("blake3:{}", info.component_hash).into(),
    }
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
