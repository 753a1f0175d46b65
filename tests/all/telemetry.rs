//! Telemetry in process: the spans and metrics of calls, read back from the
//! OpenTelemetry SDK's in-memory exporters. (On the wire, to an OTLP
//! receiver and a real Prometheus, in tests/clients/test_telemetry.py.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use toolcage::agent::{Permission, Permissions, Runner, ToolCall};
use toolcage::integration::otel::SdkProviders as _;
use toolcage::telemetry::{CallOrigin, PrometheusReader, ServerRequest, Telemetry, Transport};
use toolcage::{ErrorKind, Limits, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

/// A telemetry whose spans and metrics the test reads back.
struct Recorder {
    spans: InMemorySpanExporter,
    metrics: InMemoryMetricExporter,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    prometheus: PrometheusReader,
    /// Every telemetry made, flushed before reading: calls' spans and
    /// metrics are recorded off the calls' threads.
    made: std::sync::Mutex<Vec<Telemetry>>,
}

impl Recorder {
    fn new() -> Self {
        let spans = InMemorySpanExporter::default();
        let metrics = InMemoryMetricExporter::default();
        let prometheus = PrometheusReader::new();
        Recorder {
            tracer_provider: SdkTracerProvider::builder()
                .with_simple_exporter(spans.clone())
                .build(),
            meter_provider: SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics.clone()).build())
                .with_reader(prometheus.clone())
                .build(),
            spans,
            metrics,
            prometheus,
            made: Default::default(),
        }
    }

    fn flush(&self) {
        for telemetry in self.made.lock().unwrap().iter() {
            telemetry.flush();
        }
    }

    fn telemetry(&self, capture_content: bool) -> Telemetry {
        let telemetry = Telemetry::builder()
            .tracer_provider(&self.tracer_provider)
            .meter_provider(&self.meter_provider)
            .prometheus(self.prometheus.clone())
            .capture_content(capture_content)
            .phase_spans(true)
            .build();
        self.made.lock().unwrap().push(telemetry.clone());
        telemetry
    }

    fn spans(&self) -> Vec<SpanData> {
        self.flush();
        self.spans.get_finished_spans().unwrap()
    }

    /// The span named `name`, and its children.
    fn call_span(&self, name: &str) -> (SpanData, Vec<SpanData>) {
        let spans = self.spans();
        let call = spans
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no span {name} in {:?}", names(&spans)))
            .clone();
        let children = spans
            .into_iter()
            .filter(|span| span.parent_span_id == call.span_context.span_id())
            .collect();
        (call, children)
    }

    fn metrics(&self) -> Vec<ResourceMetrics> {
        self.flush();
        self.meter_provider.force_flush().unwrap();
        self.metrics.get_finished_metrics().unwrap()
    }
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|span| span.name.as_ref()).collect()
}

fn attributes(span: &SpanData) -> HashMap<String, Value> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect()
}

fn int(attributes: &HashMap<String, Value>, key: &str) -> i64 {
    match attributes.get(key) {
        Some(Value::I64(value)) => *value,
        other => panic!("{key}: {other:?} in {attributes:?}"),
    }
}

fn text<'a>(attributes: &'a HashMap<String, Value>, key: &str) -> &'a str {
    match attributes.get(key) {
        Some(Value::String(value)) => value.as_str(),
        other => panic!("{key}: {other:?} in {attributes:?}"),
    }
}

async fn tools() -> Arc<Registry> {
    let limits = Limits {
        fuel: Some(50_000_000),
        timeout: Duration::from_secs(20),
        ..quick_limits()
    };
    Arc::new(
        registry(
            builder().limits(limits),
            &[guests::FIXTURE_ECHO, guests::FIXTURE_MISBEHAVE],
        )
        .await,
    )
}

fn runner(registry: &Arc<Registry>, telemetry: Telemetry) -> Runner {
    Runner::new(registry.clone())
        .permissions(Permissions::allow_all())
        .telemetry(telemetry)
}

