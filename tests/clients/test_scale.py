"""Scale-out and load, seen from the official MCP Python SDK.

- Three `toolcage serve --http --stateless` replicas behind a real nginx
  running `deploy/nginx.conf` (only its ports changed): calls are spread over
  the replicas; one replica is killed (SIGKILL) with calls in flight on it;
  those calls, and only those, fail with a clear error at the client, every
  other call gets its own result, and later calls go to the other replicas
  (a connection the dead replica refuses is retried on another one).
- One replica stopped with SIGTERM mid-run: its calls in flight finish
  there, and no call is lost.
- One `toolcage serve --http` answering 1,000 concurrent calls, each exactly
  once with its own result, among them calls that loop, hog memory and flood
  output; and 1,000 concurrent calls from one SDK client.

nginx must be installed (`apt-get install nginx`; `.ci/run` installs it).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import TOOLS, launch_http, start_http

pytestmark = pytest.mark.anyio

NGINX_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
META = "dev.toolcage/call"

# The wrapper around the deployed file: what /etc/nginx/nginx.conf would
# give it, with every path in the test's own directory. The access log
# records, per request, which call it belongs to (the X-Call header the test
# sends), its MCP method, when it started and ended, and the replicas nginx
# tried.
NGINX_MAIN = """
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
worker_processes 1;
events {{ worker_connections 1024; }}
http {{
    log_format calls '$msec $request_time $request_method "$http_x_call" '
                     '"$http_mcp_method" "$upstream_addr" "$upstream_status" $status';
    access_log {dir}/access.log calls;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/toolcage.conf;
}}
"""


def nginx_binary():
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)),
        None,
    )
    if found is None:
        pytest.fail(
            "nginx is not installed; the scale-out test runs the real one: "
            "run `apt-get install nginx` (.ci/run does)"
        )
    return found


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def deployed_config(replicas, port):
    """deploy/nginx.conf with its three replicas and its listening port
    replaced: nothing else changes."""
    site = NGINX_CONF.read_text()
    listed = re.findall(r"^\s*server (127\.0\.0\.1:\d+) ", site, re.MULTILINE)
    assert len(listed) == len(replicas) == 3, listed
    for old, new in zip(listed, replicas):
        site = site.replace(f"server {old} ", f"server {new} ", 1)
    site, listens = re.subn(r"listen 127\.0\.0\.1:\d+;", f"listen 127.0.0.1:{port};", site)
    assert listens == 1
    fail_timeout = re.findall(r"fail_timeout=(\d+)s", site)
    assert len(set(fail_timeout)) == 1, "one fail_timeout for every replica"
    return site, int(fail_timeout[0])


@dataclass
class Balancer:
    url: str
    replicas: list  # of (process, "127.0.0.1:port")
    access_log: Path
    fail_timeout: int

    def log(self):
        """The access log: one dict per request."""
        pattern = re.compile(
            r'^(\S+) (\S+) (\S+) "(.*?)" "(.*?)" "(.*?)" "(.*?)" (\d+)$'
        )
        entries = []
        for line in self.access_log.read_text().splitlines():
            match = pattern.match(line)
            assert match, f"an access log line not in the test's format: {line}"
            end, duration, verb, call, method, upstream, upstream_status, status = (
                match.groups()
            )
            entries.append({
                "start": float(end) - float(duration),
                "end": float(end),
                "verb": verb,
                "call": call,
                "method": method,
                "upstream": upstream,
                "upstream_status": upstream_status,
                "status": int(status),
            })
        return entries


@pytest.fixture
def balancer(config_file):
    nginx = nginx_binary()
    replicas = [start_http(config_file, "--stateless") for _ in range(3)]
    addresses = [re.match(r"http://([^/]+)/mcp$", url).group(1) for _, url in replicas]
    directory = Path(tempfile.mkdtemp(prefix="toolcage-nginx-"))
    # nginx's workers (user nobody when started as root) create and use the
    # temporary directories in here.
    directory.chmod(0o755)
    port = free_port()
    site, fail_timeout = deployed_config(addresses, port)
    (directory / "toolcage.conf").write_text(site)
    main = directory / "nginx.conf"
    main.write_text(NGINX_MAIN.format(dir=directory))
    command = [nginx, "-e", str(directory / "error.log"), "-p", str(directory), "-c", str(main)]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, f"nginx -t refused deploy/nginx.conf:\n{checked.stderr}"
    server = subprocess.Popen([*command, "-g", "daemon off;"])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                health = httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if health.status_code == 200:
                    assert health.text == "ok\n"
                    break
            except httpx2.TransportError:
                pass
            assert server.poll() is None, (directory / "error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not pass /healthz through"
            time.sleep(0.05)
        yield Balancer(
            url=f"http://127.0.0.1:{port}/mcp",
            replicas=[(process, address) for (process, _), address in zip(replicas, addresses)],
            access_log=directory / "access.log",
            fail_timeout=fail_timeout,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
        for process, _ in replicas:
            if process.poll() is None:
                process.terminate()
                assert process.wait(timeout=30) == 0, "a replica did not stop cleanly"
        shutil.rmtree(directory, ignore_errors=True)


async def sdk_call(url, call, text, sleep_ms, calling=None):
    """One call from its own SDK client (2026-07-28, no session), its requests
    marked with `X-Call: call`: the result, or the MCPError it raised.
    `calling`, if given, is called as the tools/call is sent."""
    async with httpx2.AsyncClient(headers={"X-Call": call}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
            if calling:
                calling()
            try:
                return await client.call_tool("echo", {"text": text, "sleep_ms": sleep_ms})
            except MCPError as error:
                return error


def assert_own_result(call, text, outcome):
    assert not isinstance(outcome, MCPError), f"{call} failed: {outcome}"
    assert not outcome.is_error, f"{call}: {outcome.content}"
    assert outcome.content[0].text == text, f"{call} got another call's result"
    assert outcome.structured_content == {"length": len(text)}


async def test_a_replica_killed_mid_run_fails_only_its_calls_in_flight(balancer):
    """120 slow calls (0.9 to 1.5 s each), 24 at a time, about 8 in flight on
    each replica; one replica is killed with SIGKILL once 9 calls are surely
    in flight. Then, once nginx's fail_timeout has passed, 30 more
    calls."""
    victim, victim_address = balancer.replicas[0]
    wave, concurrency = 120, 24
    outcomes = {}
    sent = {}  # call -> when its tools/call was sent

    async def one(call, sleep_ms, limit):
        async with limit:
            text = f"{call}: its own text"

            def calling():
                sent[call] = time.monotonic()

            outcome = await sdk_call(balancer.url, call, text, sleep_ms, calling)
            outcomes[call] = (text, outcome)

    def surely_in_flight():
        """Calls sent 0.2 to 0.8 s ago: at a replica by now (a request takes
        milliseconds), and still sleeping there (each sleeps 0.9 s or more)."""
        now = time.monotonic()
        return [c for c, t in sent.items() if c not in outcomes and 0.2 <= now - t <= 0.8]

    with anyio.fail_after(60):
        limit = anyio.Semaphore(concurrency)
        async with anyio.create_task_group() as group:
            for i in range(wave):
                # Durations of their own, so that the calls do not move in
                # lockstep waves with gaps between them.
                group.start_soon(one, f"before-{i}", 900 + (i * 137) % 600, limit)
            # Once the first round has been answered (by every replica), and
            # at least 9 calls (about 3 per replica) are in flight.
            while len(outcomes) < concurrency or len(surely_in_flight()) < 9:
                assert len(outcomes) < wave / 2, "never 9 calls in flight at once"
                await anyio.sleep(0.01)
            victim.kill()
            killed_at = time.time()
            victim.wait()
        # nginx leaves the dead replica out for fail_timeout, then tries it
        # again: with a real request, whose connection is refused.
        await anyio.sleep(max(0.0, killed_at + balancer.fail_timeout + 0.5 - time.time()))
        limit = anyio.Semaphore(6)
        async with anyio.create_task_group() as group:
            for i in range(30):
                group.start_soon(one, f"after-{i}", 0, limit)

    log = balancer.log()
    by_call = {}
    for entry in log:
        by_call.setdefault(entry["call"], []).append(entry)
    replicas = [address for _, address in balancer.replicas]

    # Before the kill, the calls were spread over all three replicas.
    served = {e["upstream"] for e in log if e["status"] == 200 and e["end"] < killed_at}
    assert set(replicas) <= served, served

    failed = []
    for call, (text, outcome) in outcomes.items():
        requests = by_call[call]
        if isinstance(outcome, MCPError):
            # A clear error at the client, naming the replica that failed.
            assert outcome.code == -32603
            assert outcome.error.message.startswith(
                "Bad Gateway: no toolcage replica answered this request "
                f"(nginx tried {victim_address}: 502)."
            ), outcome.error.message
            # Its request died on the killed replica, in flight at the kill,
            # and was not sent again.
            [lost] = [e for e in requests if e["status"] != 200]
            assert (lost["status"], lost["upstream"]) == (502, victim_address), lost
            assert lost["start"] - 0.05 <= killed_at <= lost["end"] + 0.05, (lost, killed_at)
            failed.append(call)
        else:
            assert_own_result(call, text, outcome)
            assert all(e["status"] == 200 for e in requests), requests
    around = [e for e in log if e["start"] - 2 < killed_at < e["end"] + 2]
    assert failed, f"the kill hit no call in flight; killed at {killed_at}: {around}"
    assert len(failed) <= concurrency, failed
    assert all(call.startswith("before-") for call in failed)
    # Every request that reached the killed replica and was in flight when
    # it died failed: none was answered twice, none silently.
    for entry in log:
        if entry["upstream"] == victim_address and entry["start"] < killed_at < entry["end"] - 0.2:
            assert entry["status"] == 502 and entry["call"] in failed, entry

    # A request that nginx sent to the dead replica after the kill (once
    # fail_timeout was over) was refused a connection, and retried on another
    # replica, though it is a POST.
    for entry in log:
        if entry["start"] > killed_at + 0.05 and victim_address in entry["upstream"]:
            tried = entry["upstream"].split(", ")
            assert tried[0] == victim_address and tried[1] in replicas[1:], entry
            assert entry["upstream_status"] == "502, 200" and entry["status"] == 200, entry
    retried = [
        e for e in log
        if e["call"].startswith("after-") and e["upstream"].startswith(f"{victim_address}, ")
    ]
    assert retried, "no request tried the dead replica once its fail_timeout was over"
    # MCP requests are all POSTs (tools/call, or the SDK's tools/list).
    assert all(e["verb"] == "POST" for e in retried), retried


async def test_a_replica_stopped_with_sigterm_finishes_its_calls_and_loses_none(balancer):
    """A rolling restart's stop: 90 calls of 0.9 to 1.5 s, 24 at a time; one
    replica gets SIGTERM with calls in flight on it. They finish there, with
    their results; later requests go to the other replicas; no call fails."""
    stopping, stopping_address = balancer.replicas[1]
    wave, concurrency = 90, 24
    outcomes, sent = {}, {}

    async def one(call, sleep_ms, limit):
        async with limit:
            text = f"{call}: its own text"

            def calling():
                sent[call] = time.monotonic()

            outcomes[call] = (text, await sdk_call(balancer.url, call, text, sleep_ms, calling))

    with anyio.fail_after(60):
        limit = anyio.Semaphore(concurrency)
        async with anyio.create_task_group() as group:
            for i in range(wave):
                group.start_soon(one, f"call-{i}", 900 + (i * 137) % 600, limit)
            while len(outcomes) < concurrency:
                await anyio.sleep(0.01)
            stopping.send_signal(signal.SIGTERM)
            stopped_at = time.time()
            # It exits 0 once its calls in flight have answered.
            await anyio.to_thread.run_sync(lambda: stopping.wait(timeout=30))
            assert stopping.returncode == 0
    for call, (text, outcome) in outcomes.items():
        assert_own_result(call, text, outcome)
    log = balancer.log()
    assert all(e["status"] == 200 for e in log), [e for e in log if e["status"] != 200]
    # Calls were in flight on it at the SIGTERM, and finished there.
    finished_there = [
        e for e in log
        if e["upstream"] == stopping_address and e["method"] == "tools/call"
        and e["start"] < stopped_at < e["end"]
    ]
    assert finished_there, "no call was in flight on the stopped replica"


# --- 1,000 concurrent calls on one server -----------------------------------

CALLS = 1_000
CONNECTIONS = 100

# One call in five misbehaves, in turn: each mode, its arguments, and how it
# must end (the error kind, or None for success).
MISDEEDS = [
    ("loop", {"mode": "loop"}, "out_of_fuel"),
    ("hog", {"mode": "hog"}, "memory_limit"),
    ("huge_output", {"mode": "huge_output", "amount": 1 << 20}, "output_limit"),
    ("flood", {"mode": "print", "amount": 2 << 20}, None),
]


@pytest.fixture(scope="module")
def load_server():
    """A stateless server with tight limits for the misbehaving calls, and
    room for the good ones to wait for a slot."""
    server, url = launch_http([
        "--no-bundled", "--tools", TOOLS,
        "--fuel", "100000000", "--memory-mib", "16", "--output-kib", "64",
        "--timeout-ms", "60000",
        "serve", "--http", "127.0.0.1:0", "--stateless",
    ])
    yield url
    server.terminate()
    assert server.wait(timeout=30) == 0


def request(i):
    if i % 5 == 4:
        _, arguments, _ = MISDEEDS[(i // 5) % len(MISDEEDS)]
        params = {"name": "misbehave", "arguments": arguments}
    else:
        params = {"name": "echo", "arguments": {"text": f"call {i}", "repeat": 2}}
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}


async def test_a_thousand_concurrent_calls_each_answered_once_with_its_own_result(load_server):
    """Raw JSON-RPC over 100 connections, so that the ids on the wire are
    checked: 800 echo calls and 200 misbehaving ones, all sent at once."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    limits = httpx2.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    replies = {}
    with anyio.fail_after(60):
        async with httpx2.AsyncClient(headers=headers, limits=limits, timeout=60) as http:

            async def one(i):
                response = await http.post(load_server, json=request(i))
                assert response.status_code == 200, response.text
                # A stateless server answers a call as one JSON message.
                assert response.headers["content-type"].startswith("application/json")
                replies.setdefault(i, []).append(json.loads(response.text))

            async with anyio.create_task_group() as group:
                for i in range(CALLS):
                    group.start_soon(one, i)

    assert sorted(replies) == list(range(CALLS))
    stopped = {name: 0 for name, _, _ in MISDEEDS}
    for i, answers in replies.items():
        [reply] = answers
        assert reply["id"] == i, f"call {i} got the reply to {reply['id']}"
        result = reply["result"]
        kind = result["_meta"][META]["error_kind"]
        if i % 5 == 4:
            name, _, expected = MISDEEDS[(i // 5) % len(MISDEEDS)]
            assert kind == expected, (name, result)
            assert result.get("isError", False) == (expected is not None), (name, result)
            stopped[name] += 1
        else:
            assert kind is None and not result.get("isError", False), result
            assert result["content"][0] == {"type": "text", "text": f"call {i}" * 2}
            assert result["structuredContent"] == {"length": 2 * len(f"call {i}")}
    assert stopped == {name: 50 for name, _, _ in MISDEEDS}


async def test_a_thousand_concurrent_calls_from_one_sdk_client(load_server):
    limits = httpx2.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    results = {}
    with anyio.fail_after(60):
        async with httpx2.AsyncClient(limits=limits, timeout=60) as http:
            async with Client(
                streamable_http_client(load_server, http_client=http), mode="2026-07-28"
            ) as client:

                async def one(i):
                    results[i] = await client.call_tool("echo", {"text": f"sdk call {i}"})

                async with anyio.create_task_group() as group:
                    for i in range(CALLS):
                        group.start_soon(one, i)
    assert sorted(results) == list(range(CALLS))
    for i, result in results.items():
        assert_own_result(f"sdk call {i}", f"sdk call {i}", result)
