"""An OTLP/HTTP collector on loopback, for the telemetry tests.

`Receiver` accepts what an OpenTelemetry SDK exports over OTLP/HTTP with
protobuf bodies (POST /v1/traces, /v1/metrics; /v1/logs is accepted and
ignored), decodes it with the official definitions (PyPI's
`opentelemetry-proto`) and keeps the spans and metric data points as plain
Python values. It misbehaves on demand, as a collector in trouble would:

- `ok`: answers 200 with an empty Export*ServiceResponse;
- `refuse`: reads each request, then answers 503;
- `hang`: reads each request and never answers, until `stop()` lets go.

`refused_endpoint()` gives an endpoint where connections are refused outright.
"""

import gzip
import socket
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

MODES = ("ok", "refuse", "hang")

PROTOBUF = "application/x-protobuf"


@dataclass
class Span:
    """One decoded span. Ids are lowercase hex; `parent_span_id` is "" for a
    root span. `kind` is "SERVER", "INTERNAL", "CLIENT"... `attributes` and
    `resource` map keys to typed values (str, bool, int, float, bytes, list,
    dict); `events` are (name, attributes)."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    trace_state: str
    attributes: dict
    events: list
    resource: dict
    scope: str
    status_code: str
    start_ns: int
    end_ns: int


@dataclass
class Point:
    """One decoded metric data point: `value` for a sum or a gauge;
    `count`, `sum` and `bucket_counts` (with `bounds`) for a histogram."""

    attributes: dict
    time_ns: int
    value: float | int | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: list = field(default_factory=list)
    bounds: list = field(default_factory=list)


@dataclass
class Metric:
    """One metric of one export: `kind` is "sum", "gauge", "histogram",
    "exponential_histogram" or "summary"; `temporality` is "cumulative" or
    "delta" (None for a gauge); `monotonic` only means something for a sum."""

    name: str
    unit: str
    description: str
    kind: str
    temporality: str | None
    monotonic: bool
    points: list
    resource: dict
    scope: str


def value_of(any_value):
    """An OTLP AnyValue as a Python value."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(any_value.kvlist_value.values)
    return getattr(any_value, which)


def attributes_of(key_values):
    return {kv.key: value_of(kv.value) for kv in key_values}


def _temporality(data):
    name = AggregationTemporality.Name(data.aggregation_temporality)
    return name.removeprefix("AGGREGATION_TEMPORALITY_").lower()


def _decode_spans(body):
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        name=span.name,
                        kind=SpanProto.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        trace_state=span.trace_state,
                        attributes=attributes_of(span.attributes),
                        events=[(e.name, attributes_of(e.attributes)) for e in span.events],
                        resource=resource,
                        scope=scope_spans.scope.name,
                        status_code=span.status.StatusCode.Name(span.status.code)
                        .removeprefix("STATUS_CODE_"),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    )
                )
    return spans


def _number(point):
    which = point.WhichOneof("value")
    return getattr(point, which) if which else None