#[tokio::test]
async fn by_default_a_call_is_one_span_with_its_stages_as_attributes() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let telemetry = Telemetry::builder()
        .tracer_provider(&recorder.tracer_provider)
        .build();
    recorder.made.lock().unwrap().push(telemetry.clone());
    let call = ToolCall::new("c1", "echo", json!({ "text": "hello" }));
    let result = runner(&registry, telemetry).run([call]).await.remove(0);
    assert!(!result.is_error, "{}", result.output);
    let (span, children) = recorder.call_span("execute_tool echo");
    assert!(
        children.is_empty(),
        "no child spans: {:?}",
        names(&children)
    );
    let attributes = attributes(&span);
    for stage in [
        "toolcage.call.validate.duration",
        "toolcage.call.slot_wait",
        "toolcage.call.duration",
    ] {
        assert!(
            matches!(attributes.get(stage), Some(Value::F64(seconds)) if *seconds >= 0.0),
            "{stage}: {attributes:?}"
        );
    }
}

#[tokio::test]
async fn a_call_is_a_span_with_what_it_cost_and_its_phases() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let call = ToolCall::new("c1", "echo", json!({ "text": "hello" }));
    let result = runner(&registry, recorder.telemetry(false))
        .run([call])
        .await
        .remove(0);
    assert!(!result.is_error, "{}", result.output);

    let (span, children) = recorder.call_span("execute_tool echo");
    assert_eq!(span.span_kind, SpanKind::Internal);
    assert_eq!(span.parent_span_id, SpanId::INVALID, "a root span");
    assert_eq!(span.status, Status::Unset);
    let attributes = attributes(&span);
    assert_eq!(text(&attributes, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(text(&attributes, "gen_ai.tool.name"), "echo");
    assert_eq!(text(&attributes, "toolcage.component"), "fixture_echo");
    assert!(text(&attributes, "toolcage.component.digest").starts_with("blake3:"));
    assert_eq!(text(&attributes, "toolcage.permission"), "allow");
    assert_eq!(
        attributes.get("toolcage.permission.granted"),
        Some(&Value::Bool(true))
    );
    let fuel = int(&attributes, "toolcage.call.fuel.used");
    assert!(fuel > 0 && fuel as u64 == result.fuel_used);
    assert_eq!(int(&attributes, "toolcage.call.fuel.limit"), 50_000_000);
    let memory = int(&attributes, "toolcage.call.memory.peak");
    assert!(memory > 0 && memory as u64 == result.peak_memory_bytes);
    assert!(memory < int(&attributes, "toolcage.call.memory.limit"));
    assert_eq!(
        attributes.get("toolcage.call.timeout"),
        Some(&Value::F64(20.0))
    );
    for absent in ["error.type", "toolcage.error.kind", "mcp.method.name"] {
        assert!(!attributes.contains_key(absent), "{absent}");
    }
    // Content is not captured by default.
    let everything = format!("{:?}", recorder.spans());
    assert!(!everything.contains("hello"), "{everything}");

    // A slot was free: no wait, so no span for one.
    let mut phases: Vec<&str> = children.iter().map(|span| span.name.as_ref()).collect();
    phases.sort();
    assert_eq!(phases, ["toolcage.run", "toolcage.validate"]);
    for child in &children {
        assert_eq!(child.span_kind, SpanKind::Internal);
        assert_eq!(child.span_context.trace_id(), span.span_context.trace_id());
        assert!(child.start_time >= span.start_time && child.end_time <= span.end_time);
    }
}

#[tokio::test]
async fn an_mcp_request_is_a_server_span_under_the_clients_trace() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let origin = CallOrigin::from_w3c(Some(traceparent), Some("vendor=1"), Some("user=x")).request(
        ServerRequest {
            method: "tools/call",
            request_id: "7".into(),
            protocol_version: Some("2025-11-25".into()),
            session_id: Some("session-1".into()),
            transport: Transport::Tcp,
        },
    );
    let call = ToolCall::new("7", "echo", json!({ "text": "hi" }));
    runner(&registry, recorder.telemetry(false))
        .origin(origin)
        .run([call])
        .await;

    let (span, _) = recorder.call_span("tools/call echo");
    assert_eq!(span.span_kind, SpanKind::Server);
    assert_eq!(
        span.span_context.trace_id(),
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
    );
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex("b7ad6b7169203331").unwrap()
    );
    let attributes = attributes(&span);
    assert_eq!(text(&attributes, "mcp.method.name"), "tools/call");
    assert_eq!(text(&attributes, "jsonrpc.request.id"), "7");
    assert_eq!(text(&attributes, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(text(&attributes, "mcp.session.id"), "session-1");
    assert_eq!(text(&attributes, "network.transport"), "tcp");

    // A malformed traceparent leaves the call a root span.
    let recorder = Recorder::new();
    let origin = CallOrigin::from_w3c(Some("00-not-a-trace"), None, None);
    let call = ToolCall::new("8", "echo", json!({ "text": "hi" }));
    runner(&registry, recorder.telemetry(false))
        .origin(origin)
        .run([call])
        .await;
    let (span, _) = recorder.call_span("execute_tool echo");
    assert_eq!(span.parent_span_id, SpanId::INVALID);
}

#[tokio::test]
async fn failures_carry_their_error_type_and_kind() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let telemetry = recorder.telemetry(false);
    let calls = [
        ToolCall::new("fuel", "misbehave", json!({ "mode": "loop" })),
        ToolCall::new("args", "echo", json!({ "nope": 1 })),
        ToolCall::new("made-up", "no_such_tool", json!({})),
    ];
    let results = Runner::new(registry.clone())
        .permissions(Permissions::allow_all())
        .telemetry(telemetry.clone())
        .run(calls)
        .await;
    assert_eq!(results[0].error_kind, Some(ErrorKind::OutOfFuel));

    let (span, children) = recorder.call_span("execute_tool misbehave");
    let attributes = attributes(&span);
    assert_eq!(text(&attributes, "error.type"), "tool_error");
    assert_eq!(text(&attributes, "toolcage.error.kind"), "out_of_fuel");
    assert_eq!(span.status, Status::error("out_of_fuel"));
    assert!(int(&attributes, "toolcage.call.fuel.used") >= 50_000_000);
    assert_eq!(children.len(), 2);

    // Arguments that break the schema fail in validation: no sandbox phases.
    let (span, children) = recorder.call_span("execute_tool echo");
    assert_eq!(
        text(&attributes_of(&span), "toolcage.error.kind"),
        "invalid_arguments"
    );
    assert_eq!(names(&children), ["toolcage.validate"]);

    // A name the registry does not serve is not a span name or a label.
    let (span, children) = recorder.call_span("execute_tool");
    assert_eq!(
        text(&attributes_of(&span), "toolcage.error.kind"),
        "not_found"
    );
    assert!(children.is_empty());
    let metrics = format!("{:?}", recorder.metrics());
    assert!(!metrics.contains("no_such_tool"), "{metrics}");
}

