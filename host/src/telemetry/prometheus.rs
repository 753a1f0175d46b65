//! The metrics in Prometheus' text format, read on demand (`GET /metrics`).
//!
//! A pull reader of the meter provider's metrics, rendered by the usual
//! OpenTelemetry-to-Prometheus rules: dots become underscores, the unit
//! becomes a suffix (`_seconds`, `_bytes`), counters end in `_total`, and
//! histograms are cumulative `_bucket{le=…}`, `_sum` and `_count` series.
//! It replaces the `opentelemetry-prometheus` crate, which its maintainers
//! no longer develop, with the hundred lines toolcage needs.

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// A metric reader whose metrics [`render`](Self::render) writes in
/// Prometheus' text format. Register a clone with the meter provider
/// (`SdkMeterProvider::builder().with_reader(reader.clone())`); clones share
/// the reader.
#[derive(Clone, Debug, Default)]
pub struct PrometheusReader {
    reader: Arc<ManualReader>,
}

impl MetricReader for PrometheusReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.reader.register_pipeline(pipeline)
    }

    fn collect(&self, metrics: &mut ResourceMetrics) -> OTelSdkResult {
        self.reader.collect(metrics)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.reader.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.reader.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, _kind: InstrumentKind) -> Temporality {
        Temporality::Cumulative
    }
}

impl PrometheusReader {
    /// A reader not yet registered with a meter provider.
    pub fn new() -> Self {
        PrometheusReader::default()
    }

    /// The metrics now, in the text format (version 0.0.4). Empty before
    /// the reader is registered, or after the provider shut down.
    pub fn render(&self) -> String {
        let mut metrics = ResourceMetrics::default();
        if self.reader.collect(&mut metrics).is_err() {
            return String::new();
        }
        let mut out = String::new();
        for scope in metrics.scope_metrics() {
            for metric in scope.metrics() {
                write_metric(&mut out, metric);
            }
        }
        out
    }
}

fn write_metric(out: &mut String, metric: &Metric) {
    let base = name(metric.name(), metric.unit());
    let help = metric
        .description()
        .replace('\\', "\\\\")
        .replace('\n', "\\n");
    macro_rules! data {
        ($data:expr) => {
            match $data {
                MetricData::Gauge(gauge) => {
                    header(out, &base, &help, "gauge");
                    for point in gauge.data_points() {
                        sample(out, &base, point.attributes(), None, point.value());
                    }
                }
                MetricData::Sum(sum) => {
                    let (name, kind) = match sum.is_monotonic() {
                        true => (format!("{base}_total"), "counter"),
                        false => (base.clone(), "gauge"),
                    };
                    header(out, &name, &help, kind);
                    for point in sum.data_points() {
                        sample(out, &name, point.attributes(), None, point.value());
                    }
                }
                MetricData::Histogram(histogram) => {
                    header(out, &base, &help, "histogram");
                    let bucket = format!("{base}_bucket");
                    for point in histogram.data_points() {
                        let mut cumulative = 0;
                        for (bound, count) in point.bounds().zip(point.bucket_counts()) {
                            cumulative += count;
                            let le = KeyValue::new("le", format_float(bound));
                            sample(out, &bucket, point.attributes(), Some(&le), cumulative);
                        }
                        let le = KeyValue::new("le", "+Inf");
                        sample(out, &bucket, point.attributes(), Some(&le), point.count());
                        let sum = format!("{base}_sum");
                        sample(out, &sum, point.attributes(), None, point.sum());
                        let count = format!("{base}_count");
                        sample(out, &count, point.attributes(), None, point.count());
                    }
                }
                // toolcage records no exponential histograms.
                MetricData::ExponentialHistogram(_) => {}
            }
        };
    }
    match metric.data() {
        AggregatedMetrics::F64(data) => data!(data),
        AggregatedMetrics::U64(data) => data!(data),
        AggregatedMetrics::I64(data) => data!(data),
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample<'a, T: Sample>(
    out: &mut String,
    name: &str,
    attributes: impl Iterator<Item = &'a KeyValue>,
    extra: Option<&'a KeyValue>,
    value: T,
) {
    out.push_str(name);
    let mut labels = attributes.chain(extra).peekable();
    if labels.peek().is_some() {
        out.push('{');
        for (i, label) in labels.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&sanitize(label.key.as_str()));
            out.push_str("=\"");
            escape(out, &label_value(&label.value));
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&value.text());
    out.push('\n');
}

trait Sample {
    fn text(self) -> String;
}

impl Sample for f64 {
    fn text(self) -> String {
        format_float(self)
    }
}

impl Sample for u64 {
    fn text(self) -> String {
        self.to_string()
    }
}

impl Sample for i64 {
    fn text(self) -> String {
        self.to_string()
    }
}

fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        value.to_string()
    }
}

fn label_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().to_string(),
        other => other.to_string(),
    }
}

/// A Prometheus name: `[a-zA-Z_:][a-zA-Z0-9_:]*`, with the unit's suffix.
fn name(name: &str, unit: &str) -> String {
    let suffix = match unit {
        "s" => "seconds",
        "ms" => "milliseconds",
        "By" => "bytes",
        // Annotations (`{call}`) and dimensionless units add nothing.
        _ => "",
    };
    let mut name = sanitize(name);
    if !suffix.is_empty() && !name.ends_with(suffix) {
        name.push('_');
        name.push_str(suffix);
    }
    name
}

fn sanitize(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' => c,
            _ => '_',
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    #[test]
    fn renders_counters_and_histograms() {
        let reader = PrometheusReader::new();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        let meter = provider.meter("test");
        let calls = meter.u64_counter("toolcage.calls").build();
        calls.add(2, &[KeyValue::new("gen_ai.tool.name", "a\"b")]);
        let duration = meter
            .f64_histogram("toolcage.call.duration")
            .with_unit("s")
            .with_boundaries(vec![0.1, 1.0])
            .build();
        duration.record(0.5, &[]);
        duration.record(5.0, &[]);
        let text = reader.render();
        assert!(
            text.contains("# TYPE toolcage_calls_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("toolcage_calls_total{gen_ai_tool_name=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE toolcage_call_duration_seconds histogram\n"));
        assert!(text.contains("toolcage_call_duration_seconds_bucket{le=\"0.1\"} 0\n"));
        assert!(text.contains("toolcage_call_duration_seconds_bucket{le=\"1\"} 1\n"));
        assert!(text.contains("toolcage_call_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("toolcage_call_duration_seconds_sum 5.5\n"));
        assert!(text.contains("toolcage_call_duration_seconds_count 2\n"));
    }
}
