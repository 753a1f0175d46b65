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
import urllib.request

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
