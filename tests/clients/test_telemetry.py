"""toolcage's telemetry, seen from outside.

OpenTelemetry over OTLP/HTTP, to a loopback collector decoding with the
official protobuf definitions (otlp.py), driven by the MCP Python SDK over
stdio and Streamable HTTP and by the CLI: the span of each tools/call (its
parent the trace context the client put in `_meta`, its attributes, its
children), content captured only when asked, the metrics and their
attributes. The Prometheus endpoint (/metrics behind the token, or a
listener of its own), scraped by a real Prometheus. Telemetry off by
default (no exporter thread, no TCP or UDP socket), and a collector refusing
or never answering slowing neither calls nor shutdown.
"""

import functools
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack, asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import otlp
from conftest import BIN, INITIALIZE, TOKEN, TOOLS, server_args

# The limits server_args sets, and the default memory limit.
FUEL_LIMIT = 50_000_000
TIMEOUT_S = 5.0
MEMORY_LIMIT = 256 << 20

# Spans batched for 100 ms, metrics exported every 250 ms: what the tests
# wait for arrives well within their timeouts. Each stage of a call is a
# child span too (by default the stages are the call span's attributes).
QUICK_EXPORT = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_METRIC_EXPORT_INTERVAL": "250",
    "TOOLCAGE_OTEL_PHASE_SPANS": "true",
}

# The children of a call that reached the sandbox. One that found a slot
# free has no `toolcage.slot_wait` span: a call that waited for one has it
# too (test_a_call_waiting_for_a_slot_spends_its_slot_wait_span_waiting).
CHILDREN = {"toolcage.validate", "toolcage.run"}

# The attributes a metric may carry (dots; /metrics turns them into
# underscores): no session id, request id, argument or path.
MCP_METRIC_ATTRIBUTES = {"mcp.method.name", "gen_ai.tool.name", "error.type", "network.transport"}
CALL_METRIC_ATTRIBUTES = {
    "gen_ai.tool.name", "toolcage.component", "error.type", "network.transport",
}

SERVING_MCP = r"serving MCP at (http://\S+)"
SERVING_METRICS = r"serving metrics at (http://\S+)"

# After stdin closes or SIGTERM, toolcage is gone within 5 s even when its
# collector never answers; the rest is the process being reaped on a busy
# machine.
EXIT_WITHIN_S = 5
EXIT_SLACK_S = 0.5


def otel_variables(endpoint, **more):
    """The OTEL_* variables that turn export to `endpoint` on, quickly."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **QUICK_EXPORT, **more}


def child_env(**variables):
    """Our environment without RUST_LOG and any OTEL_* of the caller's, plus
    `variables`."""
    env = {
        key: value for key, value in os.environ.items()
        if key != "RUST_LOG" and not key.startswith("OTEL_")
    }
    return {**env, **variables}


def trace_context():
    """A new remote parent: (trace id, span id, the `_meta` carrying it)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    meta = {
        "traceparent": f"00-{trace_id}-{span_id}-01",
        "tracestate": "toolcage-tests=1",
        "baggage": "toolcage.tests=1",
    }
    return trace_id, span_id, meta


async def off_loop(function, *args, **kwargs):
    """Runs a blocking wait in a worker thread, leaving the event loop (and
    the SDK client on it) free."""
    return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))


# --- toolcage processes -------------------------------------------------------