fn attributes_of(span: &SpanData) -> HashMap<String, Value> {
    attributes(span)
}

#[tokio::test]
async fn a_refused_call_records_the_permission_decision() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let permissions = Permissions::new(Permission::Allow)
        .rule("echo", Permission::Deny)
        .unwrap();
    let result = Runner::new(registry.clone())
        .permissions(permissions)
        .telemetry(recorder.telemetry(false))
        .run([ToolCall::new("d", "echo", json!({ "text": "hi" }))])
        .await
        .remove(0);
    assert_eq!(result.error_kind, Some(ErrorKind::PermissionDenied));
    let (span, children) = recorder.call_span("execute_tool echo");
    let attributes = attributes(&span);
    assert_eq!(text(&attributes, "toolcage.permission"), "deny");
    assert_eq!(
        attributes.get("toolcage.permission.granted"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        text(&attributes, "toolcage.error.kind"),
        "permission_denied"
    );
    assert!(children.is_empty(), "it never ran");
}

#[tokio::test]
async fn content_is_captured_only_when_asked_and_cut_to_the_output_limit() {
    let recorder = Recorder::new();
    let limits = Limits {
        output_bytes: 64,
        ..quick_limits()
    };
    let registry = Arc::new(registry(builder().limits(limits), &[guests::FIXTURE_ECHO]).await);
    let marker = "marker-3f9c";
    runner(&registry, recorder.telemetry(true))
        .run([ToolCall::new("c", "echo", json!({ "text": marker }))])
        .await;
    let (span, _) = recorder.call_span("execute_tool echo");
    let attributes = attributes(&span);
    let arguments = text(&attributes, "gen_ai.tool.call.arguments");
    assert_eq!(arguments, json!({ "text": marker }).to_string());
    assert_eq!(text(&attributes, "gen_ai.tool.call.result"), marker);

    let long = "x".repeat(100);
    runner(&registry, recorder.telemetry(true))
        .run([ToolCall::new("d", "echo", json!({ "text": long }))])
        .await;
    let spans = recorder.spans();
    let last = spans
        .iter()
        .rfind(|span| span.name == "execute_tool echo")
        .unwrap();
    let arguments = text(&attributes_of(last), "gen_ai.tool.call.arguments").to_string();
    assert_eq!(arguments.len(), 64, "cut to the output limit: {arguments}");
}

