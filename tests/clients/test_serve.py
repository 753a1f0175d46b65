"""`toolcage serve`'s life cycle, seen from outside: graceful shutdown on
SIGTERM and at the end of stdin with calls in flight, and stateless replicas."""

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import BIN, INITIALIZE, server_args, start_http

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def slow_call(id, ms=800):
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": f"slow {id}", "sleep_ms": ms}},
    }


def start_stdio(config_file):
    return subprocess.Popen(
        [BIN, *server_args(config_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def responses(stdout):
    return {m["id"]: m for m in map(json.loads, stdout.splitlines()) if "id" in m}


def test_stdio_end_of_input_waits_for_calls_in_flight(config_file):
    server = start_stdio(config_file)
    lines = [INITIALIZE, INITIALIZED, slow_call(2)]
    stdout, _ = server.communicate("".join(json.dumps(m) + "\n" for m in lines), timeout=30)
    assert server.returncode == 0
    result = responses(stdout)[2]["result"]
    assert result["content"][0]["text"] == "slow 2"


def test_stdio_sigterm_finishes_calls_in_flight(config_file):
    server = start_stdio(config_file)
    for message in [INITIALIZE, INITIALIZED, slow_call(2)]:
        server.stdin.write(json.dumps(message) + "\n")
    server.stdin.flush()
    time.sleep(0.3)
    server.send_signal(signal.SIGTERM)
    stdout, _ = server.communicate(timeout=30)
    assert server.returncode == 0
    assert responses(stdout)[2]["result"]["content"][0]["text"] == "slow 2"


def test_stdio_answers_a_request_that_is_not_unicode_and_goes_on(config_file):
    # Bytes, as a client writes them: a lone surrogate, a byte that is not
    # UTF-8, then a good call. Each request gets its answer.
    server = subprocess.Popen(
        [BIN, *server_args(config_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines = [
        json.dumps(INITIALIZE).encode(),
        json.dumps(INITIALIZED).encode(),
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"text":"\\ud800"}}}',
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"text":"a\xffb"}}}',
        json.dumps(slow_call(5, ms=0)).encode(),
    ]
    stdout, _ = server.communicate(b"".join(line + b"\n" for line in lines), timeout=30)
    assert server.returncode == 0
    answered = responses(stdout.decode())
    for request_id in (3, 4):
        error = answered[request_id]["error"]
        assert error["code"] == -32700, error
        assert "not valid JSON text" in error["message"], error
    assert answered[5]["result"]["content"][0]["text"] == "slow 5"