class Toolcage:
    """`toolcage ARGS` under test: JSON-RPC over its stdin and stdout when
    `stdio`, every stderr line kept in `stderr`."""

    def __init__(self, args, env, stdio=True):
        pipe_or_null = subprocess.PIPE if stdio else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [BIN, *args], stdin=pipe_or_null, stdout=pipe_or_null, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        self.pid = self.process.pid
        self.stderr = []
        self.replies = {}
        self.next_id = 1
        self.changed = threading.Condition()
        # The pipes still being read: none once toolcage has exited and
        # everything it wrote was read.
        self.reading = 0
        self._read(self.process.stderr, self._stderr_line)
        if stdio:
            self._read(self.process.stdout, self._stdout_line)

    def _read(self, pipe, take):
        self.reading += 1

        def read():
            for line in pipe:
                with self.changed:
                    take(line)
                    self.changed.notify_all()
            with self.changed:
                self.reading -= 1
                self.changed.notify_all()

        threading.Thread(target=read, daemon=True).start()

    def _stderr_line(self, line):
        self.stderr.append(line.rstrip("\n"))

    def _stdout_line(self, line):
        message = json.loads(line)
        if "id" in message and "method" not in message:
            self.replies[message["id"]] = message

    def _wait(self, found, timeout, what):
        """Waits until `found()` gives something truthy, and returns it;
        fails after `timeout` seconds, or once toolcage has exited and all
        it wrote was read."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (result := found()):
                left = deadline - time.monotonic()
                if left <= 0 or self.reading == 0:
                    raise AssertionError(
                        f"{what}: not within {timeout} s (exit status {self.process.poll()}); "
                        f"stderr: {self.stderr}"
                    )
                self.changed.wait(left)
            return result

    def wait_for_stderr(self, pattern, timeout=20):
        """The match of the first stderr line matching `pattern`."""

        def found():
            return next(filter(None, (re.search(pattern, line) for line in self.stderr)), None)

        return self._wait(found, timeout, f"a stderr line matching {pattern!r}")

    def send(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method, params, timeout=30):
        """Sends a request; returns its reply."""
        id, self.next_id = self.next_id, self.next_id + 1
        self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        return self._wait(lambda: self.replies.get(id), timeout, f"the reply to {method} {id}")

    def initialize(self):
        reply = self.request("initialize", INITIALIZE["params"])
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name, arguments, meta=None):
        """Calls a tool; returns the result."""
        params = {"name": name, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        reply = self.request("tools/call", params)
        assert "result" in reply, reply
        return reply["result"]

    def echo(self, text):
        result = self.call("echo", {"text": text})
        assert not result["isError"] and result["content"][0]["text"] == text, result
        return result

    def close_stdin(self, timeout=30):
        """Closes stdin; returns how long toolcage took to exit."""
        began = time.monotonic()
        self.process.stdin.close()
        return self.wait(began, timeout)

    def terminate(self, timeout=30):
        """Sends SIGTERM; returns how long toolcage took to exit."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        return self.wait(began, timeout)

    def wait(self, began, timeout):
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"toolcage did not exit within {timeout} s: {self.stderr}")
        took = time.monotonic() - began
        # Everything it wrote to stderr, read.
        self._wait(lambda: self.reading == 0 or None, 5, "the end of its output")
        return took

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def dropped(self):
        """The stderr lines saying that telemetry was dropped."""
        with self.changed:
            return [line for line in self.stderr
                    if line.startswith("telemetry:") and "dropped" in line]

    # What the process holds, in /proc.

    def thread_names(self):
        names = []
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/comm") as comm:
                    names.append(comm.read().strip())
            except FileNotFoundError:
                pass  # the thread ended meanwhile
        return names

    def exporter_threads(self):
        # Linux keeps 15 characters of a thread's name.
        return [name for name in self.thread_names() if name.startswith("OpenTelemetry")]

    def network_sockets(self):
        """The TCP and UDP sockets among its file descriptors, as (protocol,
        local address, remote address) in /proc's hex. Unix sockets do not
        count: tokio's signal handling holds a socket pair of its own."""
        inodes = set()
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                link = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except FileNotFoundError:
                continue  # closed meanwhile
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
        found = []
        for protocol in ("tcp", "tcp6", "udp", "udp6"):
            with open(f"/proc/{self.pid}/net/{protocol}") as table:
                for row in list(table)[1:]:
                    fields = row.split()
                    if fields[9] in inodes:
                        found.append((protocol, fields[1], fields[2]))
        return found


@pytest.fixture
def toolcage():
    """`toolcage(args, env, stdio=True)`: a running Toolcage; every one still
    running is killed at teardown."""
    started = []

    def start(args, env, stdio=True):
        process = Toolcage(args, env, stdio)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def serve_http(toolcage, args, env):
    """`toolcage ARGS` (a `serve --http`): (the process, its /mcp URL)."""
    server = toolcage(args, env, stdio=False)
    return server, server.wait_for_stderr(SERVING_MCP).group(1)


@asynccontextmanager
async def http_client(url, token=TOKEN, session_ids=None):
    """An SDK client of `url` (the older handshake, which has sessions);
    the Mcp-Session-Id of every answer goes to `session_ids`."""

    async def record(response):
        if session_ids is not None and "mcp-session-id" in response.headers:
            session_ids.append(response.headers["mcp-session-id"])

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(
        headers=headers, timeout=30, event_hooks={"response": [record]}
    ) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            yield client