#[tokio::test]
async fn calls_are_counted_by_tool_component_and_error_type_only() {
    let recorder = Recorder::new();
    let registry = tools().await;
    let telemetry = recorder.telemetry(false);
    let calls = [
        ToolCall::new("a", "echo", json!({ "text": "1" })),
        ToolCall::new("b", "echo", json!({ "text": "2" })),
        ToolCall::new("c", "misbehave", json!({ "mode": "loop" })),
    ];
    runner(&registry, telemetry.clone()).run(calls).await;

    let metrics = recorder.metrics();
    let last = metrics.last().expect("metrics were exported");
    let mut calls = Vec::new();
    let mut histograms = Vec::new();
    for scope in last.scope_metrics() {
        for metric in scope.metrics() {
            match (metric.name(), metric.data()) {
                ("toolcage.calls", AggregatedMetrics::U64(MetricData::Sum(sum))) => {
                    for point in sum.data_points() {
                        let labels: Vec<KeyValue> = point.attributes().cloned().collect();
                        calls.push((labels, point.value()));
                    }
                }
                (name, _) => histograms.push(name.to_string()),
            }
        }
    }
    let count = |tool: &str, error: Option<&str>| {
        calls
            .iter()
            .find(|(labels, _)| {
                labels.contains(&KeyValue::new("gen_ai.tool.name", tool.to_string()))
                    && labels
                        .iter()
                        .find(|kv| kv.key.as_str() == "error.type")
                        .map(|kv| kv.value.to_string())
                        == error.map(str::to_string)
            })
            .map(|(_, value)| *value)
    };
    assert_eq!(count("echo", None), Some(2), "{calls:?}");
    assert_eq!(
        count("misbehave", Some("out_of_fuel")),
        Some(1),
        "{calls:?}"
    );
    for (labels, _) in &calls {
        for label in labels {
            assert!(
                ["gen_ai.tool.name", "toolcage.component", "error.type"]
                    .contains(&label.key.as_str()),
                "an unexpected label {label:?}"
            );
        }
    }
    for name in [
        "toolcage.call.duration",
        "toolcage.call.fuel",
        "toolcage.call.memory.peak",
        "toolcage.call.slot_wait",
    ] {
        assert!(
            histograms.contains(&name.to_string()),
            "{name}: {histograms:?}"
        );
    }

    let text = telemetry.prometheus_text().unwrap();
    assert!(
        text.contains(
            "toolcage_calls_total{gen_ai_tool_name=\"echo\",toolcage_component=\"fixture_echo\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains("# TYPE toolcage_call_memory_peak_bytes histogram\n"));
    assert!(text.contains("toolcage_call_fuel_count{"));
}

#[tokio::test]
async fn telemetry_that_records_nothing_changes_nothing() {
    let registry = tools().await;
    let telemetry = Telemetry::builder().build();
    assert!(!telemetry.traces() && !telemetry.metrics());
    assert_eq!(telemetry.prometheus_text(), None);
    let result = runner(&registry, telemetry)
        .run([ToolCall::new("a", "echo", json!({ "text": "ok" }))])
        .await
        .remove(0);
    assert_eq!(result.output, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_a_slot_has_a_span_for_the_wait() {
    let recorder = Recorder::new();
    let runtime = toolcage::Runtime::builder()
        .max_concurrent_calls(1)
        .build()
        .unwrap();
    let registry = Arc::new(
        registry(
            builder().runtime(&runtime).limits(quick_limits()),
            &[guests::FIXTURE_ECHO],
        )
        .await,
    );
    let runner = runner(&registry, recorder.telemetry(false));
    let first = runner.run([ToolCall::new(
        "first",
        "echo",
        json!({ "text": "a", "sleep_ms": 400 }),
    )]);
    let second = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        runner
            .run([ToolCall::new("second", "echo", json!({ "text": "b" }))])
            .await
    };
    let (_, second) = tokio::join!(first, second);
    assert!(
        second[0].slot_wait >= Duration::from_millis(200),
        "{:?}",
        second[0].slot_wait
    );
    let spans = recorder.spans();
    let call = spans
        .iter()
        .find(|span| {
            span.name == "execute_tool echo"
                && span.attributes.iter().any(|kv| {
                    kv.key.as_str() == "toolcage.call.slot_wait"
                        && matches!(kv.value, Value::F64(wait) if wait >= 0.2)
                })
        })
        .expect("the second call's span");
    let wait = spans
        .iter()
        .find(|span| {
            span.name == "toolcage.slot_wait" && span.parent_span_id == call.span_context.span_id()
        })
        .expect("a span for the wait");
    let waited = wait.end_time.duration_since(wait.start_time).unwrap();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
}

#[tokio::test]
async fn reloads_and_the_files_they_reject_are_counted() {
    let recorder = Recorder::new();
    let telemetry = recorder.telemetry(false);
    let dir = tempfile::tempdir().unwrap();
    let base = builder().limits(quick_limits()).build().unwrap();
    let (live, _) = toolcage::LiveRegistry::load(base, [dir.path()])
        .await
        .unwrap();
    telemetry.observe_reloads(&live);
    // Written elsewhere and renamed in, so the reload reads it whole. A
    // rejected new file changes no tool: the reload still counts, and so
    // does the file.
    let staging = dir.path().join(".broken.part");
    std::fs::write(&staging, b"not a component").unwrap();
    std::fs::rename(&staging, dir.path().join("broken.wasm")).unwrap();
    let report = live.reload().await;
    assert!(!report.changed() && report.loaded.len() == 1, "{report:?}");
    // Not retried until it changes: counted once.
    live.reload().await;
    assert_eq!((live.reloads(), live.rejected_files()), (3, 1));
    let text = telemetry.prometheus_text().unwrap();
    assert!(text.contains("toolcage_reloads_total 3\n"), "{text}");
    assert!(text.contains("toolcage_files_rejected_total 1\n"), "{text}");
}

#[tokio::test]
async fn nested_calls_are_child_spans_of_their_callers_span() {
    let recorder = Recorder::new();
    let builder = builder()
        .limits(quick_limits())
        .component_calls("fixture_composer", "echo");
    let registry =
        Arc::new(registry(builder, &[guests::FIXTURE_COMPOSER, guests::FIXTURE_ECHO]).await);
    let arguments = json!({ "calls": [
        { "tool": "echo", "arguments": { "text": "a" } },
        { "tool": "echo", "arguments": { "text": "b" } },
    ] });
    let call = ToolCall::new("c1", "compose", arguments);
    let result = runner(&registry, recorder.telemetry(false))
        .run([call])
        .await
        .remove(0);
    assert!(!result.is_error, "{}", result.output);
    let (caller, children) = recorder.call_span("execute_tool compose");
    let nested: Vec<&SpanData> = children
        .iter()
        .filter(|span| span.name == "execute_tool echo")
        .collect();
    assert_eq!(nested.len(), 2, "{:?}", names(&children));
    for span in nested {
        assert_eq!(span.span_context.trace_id(), caller.span_context.trace_id());
        assert!(span.start_time >= caller.start_time && span.end_time <= caller.end_time);
        let attributes = attributes(span);
        assert_eq!(text(&attributes, "gen_ai.tool.name"), "echo");
    }
    // Each nested call is counted as a call of its own tool.
    let calls = recorder
        .spans()
        .iter()
        .filter(|span| span.name.starts_with("execute_tool"))
        .count();
    assert_eq!(calls, 3);
}

#[tokio::test]
async fn a_call_exports_at_most_a_thousand_nested_spans() {
    let recorder = Recorder::new();
    let limits = Limits {
        nested_calls: 1_100,
        timeout: Duration::from_secs(60),
        fuel: None,
        ..quick_limits()
    };
    let builder = builder()
        .limits(limits)
        .component_calls("fixture_composer", "echo");
    let registry =
        Arc::new(registry(builder, &[guests::FIXTURE_COMPOSER, guests::FIXTURE_ECHO]).await);
    let call = json!({ "tool": "echo", "arguments": { "text": "a" } });
    let arguments = json!({ "calls": vec![call; 1_001] });
    let result = runner(&registry, recorder.telemetry(false))
        .run([ToolCall::new("c1", "compose", arguments)])
        .await
        .remove(0);
    assert!(!result.is_error, "{}", result.output);
    let (_, children) = recorder.call_span("execute_tool compose");
    let nested = children
        .iter()
        .filter(|span| span.name == "execute_tool echo")
        .count();
    assert_eq!(nested, 1_000, "the spans kept under one call are capped");
}