def _decode_metrics(body):
    request = ExportMetricsServiceRequest.FromString(body)
    metrics = []
    for resource_metrics in request.resource_metrics:
        resource = attributes_of(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                temporality = None
                monotonic = False
                points = []
                if kind in ("sum", "gauge"):
                    if kind == "sum":
                        temporality = _temporality(data)
                        monotonic = data.is_monotonic
                    for p in data.data_points:
                        points.append(
                            Point(attributes_of(p.attributes), p.time_unix_nano, value=_number(p))
                        )
                elif kind == "histogram":
                    temporality = _temporality(data)
                    for p in data.data_points:
                        points.append(
                            Point(
                                attributes_of(p.attributes),
                                p.time_unix_nano,
                                count=p.count,
                                sum=p.sum if p.HasField("sum") else None,
                                bucket_counts=list(p.bucket_counts),
                                bounds=list(p.explicit_bounds),
                            )
                        )
                elif kind == "exponential_histogram":
                    temporality = _temporality(data)
                    for p in data.data_points:
                        points.append(
                            Point(
                                attributes_of(p.attributes),
                                p.time_unix_nano,
                                count=p.count,
                                sum=p.sum if p.HasField("sum") else None,
                            )
                        )
                else:  # summary
                    for p in data.data_points:
                        points.append(
                            Point(attributes_of(p.attributes), p.time_unix_nano,
                                  count=p.count, sum=p.sum)
                        )
                metrics.append(
                    Metric(
                        name=metric.name,
                        unit=metric.unit,
                        description=metric.description,
                        kind=kind,
                        temporality=temporality,
                        monotonic=monotonic,
                        points=points,
                        resource=resource,
                        scope=scope_metrics.scope.name,
                    )
                )
    return metrics


# What each path carries: (decoder, empty response, where it is kept).
ROUTES = {
    "/v1/traces": (_decode_spans, ExportTraceServiceResponse, "spans"),
    "/v1/metrics": (_decode_metrics, ExportMetricsServiceResponse, "metrics"),
}


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1:<free port>, running from
    construction until `stop()`. `endpoint` is its base URL, to give as
    OTEL_EXPORTER_OTLP_ENDPOINT.

    `spans` and `metrics` hold what was decoded (in `ok` mode only);
    `requests` every request seen, as (method, path, content type);
    `problems` what the receiver could not take (a wrong content type, an
    undecodable body), which the waiting helpers report on failure."""

    def __init__(self, mode="ok"):
        assert mode in MODES, mode
        self.mode = mode
        self.spans = []
        self.metrics = []
        self.requests = []
        self.problems = []
        self._changed = threading.Condition()
        # Set at stop(): lets the handlers of `hang` go.
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.read_body()
                content_type = self.headers.get("Content-Type", "")
                with receiver._changed:
                    receiver.requests.append(("POST", self.path, content_type))
                    receiver._changed.notify_all()
                if receiver.mode == "hang":
                    # Hold the connection, answering nothing, until stop().
                    receiver._released.wait()
                    self.close_connection = True
                    return
                if receiver.mode == "refuse":
                    return self.answer(503, b"unavailable", "text/plain")
                path = self.path.split("?", 1)[0]
                if path == "/v1/logs":
                    return self.answer(200, b"", PROTOBUF)
                route = ROUTES.get(path)
                if route is None:
                    return self.answer(404, b"no such path", "text/plain")
                decode, response, kept = route
                if content_type.split(";")[0].strip() != PROTOBUF:
                    receiver.problem(f"{path}: Content-Type {content_type!r}, not {PROTOBUF}")
                    return self.answer(415, b"protobuf only", "text/plain")
                try:
                    decoded = decode(self.decompress(body))
                except Exception as error:  # noqa: BLE001 - reported, not raised
                    receiver.problem(f"{path}: undecodable body ({error!r})")
                    return self.answer(400, b"undecodable", "text/plain")
                with receiver._changed:
                    getattr(receiver, kept).extend(decoded)
                    receiver._changed.notify_all()
                self.answer(200, response().SerializeToString(), PROTOBUF)

            def do_GET(self):
                self.read_body()
                self.answer(405, b"POST only", "text/plain")

            def read_body(self):
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def decompress(self, body):
                encoding = self.headers.get("Content-Encoding", "identity").lower()
                if encoding == "gzip":
                    return gzip.decompress(body)
                if encoding == "deflate":
                    return zlib.decompress(body)
                if encoding != "identity":
                    raise ValueError(f"Content-Encoding {encoding}")
                return body

            def answer(self, status, body, content_type):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Handler threads stuck in `hang` must not hold up the test's exit.
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def problem(self, text):
        with self._changed:
            self.problems.append(text)
            self._changed.notify_all()

    def stop(self):
        """Stops listening and lets go of the requests `hang` holds."""
        self._released.set()
        self.server.shutdown()
        self.server.server_close()

    # --- Waiting for what arrives ---------------------------------------------

    def _wait(self, found, timeout, what):
        """Waits until `found()` (called under the lock) returns something
        truthy, and returns it; fails after `timeout` seconds saying what
        did arrive."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = found()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{what} did not arrive within {timeout} s at {self.endpoint} "
                        f"({self.mode}); {self.summary()}"
                    )
                self._changed.wait(left)

    def summary(self):
        """What arrived, for failure messages."""
        spans = sorted({(s.name, s.kind) for s in self.spans})
        metrics = sorted({m.name for m in self.metrics})
        return (
            f"{len(self.requests)} requests, spans {spans}, metrics {metrics}, "
            f"problems {self.problems}"
        )

    def wait_for_requests(self, count=1, timeout=10):
        """Waits for `count` requests of any kind (in any mode)."""
        return self._wait(
            lambda: self.requests[:] if len(self.requests) >= count else None,
            timeout, f"{count} requests",
        )

    def wait_for_spans(self, predicate=lambda span: True, timeout=10, count=1):
        """Waits until at least `count` spans satisfy `predicate`; returns
        all that do."""

        def found():
            matching = [span for span in self.spans if predicate(span)]
            return matching if len(matching) >= count else None

        return self._wait(found, timeout, f"{count} matching spans")

    def wait_for_metric(self, name, predicate=lambda point: True, timeout=10):
        """Waits until a data point of metric `name` satisfies `predicate`;
        returns the latest such point, with its metric as `point.metric`."""

        def found():
            matching = [
                (point.time_ns, index, metric, point)
                for index, metric in enumerate(self.metrics) if metric.name == name
                for point in metric.points if predicate(point)
            ]
            if not matching:
                return None
            _, _, metric, point = max(matching, key=lambda m: (m[0], m[1]))
            point.metric = metric
            return point

        return self._wait(found, timeout, f"a matching point of {name}")

    def total(self, name, attributes=None):
        """The current total of sum or histogram `name` over the attribute
        sets that include `attributes`: the value (a sum) or the count (a
        histogram), the latest point of each attribute set when cumulative,
        all the points when delta."""
        wanted = attributes or {}
        with self._changed:
            latest = {}
            total = 0
            for metric in self.metrics:
                if metric.name != name:
                    continue
                for point in metric.points:
                    if any(point.attributes.get(k) != v for k, v in wanted.items()):
                        continue
                    amount = point.value if metric.kind == "sum" else point.count
                    if metric.temporality == "delta":
                        total += amount
                    else:
                        key = tuple(sorted((k, repr(v)) for k, v in point.attributes.items()))
                        if key not in latest or latest[key][0] <= point.time_ns:
                            latest[key] = (point.time_ns, amount)
            return total + sum(amount for _, amount in latest.values())

    def wait_for_total(self, name, attributes, at_least, timeout=10):
        """Waits until `total(name, attributes)` reaches `at_least` (above
        0); returns it."""

        def found():
            total = self.total(name, attributes)
            return total if total >= at_least else None

        return self._wait(found, timeout, f"{name} {attributes} >= {at_least}")


@contextmanager
def refused_endpoint():
    """An endpoint on 127.0.0.1 where every connection is refused: a port
    held by a bound socket that never listens (Linux answers a SYN to it with
    a reset), so that nothing else can take it meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"