def get(url, token=None):
    """GETs `url`: (status, Content-Type, body)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


# --- Spans --------------------------------------------------------------------


def is_int(value):
    return type(value) is int


def assert_call_attributes(span, tool="echo"):
    """The attributes a call has over MCP and the CLI alike: the tool, its
    component and what the call used of its limits."""
    a = span.attributes
    assert a["gen_ai.tool.name"] == tool, a
    assert a["gen_ai.operation.name"] == "execute_tool", a
    assert isinstance(a["toolcage.component"], str) and a["toolcage.component"], a
    assert isinstance(a["toolcage.component.digest"], str) and a["toolcage.component.digest"], a
    assert is_int(a["toolcage.call.fuel.used"]) and a["toolcage.call.fuel.used"] > 0, a
    assert a["toolcage.call.fuel.limit"] == FUEL_LIMIT and is_int(a["toolcage.call.fuel.limit"]), a
    assert is_int(a["toolcage.call.memory.peak"]) and a["toolcage.call.memory.peak"] > 0, a
    assert a["toolcage.call.memory.limit"] == MEMORY_LIMIT, a
    assert a["toolcage.call.memory.limit"] > a["toolcage.call.memory.peak"], a
    assert type(a["toolcage.call.duration"]) is float and a["toolcage.call.duration"] >= 0, a
    assert a["toolcage.call.timeout"] == TIMEOUT_S and type(a["toolcage.call.timeout"]) is float, a
    assert type(a["toolcage.call.slot_wait"]) is float and a["toolcage.call.slot_wait"] >= 0, a
    assert a["toolcage.permission"] == "allow", a
    assert a["toolcage.permission.granted"] is True, a


def assert_succeeded(span):
    a = span.attributes
    assert "error.type" not in a and "toolcage.error.kind" not in a, a
    assert a["toolcage.call.fuel.limit"] > a["toolcage.call.fuel.used"], a


def assert_mcp_call_span(span, transport, version, tool="echo"):
    """The span of a tools/call over MCP."""
    assert (span.name, span.kind) == (f"tools/call {tool}", "SERVER"), span
    a = span.attributes
    assert a["mcp.method.name"] == "tools/call", a
    assert isinstance(a["jsonrpc.request.id"], str) and a["jsonrpc.request.id"], a
    assert a["mcp.protocol.version"] == version, a
    assert a["network.transport"] == transport, a
    assert span.resource.get("service.name") == "toolcage", span.resource
    assert_call_attributes(span, tool)


def children_of(receiver, span):
    """The spans under `span`, by name. They end before it, so they were
    exported with it or before it."""
    children = {}
    for child in receiver.spans:
        if child.parent_span_id == span.span_id and child.trace_id == span.trace_id:
            assert child.kind == "INTERNAL", child
            assert child.name not in children, f"two {child.name} under {span.name}"
            children[child.name] = child
    return children


def spans_under(receiver, trace_id, parent_id, name):
    return receiver.wait_for_spans(
        lambda s: s.name == name and s.trace_id == trace_id and s.parent_span_id == parent_id
    )


@pytest.mark.anyio
async def test_a_stdio_call_is_a_server_span_under_the_clients_trace(
    config_file, otlp_receiver, mode
):
    receiver = otlp_receiver()
    server = StdioServerParameters(
        command=BIN, args=server_args(config_file), env=otel_variables(receiver.endpoint)
    )
    trace_id, parent_id, meta = trace_context()
    async with Client(server, mode=mode) as client:
        version = client.session.protocol_version
        result = await client.call_tool("echo", {"text": "traced"}, meta=meta)
        assert not result.is_error
        # No trace context: a trace of its own.
        result = await client.call_tool("echo", {"text": "untraced"})
        assert not result.is_error
        [span] = await off_loop(spans_under, receiver, trace_id, parent_id, "tools/call echo")
        roots = await off_loop(
            receiver.wait_for_spans,
            lambda s: s.name == "tools/call echo" and s.trace_id != trace_id,
        )

    assert_mcp_call_span(span, "pipe", version)
    assert_succeeded(span)
    assert "mcp.session.id" not in span.attributes, span.attributes
    assert CHILDREN <= children_of(receiver, span).keys()

    [root] = roots
    assert root.parent_span_id == "", root
    assert_mcp_call_span(root, "pipe", version)
    assert CHILDREN <= children_of(receiver, root).keys()
    assert root.attributes["jsonrpc.request.id"] != span.attributes["jsonrpc.request.id"]


@pytest.mark.anyio
async def test_a_failed_call_says_how_on_its_span(config_file, otlp_receiver):
    receiver = otlp_receiver()
    server = StdioServerParameters(
        command=BIN, args=server_args(config_file), env=otel_variables(receiver.endpoint)
    )
    async with Client(server, mode="legacy") as client:
        version = client.session.protocol_version
        fuel_trace, fuel_parent, meta = trace_context()
        result = await client.call_tool("misbehave", {"mode": "loop"}, meta=meta)
        assert result.is_error
        invalid_trace, invalid_parent, meta = trace_context()
        result = await client.call_tool("echo", {"repeat": 99}, meta=meta)
        assert result.is_error
        [fuel] = await off_loop(
            spans_under, receiver, fuel_trace, fuel_parent, "tools/call misbehave"
        )
        [invalid] = await off_loop(
            spans_under, receiver, invalid_trace, invalid_parent, "tools/call echo"
        )

    # It ran out of fuel in the sandbox.
    assert_mcp_call_span(fuel, "pipe", version, tool="misbehave")
    assert fuel.attributes["error.type"] == "tool_error", fuel.attributes
    assert fuel.attributes["toolcage.error.kind"] == "out_of_fuel", fuel.attributes
    assert CHILDREN <= children_of(receiver, fuel).keys()

    # Refused before the sandbox: validated, never run.
    a = invalid.attributes
    assert (invalid.name, invalid.kind) == ("tools/call echo", "SERVER"), invalid
    assert a["error.type"] == "tool_error" and a["toolcage.error.kind"] == "invalid_arguments", a
    assert a["gen_ai.tool.name"] == "echo" and a["network.transport"] == "pipe", a
    children = children_of(receiver, invalid)
    assert "toolcage.validate" in children, children
    assert not {"toolcage.slot_wait", "toolcage.run"} & children.keys(), children


@pytest.mark.anyio
async def test_a_call_waiting_for_a_slot_spends_its_slot_wait_span_waiting(
    config_file, otlp_receiver
):
    """One slot, two 300 ms calls at once: the second waits for the first,
    and its slot_wait child spans that wait, before its run."""
    receiver = otlp_receiver()
    server = StdioServerParameters(
        command=BIN,
        args=[*server_args(config_file), "--max-concurrent-calls", "1"],
        env=otel_variables(receiver.endpoint),
    )
    traces = [trace_context() for _ in range(2)]
    async with Client(server, mode="legacy") as client:

        async def call(meta):
            result = await client.call_tool("echo", {"text": "slow", "sleep_ms": 300}, meta=meta)
            assert not result.is_error

        async with anyio.create_task_group() as group:
            for _, _, meta in traces:
                group.start_soon(call, meta)
        spans = [
            (await off_loop(spans_under, receiver, trace_id, parent_id, "tools/call echo"))[0]
            for trace_id, parent_id, _ in traces
        ]

    waited = max(spans, key=lambda span: span.attributes["toolcage.call.slot_wait"])
    wait_s = waited.attributes["toolcage.call.slot_wait"]
    assert wait_s >= 0.2, [span.attributes for span in spans]
    children = children_of(receiver, waited)
    assert CHILDREN | {"toolcage.slot_wait"} <= children.keys(), children
    slot, run = children["toolcage.slot_wait"], children["toolcage.run"]
    assert abs((slot.end_ns - slot.start_ns) / 1e9 - wait_s) < 0.01, (slot, wait_s)
    assert slot.end_ns <= run.start_ns, (slot, run)


@pytest.mark.anyio
@pytest.mark.parametrize("sessions", [True, False], ids=["sessions", "stateless"])
async def test_an_http_call_span_has_tcp_and_the_session(
    config_file, toolcage, otlp_receiver, sessions
):
    receiver = otlp_receiver()
    flags = [] if sessions else ["--stateless"]
    _, url = serve_http(
        toolcage,
        [*server_args(config_file), "--http", "127.0.0.1:0", *flags],
        child_env(TOOLCAGE_TOKEN=TOKEN, **otel_variables(receiver.endpoint)),
    )
    session_ids = []
    traces = [trace_context() for _ in range(2)]
    async with http_client(url, session_ids=session_ids) as client:
        version = client.session.protocol_version
        for n, (_, _, meta) in enumerate(traces):
            result = await client.call_tool("echo", {"text": f"over http {n}"}, meta=meta)
            assert not result.is_error
        spans = [
            (await off_loop(spans_under, receiver, trace_id, parent_id, "tools/call echo"))[0]
            for trace_id, parent_id, _ in traces
        ]

    for span in spans:
        assert_mcp_call_span(span, "tcp", version)
        assert_succeeded(span)
        assert CHILDREN <= children_of(receiver, span).keys()
        if sessions:
            assert span.attributes["mcp.session.id"] == session_ids[0], span.attributes
        else:
            assert "mcp.session.id" not in span.attributes, span.attributes
    # One session throughout, or none at all.
    assert len(set(session_ids)) == (1 if sessions else 0), session_ids


# --- What is recorded of the content ------------------------------------------


def every_value(value):
    """`value` and, recursively, what lists and dicts hold."""
    yield value
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from every_value(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from every_value(inner)


def recorded_text(spans):
    """Every attribute key and value of `spans` (their events and resources
    included), as text."""
    return [
        str(value)
        for span in spans
        for holder in [span.attributes, span.resource, *(a for _, a in span.events)]
        for value in every_value(holder)
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("capture", [False, True], ids=["by-default", "when-asked"])
async def test_arguments_and_results_are_recorded_only_when_asked(
    config_file, otlp_receiver, capture
):
    receiver = otlp_receiver()
    variables = otel_variables(receiver.endpoint)
    if capture:
        variables["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    server = StdioServerParameters(command=BIN, args=server_args(config_file), env=variables)
    marker = f"marker-{secrets.token_hex(8)}"
    arguments = {"text": marker, "repeat": 2}
    trace_id, parent_id, meta = trace_context()
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("echo", arguments, meta=meta)
        assert result.content[0].text == marker * 2
        [span] = await off_loop(spans_under, receiver, trace_id, parent_id, "tools/call echo")

    a = span.attributes
    if capture:
        assert json.loads(a["gen_ai.tool.call.arguments"]) == arguments, a
        assert a["gen_ai.tool.call.result"] == marker * 2, a
    else:
        assert "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a, a
        # Nowhere else either, in any span the call made.
        assert not [text for text in recorded_text(receiver.spans) if marker in text]


# --- OTLP metrics -------------------------------------------------------------


@pytest.mark.anyio
async def test_otlp_metrics_name_the_tool_and_nothing_of_the_call(config_file, otlp_receiver):
    receiver = otlp_receiver()
    server = StdioServerParameters(
        command=BIN, args=server_args(config_file), env=otel_variables(receiver.endpoint)
    )
    marker = f"marker-{secrets.token_hex(8)}"
    async with Client(server, mode="legacy") as client:
        for _ in range(2):
            assert not (await client.call_tool("echo", {"text": marker})).is_error
        assert (await client.call_tool("misbehave", {"mode": "loop"})).is_error
        echo = {"gen_ai.tool.name": "echo", "network.transport": "pipe"}
        await off_loop(
            receiver.wait_for_total, "mcp.server.operation.duration",
            {**echo, "mcp.method.name": "tools/call"}, 2,
        )
        await off_loop(receiver.wait_for_total, "toolcage.calls", echo, 2)
        await off_loop(
            receiver.wait_for_total, "toolcage.calls",
            {"gen_ai.tool.name": "misbehave", "error.type": "out_of_fuel"}, 1,
        )
        for name in ["toolcage.call.duration", "toolcage.call.fuel",
                     "toolcage.call.memory.peak", "toolcage.call.slot_wait"]:
            await off_loop(receiver.wait_for_total, name, echo, 2)
        for name in ["toolcage.slots.busy", "toolcage.calls.stuck"]:
            await off_loop(receiver.wait_for_metric, name, lambda p: p.value == 0)

    by_name = {}
    for metric in receiver.metrics:
        by_name.setdefault(metric.name, metric)
    kinds = {name: (m.kind, m.unit) for name, m in by_name.items()}
    assert kinds["mcp.server.operation.duration"] == ("histogram", "s"), kinds
    assert kinds["toolcage.call.duration"] == ("histogram", "s"), kinds
    assert kinds["toolcage.call.fuel"][0] == "histogram", kinds
    assert kinds["toolcage.call.memory.peak"] == ("histogram", "By"), kinds
    assert kinds["toolcage.call.slot_wait"] == ("histogram", "s"), kinds
    assert kinds["toolcage.calls"][0] == "sum" and by_name["toolcage.calls"].monotonic, kinds

    for metric in receiver.metrics:
        if metric.name == "mcp.server.operation.duration":
            allowed = MCP_METRIC_ATTRIBUTES
        elif metric.name == "toolcage.tasks":
            allowed = {"toolcage.task.status"}
        elif metric.name.startswith("toolcage.state."):
            allowed = {"toolcage.state.operation", "toolcage.state.backend"}
        else:
            allowed = CALL_METRIC_ATTRIBUTES | MCP_METRIC_ATTRIBUTES
        for point in metric.points:
            assert point.attributes.keys() <= allowed, (metric.name, point.attributes)
            for value in point.attributes.values():
                assert isinstance(value, str), (metric.name, point.attributes)
                # Not an argument, a request id or a path.
                assert marker not in value and not value.isdigit(), (metric.name, value)
                assert not value.startswith("/") and TOOLS not in value, (metric.name, value)
            tool = point.attributes.get("gen_ai.tool.name")
            if metric.name == "toolcage.calls" and tool == "echo":
                assert "error.type" not in point.attributes, point.attributes


# --- The CLI ------------------------------------------------------------------


def test_a_cli_call_is_an_execute_tool_span_with_its_metrics(config_file, otlp_receiver):
    receiver = otlp_receiver()
    env = child_env(
        **otel_variables(receiver.endpoint, OTEL_SERVICE_NAME="toolcage-cli-test")
    )
    done = subprocess.run(
        [BIN, "--no-bundled", "--tools", TOOLS, "--config", config_file, "--fuel", str(FUEL_LIMIT),
         "--timeout-ms", "5000", "call", "echo", json.dumps({"text": "from the cli"})],
        capture_output=True, text=True, timeout=30, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "from the cli"
    # It exported them before it exited.
    [span] = receiver.wait_for_spans(lambda s: s.name == "execute_tool echo", timeout=2)
    assert span.kind == "INTERNAL" and span.parent_span_id == "", span
    assert span.resource.get("service.name") == "toolcage-cli-test", span.resource
    assert_call_attributes(span)
    assert_succeeded(span)
    outside = [k for k in span.attributes if k.split(".")[0] in ("mcp", "jsonrpc", "network")]
    assert not outside, span.attributes
    assert {"toolcage.validate", "toolcage.run"} <= children_of(receiver, span).keys()

    receiver.wait_for_total("toolcage.calls", {"gen_ai.tool.name": "echo"}, 1, timeout=2)
    for metric in receiver.metrics:
        for point in metric.points:
            assert "network.transport" not in point.attributes, (metric.name, point.attributes)


# --- The Prometheus endpoint --------------------------------------------------

# A sample line of the text format: name{labels} value.
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text):
    """The samples of a Prometheus text exposition: [(name, labels, value)]."""
    found = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            name, labels, value = match.groups()
            found.append((name, dict(LABEL.findall(labels or "")), float(value)))
    return found


def total(found, name, **labels):
    """The sum of the samples `name` whose labels include `labels`."""
    return sum(
        value for sample, have, value in found
        if sample == name and all(have.get(k) == v for k, v in labels.items())
    )


def assert_exposition(body, transport, calls, marker, session_ids=()):
    """/metrics: the echo calls counted in each metric the contract names,
    and no label naming a call's particulars."""
    found = samples(body)
    echo = {"gen_ai_tool_name": "echo", "network_transport": transport}
    assert total(found, "toolcage_calls_total", **echo) == calls, body
    for name in ["mcp_server_operation_duration_seconds", "toolcage_call_duration_seconds",
                 "toolcage_call_fuel", "toolcage_call_memory_peak_bytes",
                 "toolcage_call_slot_wait_seconds"]:
        assert total(found, f"{name}_count", **echo) == calls, (name, body)
        assert total(found, f"{name}_bucket", le="+Inf", **echo) == calls, (name, body)
        assert any(sample == f"{name}_sum" for sample, _, _ in found), (name, body)
    assert total(found, "mcp_server_operation_duration_seconds_count",
                 mcp_method_name="tools/call", **echo) == calls, body
    names = {sample for sample, _, _ in found}
    assert {"toolcage_slots_busy", "toolcage_calls_stuck"} <= names, sorted(names)
    for sample, labels, _ in found:
        assert not {"mcp_session_id", "jsonrpc_request_id"} & labels.keys(), (sample, labels)
        for value in labels.values():
            assert marker not in value and value not in session_ids, (sample, labels)