def post(url, message, session=None):
    """POSTs one JSON-RPC message; returns (reply, session id)."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if session:
        headers["Mcp-Session-Id"] = session
    request = urllib.request.Request(url, json.dumps(message).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read().decode()
        session = response.headers.get("Mcp-Session-Id")
    if body.lstrip().startswith("{"):
        return json.loads(body), session
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip():
            data = json.loads(line[5:])
            if "id" in data:
                return data, session
    return None, session


def test_sigterm_stops_a_server_whose_stderr_was_closed(config_file):
    """Whoever read the server's stderr went away: stopping must not need it."""
    server = subprocess.Popen(
        [BIN, *server_args(config_file), "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in server.stderr:
        if "serving MCP at" in line:
            break
    server.stderr.close()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0


def test_http_sigterm_finishes_calls_in_flight_with_a_stream_open(config_file):
    server, url = start_http(config_file)
    reply, session = post(url, INITIALIZE)
    assert session, "a session-mode server gives a session id"
    post(url, INITIALIZED, session)
    # A client's standalone event stream, held open throughout.
    stream = urllib.request.urlopen(
        urllib.request.Request(
            url,
            headers={"Accept": "text/event-stream", "Mcp-Session-Id": session,
                     "MCP-Protocol-Version": "2025-06-18"},
        ),
        timeout=30,
    )
    result = {}
    call = threading.Thread(target=lambda: result.update(post(url, slow_call(2), session)[0]))
    call.start()
    time.sleep(0.3)
    server.send_signal(signal.SIGTERM)
    call.join(timeout=30)
    assert result["result"]["content"][0]["text"] == "slow 2"
    assert server.wait(timeout=30) == 0
    stream.close()


def test_a_client_stalled_mid_request_delays_a_shutdown_only_so_long(config_file):
    """A connection holding half a request head is never answered; at
    SIGTERM the server still exits, after IDLE_GRACE (1 s) and
    STRAGGLER_GRACE (5 s) at the most."""
    server, url = start_http(config_file, "--stateless")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as stalled:
        stalled.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.2)
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        took = time.monotonic() - began
    assert 5 <= took <= 6 + 2, took


def test_stateless_replicas_serve_any_request(config_file):
    first, first_url = start_http(config_file, "--stateless")
    second, second_url = start_http(config_file, "--stateless")
    try:
        reply, session = post(first_url, INITIALIZE)
        assert reply["result"]["serverInfo"]["name"] == "toolcage"
        assert session is None, "a stateless server keeps no session"
        call = {**slow_call(2, ms=1), "id": 2}
        reply, _ = post(second_url, call)
        assert reply["result"]["content"][0]["text"] == "slow 2"
    finally:
        for server in (first, second):
            server.terminate()
            assert server.wait(timeout=30) == 0


def exchange(url, message, headers=None):
    """POSTs one JSON-RPC message: (status, media type, the messages answered
    in order), each result's timings taken out."""
    request = urllib.request.Request(
        url,
        json.dumps(message).encode(),
        {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
            **(headers or {}),
        },
    )
    try:
        response = urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as refusal:
        response = refusal
    with response:
        status, body = response.status, response.read().decode()
        media_type = response.headers.get("Content-Type", "").split(";")[0]
    if media_type == "text/event-stream":
        messages = [
            json.loads(line[5:]) for line in body.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    else:
        messages = [json.loads(body)] if body.lstrip().startswith("{") else [body]
    for message in messages:
        call = message.get("result", {}).get("_meta", {}).get("dev.toolcage/call", {}) \
            if isinstance(message, dict) else {}
        for timing in ("duration_ms", "slot_wait_ms"):
            call.pop(timing, None)
    return status, media_type, messages


def test_a_plain_stateless_call_is_answered_as_rmcp_answers_it(config_file):
    """A stateless `tools/call` without `_meta` is answered by toolcage
    itself (host/src/mcp/http/direct.rs), one with `_meta` by rmcp's
    per-request service: the two answer alike, whether a result, a tool
    error, a denial, an approval this client cannot give, a protocol error,
    or a tool's warning sent ahead of its result as an event stream. Heads
    rmcp refuses are still refused by rmcp, whatever the body."""
    server, url = start_http(config_file, "--stateless")
    cases = {
        "result": ("echo", {"text": "same"}),
        "bad arguments": ("echo", {"txt": 1}),
        "denied": ("counter", {}),
        "ask": ("fail", {"why": "testing"}),
        "unknown tool": ("nonexistent", {}),
        "warning": ("misbehave", {"mode": "warn"}),
    }
    try:
        answers = {}
        for case, (name, arguments) in cases.items():
            params = {"name": name, "arguments": arguments}
            plain = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
            with_meta = {**plain, "params": {**params, "_meta": {"dev.toolcage/test": 1}}}
            direct, through_rmcp = exchange(url, plain), exchange(url, with_meta)
            assert direct == through_rmcp, case
            answers[case] = direct
        assert answers["result"][1] == "application/json"
        assert answers["result"][2][0]["result"]["content"][0]["text"] == "same"
        assert answers["bad arguments"][2][0]["result"]["isError"] is True
        assert "error" in answers["unknown tool"][2][0]
        assert "cannot ask its user" in json.dumps(answers["ask"][2])
        status, media_type, messages = answers["warning"]
        assert (status, media_type) == (200, "text/event-stream")
        assert messages[0]["method"] == "notifications/message"
        assert messages[0]["params"]["level"] == "warning"
        assert messages[-1]["result"]["content"][0]["text"] == "warned"

        call = {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "x"}}}
        refused = {
            "a newer revision without _meta": ({"MCP-Protocol-Version": "2026-07-28"}, 400),
            "an unknown revision": ({"MCP-Protocol-Version": "2099-01-01"}, 400),
            "a zero weight": ({"Accept": "application/json, text/event-stream;q=0"}, 406),
            "a foreign Host": ({"Host": "evil.example"}, 403),
            "an Origin": ({"Origin": "http://evil.example"}, 403),
        }
        for case, (headers, status) in refused.items():
            assert exchange(url, call, headers)[0] == status, case
        # Only `/mcp` serves calls; a response's fields beside a request's
        # make the message invalid (rmcp: 415).
        assert exchange(url.replace("/mcp", "/other"), call)[0] == 404
        assert exchange(url, {**call, "result": {}})[0] == 415
        # Whatever rmcp answers for a batch, it is not a call's result.
        batch = exchange(url, [call])
        assert batch[0] != 200 or "result" not in json.dumps(batch[2]), batch
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


