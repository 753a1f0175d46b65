//! Telemetry from the standard `OTEL_*` variables: OTLP exporters on the
//! SDK's own threads, and a bounded shutdown.
//!
//! Nothing starts unless the variables ask: without an OTLP endpoint there
//! is no exporter thread and no connection. Export runs on the SDK's batch
//! span processor and periodic metric reader threads, with a blocking HTTP
//! client, so a collector that refuses, hangs or answers slowly costs those
//! threads time, never a call; spans past the queue (2048 by default) are
//! dropped, not waited for.

use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::{PrometheusReader, Telemetry, TelemetryBuilder};

/// Why telemetry could not start, or could not send everything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An `OTEL_*` variable has a value toolcage cannot use.
    #[error("{variable}={value}: {why}")]
    Variable {
        /// The variable.
        variable: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// An OTLP exporter could not be built.
    #[error("the OTLP {signal} exporter: {message}")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The SDK's message.
        message: String,
    },
    /// Shutting down did not send everything in time; the rest was dropped.
    #[error("dropped what was not sent within {}s: {message}", deadline.as_secs_f64())]
    Dropped {
        /// How long it waited.
        deadline: Duration,
        /// What the exporters said, or that they did not answer.
        message: String,
    },
}

/// What [`Telemetry::from_env`] turns on besides what the variables ask.
/// By default: nothing more.
#[derive(Debug, Clone, Default)]
pub struct EnvSettings {
    prometheus: bool,
}

impl EnvSettings {
    /// Settings with every default.
    pub fn new() -> Self {
        EnvSettings::default()
    }

    /// Keeps metrics for [`Telemetry::prometheus_text`] (`serve
    /// --metrics`), whether or not they are exported over OTLP. Default:
    /// false.
    pub fn prometheus(mut self, on: bool) -> Self {
        self.prometheus = on;
        self
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

fn is_true(name: &str) -> bool {
    var(name).is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
}

/// Whether the variables ask for OTLP export of `signal` (`TRACES` or
/// `METRICS`).
fn exports(signal: &str) -> bool {
    let endpoint = var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let exporter = var(&format!("OTEL_{signal}_EXPORTER"));
    endpoint.is_some()
        && !is_true("OTEL_SDK_DISABLED")
        && !exporter.is_some_and(|e| e.trim().eq_ignore_ascii_case("none"))
}

/// The OTLP protocol for `signal`: HTTP with protobuf unless a variable
/// says JSON. gRPC is not built in.
fn protocol(signal: &str) -> Result<Protocol, TelemetryError> {
    let signal_variable = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
    let (variable, value) = match var(&signal_variable) {
        Some(value) => (signal_variable, value),
        None => match var("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(value) => ("OTEL_EXPORTER_OTLP_PROTOCOL".to_string(), value),
            None => return Ok(Protocol::HttpBinary),
        },
    };
    match value.trim() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        other => Err(TelemetryError::Variable {
            variable,
            value: other.to_string(),
            why:
                "toolcage exports OTLP over HTTP only: use http/protobuf (the default) or http/json"
                    .into(),
        }),
    }
}

/// The resource: `service.name` from `OTEL_SERVICE_NAME`, else
/// `OTEL_RESOURCE_ATTRIBUTES`, else `toolcage`.
fn resource() -> Resource {
    let resource = Resource::builder().build();
    let named = resource
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        resource
    } else {
        Resource::builder().with_service_name("toolcage").build()
    }
}

impl Telemetry {
    /// Telemetry as the standard variables ask, or `None` when they ask for
    /// nothing (and `settings` neither): then no thread starts and no
    /// connection is made.
    ///
    /// - Spans are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` or
    ///   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, metrics when it or
    ///   `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is; `OTEL_SDK_DISABLED=true`
    ///   or `OTEL_TRACES_EXPORTER`/`OTEL_METRICS_EXPORTER=none` turn export
    ///   off.
    /// - OTLP over HTTP, protobuf unless `OTEL_EXPORTER_OTLP_PROTOCOL` (or
    ///   the signal's variable) says `http/json`; `grpc` is refused. The
    ///   SDK reads the rest: headers, timeout, `OTEL_BSP_*`,
    ///   `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_RESOURCE_ATTRIBUTES`.
    /// - `service.name` defaults to `toolcage`.
    /// - `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` records
    ///   arguments and results (see [`TelemetryBuilder::capture_content`]).
    /// - `TOOLCAGE_OTEL_PHASE_SPANS=true` adds a child span per stage of a
    ///   call (see [`TelemetryBuilder::phase_spans`]).
    ///
    /// Call [`Telemetry::shutdown`] before exiting to send what is pending.
    pub fn from_env(settings: EnvSettings) -> Result<Option<Telemetry>, TelemetryError> {
        let (traces, metrics) = (exports("TRACES"), exports("METRICS"));
        if !traces && !metrics && !settings.prometheus {
            return Ok(None);
        }
        // The exporters' HTTP client (reqwest on rustls, without a provider
        // of its own) needs one for `https` endpoints: ring, unless the
        // process chose one already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resource = resource();
        let mut builder = TelemetryBuilder {
            capture_content: is_true("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
            phase_spans: is_true("TOOLCAGE_OTEL_PHASE_SPANS"),
            owns_providers: true,
            ..TelemetryBuilder::default()
        };
        if traces {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(protocol("TRACES")?)
                .build()
                .map_err(|e| TelemetryError::Exporter {
                    signal: "traces",
                    message: e.to_string(),
                })?;
            let provider = SdkTracerProvider::builder()
                .with_resource(resource.clone())
                .with_batch_exporter(exporter)
                .build();
            builder.tracer_provider = Some(provider);
        }
        let mut meter = SdkMeterProvider::builder().with_resource(resource);
        if metrics {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(protocol("METRICS")?)
                .build()
                .map_err(|e| TelemetryError::Exporter {
                    signal: "metrics",
                    message: e.to_string(),
                })?;
            meter = meter.with_periodic_exporter(exporter);
        }
        if settings.prometheus {
            let reader = PrometheusReader::new();
            meter = meter.with_reader(reader.clone());
            builder.prometheus = Some(reader);
        }
        if metrics || settings.prometheus {
            builder.meter_provider = Some(meter.build());
        }
        Ok(Some(builder.build()))
    }
}

/// Flushes and shuts down the providers on a thread of its own, waiting at
/// most `deadline`: a hanging collector must not hold the process.
pub(super) fn shutdown(
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    deadline: Duration,
) -> Result<(), TelemetryError> {
    if tracer.is_none() && meter.is_none() {
        return Ok(());
    }
    let (done, finished) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("toolcage-otel-shutdown".into())
        .spawn(move || {
            let mut errors = Vec::new();
            if let Some(tracer) = tracer
                && let Err(e) = tracer.shutdown_with_timeout(deadline)
            {
                errors.push(format!("spans: {e}"));
            }
            if let Some(meter) = meter
                && let Err(e) = meter.shutdown_with_timeout(deadline)
            {
                errors.push(format!("metrics: {e}"));
            }
            done.send(errors).ok();
        });
    if let Err(e) = spawned {
        return Err(TelemetryError::Dropped {
            deadline,
            message: format!("no thread to flush on: {e}"),
        });
    }
    match finished.recv_timeout(deadline) {
        Ok(errors) if errors.is_empty() => Ok(()),
        Ok(errors) => Err(TelemetryError::Dropped {
            deadline,
            message: errors.join("; "),
        }),
        Err(_) => Err(TelemetryError::Dropped {
            deadline,
            message: "the collector did not answer".into(),
        }),
    }
}