@pytest.mark.anyio
async def test_metrics_are_served_behind_the_token(config_file, toolcage):
    _, url = serve_http(
        toolcage,
        [*server_args(config_file), "--http", "127.0.0.1:0", "--metrics"],
        child_env(TOOLCAGE_TOKEN=TOKEN),
    )
    metrics = url.replace("/mcp", "/metrics")
    marker = f"marker-{secrets.token_hex(8)}"
    session_ids = []
    async with http_client(url, session_ids=session_ids) as client:
        for _ in range(3):
            assert not (await client.call_tool("echo", {"text": marker})).is_error

    assert (await off_loop(get, metrics))[0] == 401
    assert (await off_loop(get, metrics, token="wrong"))[0] == 401
    status, content_type, body = await off_loop(get, metrics, token=TOKEN)
    assert status == 200, body
    assert content_type.startswith("text/plain") and "version=0.0.4" in content_type, content_type
    assert_exposition(body, "tcp", 3, marker, session_ids)


def test_metrics_are_not_served_unless_asked(config_file, toolcage):
    _, url = serve_http(
        toolcage,
        [*server_args(config_file), "--http", "127.0.0.1:0"],
        child_env(TOOLCAGE_TOKEN=TOKEN),
    )
    assert get(url.replace("/mcp", "/metrics"), token=TOKEN)[0] == 404