@pytest.mark.anyio
async def test_the_python_sdk_is_answered_on_the_direct_path(config_file):
    """The official SDK, on a revision before 2026-07-28, against a
    stateless server: its calls are plain (no `_meta`, an older
    MCP-Protocol-Version), so toolcage answers them itself, and the SDK reads
    the results, a tool error, and a tool's warning sent ahead of its result
    as an event stream."""
    server, url = start_http(config_file, "--stateless")
    calls = []

    async def record(request):
        body = json.loads(request.content or b"{}")
        if isinstance(body, dict) and body.get("method") == "tools/call":
            calls.append((request.headers.get("mcp-protocol-version"), body))

    logs = []

    async def on_log(params):
        logs.append((params.level, params.data))

    try:
        async with httpx2.AsyncClient(timeout=30, event_hooks={"request": [record]}) as http:
            async with Client(
                streamable_http_client(url, http_client=http),
                mode="legacy",
                logging_callback=on_log,
            ) as client:
                result = await client.call_tool("echo", {"text": "direct"})
                assert result.content[0].text == "direct"
                assert result.structured_content == {"length": 6}
                wrong = await client.call_tool("echo", {"txt": 1})
                assert wrong.is_error
                warned = await client.call_tool("misbehave", {"mode": "warn"})
                assert warned.content[0].text == "warned"
        assert ("warning", "misbehave warns, as asked") in logs
        # What makes them plain: direct.rs takes each of them.
        assert len(calls) == 3
        for version, body in calls:
            assert version is not None and version < "2026-07-28", version
            assert not body["params"].get("_meta"), body
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_allowed_host_names_are_served_and_others_refused(config_file):
    """Behind a Kubernetes Service or a balancer that keeps the client's Host,
    requests name the server by a name the operator allows with
    --allow-host; other names are still refused (DNS rebinding)."""
    server, url = start_http(
        config_file, "--stateless",
        "--allow-host", "toolcage.tools.svc", "--allow-host", "mcp.example:8443",
    )
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    body = json.dumps({**slow_call(3, ms=1), "id": 3})
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    try:
        statuses = {}
        for host in ["toolcage.tools.svc", "toolcage.tools.svc:8080", "mcp.example:8443",
                     "mcp.example:9000", "mcp.example", "evil.example",
                     f"127.0.0.1:{port}"]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/mcp", body, {**headers, "Host": host})
            response = connection.getresponse()
            statuses[host] = response.status
            if response.status == 200:
                assert json.loads(response.read())["result"]["content"][0]["text"] == "slow 3"
            connection.close()
        assert statuses == {
            "toolcage.tools.svc": 200,
            "toolcage.tools.svc:8080": 200,
            "mcp.example:8443": 200,
            "mcp.example:9000": 403,
            "mcp.example": 403,
            "evil.example": 403,
            f"127.0.0.1:{port}": 200,
        }
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_allow_host_needs_http(config_file):
    done = subprocess.run(
        [BIN, *server_args(config_file), "--allow-host", "toolcage.tools.svc"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2, done
    assert "--allow-host apply to --http only" in done.stderr