def test_a_metrics_listener_of_its_own_needs_no_token_beside_stdio(config_file, toolcage):
    server = toolcage(
        [*server_args(config_file), "--metrics-addr", "127.0.0.1:0"],
        child_env(TOOLCAGE_TOKEN=TOKEN),
    )
    metrics = server.wait_for_stderr(SERVING_METRICS).group(1)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", metrics), metrics
    server.initialize()
    marker = f"marker-{secrets.token_hex(8)}"
    for _ in range(2):
        server.echo(marker)
    status, content_type, body = get(metrics)
    assert status == 200, body
    assert content_type.startswith("text/plain") and "version=0.0.4" in content_type, content_type
    assert_exposition(body, "pipe", 2, marker)
    assert get(metrics.replace("/metrics", "/mcp"))[0] == 404
    assert server.close_stdin() < EXIT_WITHIN_S


@pytest.mark.anyio
async def test_a_metrics_listener_of_its_own_needs_no_token_beside_http(config_file, toolcage):
    server = toolcage(
        [*server_args(config_file), "--http", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"],
        child_env(TOOLCAGE_TOKEN=TOKEN), stdio=False,
    )
    url = server.wait_for_stderr(SERVING_MCP).group(1)
    metrics = server.wait_for_stderr(SERVING_METRICS).group(1)
    assert metrics.rsplit(":", 1)[1] != url.rsplit(":", 1)[1], (url, metrics)
    async with http_client(url) as client:
        assert not (await client.call_tool("echo", {"text": "x"})).is_error

    status, _, body = await off_loop(get, metrics)
    assert status == 200, body
    assert total(samples(body), "toolcage_calls_total", gen_ai_tool_name="echo") == 1, body
    # Only /metrics there; /mcp keeps its token.
    assert (await off_loop(get, metrics.replace("/metrics", "/mcp")))[0] == 404
    assert (await off_loop(get, url))[0] == 401


@pytest.mark.anyio
async def test_prometheus_scrapes_the_metrics_with_the_token(
    config_file, toolcage, prometheus, tmp_path
):
    token = secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    _, url = serve_http(
        toolcage,
        [*server_args(config_file), "--http", "127.0.0.1:0", "--metrics",
         "--token-file", str(token_file)],
        child_env(),
    )
    scraper = await off_loop(prometheus, url.split("//")[1].split("/")[0], token=token)
    async with http_client(url, token=token) as client:
        for n in range(3):
            assert not (await client.call_tool("echo", {"text": str(n)})).is_error

    def reached(calls):
        return lambda series: sum(value for _, value in series) >= calls

    for expr in ['toolcage_calls_total{gen_ai_tool_name="echo"}',
                 'mcp_server_operation_duration_seconds_count{gen_ai_tool_name="echo"}']:
        series = await off_loop(scraper.wait_for_query, expr, reached(3), timeout=20)
        for labels, _ in series:
            assert labels["job"] == "toolcage" and labels["network_transport"] == "tcp", labels
    [(_, up)] = await off_loop(scraper.query, 'up{job="toolcage"}')
    assert up == 1


# --- Off by default -----------------------------------------------------------


def assert_no_telemetry(server):
    """Neither an exporter thread nor a network socket, now or a moment
    later."""
    for _ in range(2):
        assert not server.exporter_threads(), server.thread_names()
        assert not server.network_sockets(), server.network_sockets()
        time.sleep(0.5)


@pytest.mark.parametrize("disabled", [False, True], ids=["no-endpoint", "sdk-disabled"])
def test_telemetry_is_off_unless_an_endpoint_is_set(config_file, toolcage, otlp_receiver, disabled):
    receiver = otlp_receiver()
    if disabled:
        env = child_env(OTEL_SDK_DISABLED="true", **otel_variables(receiver.endpoint))
    else:
        env = child_env()
    server = toolcage(server_args(config_file), env)
    server.initialize()
    server.echo("quiet")
    assert_no_telemetry(server)
    assert server.close_stdin() < EXIT_WITHIN_S
    assert not server.dropped(), server.stderr
    assert not receiver.requests, receiver.requests


def test_telemetry_runs_threads_of_its_own_with_an_endpoint(config_file, toolcage, otlp_receiver):
    receiver = otlp_receiver()
    server = toolcage(server_args(config_file), child_env(**otel_variables(receiver.endpoint)))
    server.initialize()
    server.echo("exported")
    deadline = time.monotonic() + 5
    while not server.exporter_threads():
        assert time.monotonic() < deadline, server.thread_names()
        time.sleep(0.05)
    receiver.wait_for_spans(lambda s: s.name == "tools/call echo")
    assert server.close_stdin() < EXIT_WITHIN_S
    assert not server.dropped(), server.stderr


# --- A collector in trouble ---------------------------------------------------

CALLS = 20


def timed_calls(server):
    """Initializes, warms up, then times CALLS echo calls one after another."""
    server.initialize()
    server.echo("warm-up")
    began = time.monotonic()
    for n in range(CALLS):
        server.echo(f"call {n}")
    return time.monotonic() - began


@pytest.mark.parametrize("collector", ["refused", "unavailable", "hang"])
def test_a_broken_collector_slows_no_call_and_no_exit(
    config_file, toolcage, otlp_receiver, collector
):
    """Against a port refusing connections, a collector answering 503 and
    one never answering (an export stuck in it from the first batch on): 20
    calls take as long as without telemetry, give their results, and the
    end of stdin still stops toolcage within 5 s, saying what it dropped."""
    baseline = toolcage(server_args(config_file), child_env())
    without = timed_calls(baseline)
    assert baseline.close_stdin() < EXIT_WITHIN_S
    with ExitStack() as stack:
        receiver = None
        if collector == "refused":
            endpoint = stack.enter_context(otlp.refused_endpoint())
        else:
            receiver = otlp_receiver("refuse" if collector == "unavailable" else "hang")
            endpoint = receiver.endpoint
        server = toolcage(
            server_args(config_file),
            child_env(**otel_variables(
                endpoint, OTEL_BSP_SCHEDULE_DELAY="50", OTEL_METRIC_EXPORT_INTERVAL="100"
            )),
        )
        took = timed_calls(server)
        if receiver:
            # An export reached it (and, for `hang`, is stuck there).
            receiver.wait_for_requests(1, timeout=5)
        exit_took = server.close_stdin()

    assert took <= without * 1.5 + 0.5, f"{took:.3f} s against {without:.3f} s without telemetry"
    assert exit_took <= EXIT_WITHIN_S + EXIT_SLACK_S, f"exited {exit_took:.2f} s after stdin closed"
    assert server.process.returncode == 0, server.stderr
    assert len(server.dropped()) == 1, server.stderr


@pytest.mark.anyio
async def test_a_hanging_collector_holds_up_no_sigterm(config_file, toolcage, otlp_receiver):
    receiver = otlp_receiver("hang")
    server, url = serve_http(
        toolcage,
        [*server_args(config_file), "--http", "127.0.0.1:0"],
        child_env(TOOLCAGE_TOKEN=TOKEN, **otel_variables(
            receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="50", OTEL_METRIC_EXPORT_INTERVAL="100"
        )),
    )
    async with http_client(url) as client:
        for n in range(5):
            result = await client.call_tool("echo", {"text": f"call {n}"})
            assert result.content[0].text == f"call {n}"
    await off_loop(receiver.wait_for_requests, 1, timeout=5)

    took = await off_loop(server.terminate)
    assert took <= EXIT_WITHIN_S + EXIT_SLACK_S, f"exited {took:.2f} s after SIGTERM"
    assert server.process.returncode == 0, server.stderr
    assert len(server.dropped()) == 1, server.stderr
