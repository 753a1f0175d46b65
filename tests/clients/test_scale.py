"""Scale-out and load, seen from the official MCP Python SDK.

- Three `toolcage serve --http --stateless` replicas behind a real nginx
  running `deploy/nginx.conf` (only its ports changed): calls are spread over
  the replicas; one replica is killed (SIGKILL) with calls in flight on it;
  those calls, and only those, fail with a clear error at the client, every
  other call gets its own result, and later calls go to the other replicas
  (a connection the dead replica refuses is retried on another one).
- One replica stopped with SIGTERM mid-run: its calls in flight finish
  there, and no call is lost; twenty such stops and restarts under steady
  load through keep-alive upstream connections lose no request either.
- Refusals (401, 403, 413) of requests with 1 to 12 MiB bodies pass through
  nginx as themselves, never as 502, and leave every replica in the pool,
  behind deploy/nginx.conf and behind a plain site.
- Tasks behind deploy/nginx.conf: each replica runs with `--task-route`
  (the conf's port for it), and nginx sends a `tasks/*` request, by its
  `Mcp-Name` header, to the replica that made the task, so calls that
  become tasks on any replica resolve, and a cancel reaches the task; a
  task whose replica is down gets the conf's JSON 502. Behind a plain site
  (no routing) the same polls reach other replicas, which say whose task
  it is.
- One `toolcage serve --http` answering 1,000 concurrent calls, each exactly
  once with its own result, among them calls that loop, hog memory and flood
  output; and 1,000 concurrent calls from one SDK client.

nginx is Debian's, fetched into target/nginx with `apt-get download` by
tests/all/clients.rs (never installed), and named in TOOLCAGE_NGINX.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import tasks
from conftest import TOKEN, TOOLS, launch_http, server_args

pytestmark = pytest.mark.anyio

NGINX_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
META = "dev.toolcage/call"

# The wrapper around the deployed file: what /etc/nginx/nginx.conf would
# give it, with every path in the test's own directory. The access log
# records, per request, which call it belongs to (the X-Call header the test
# sends), its MCP method and name (the Mcp-Method and Mcp-Name headers), when
# it started and ended, and the replicas nginx tried.
NGINX_MAIN = """
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
worker_processes 1;
events {{ worker_connections 1024; }}
http {{
    log_format calls '$msec $request_time $request_method "$http_x_call" '
                     '"$http_mcp_method" "$http_mcp_name" "$upstream_addr" '
                     '"$upstream_status" $status';
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
    """Debian's nginx, which tests/all/clients.rs fetches into target/nginx
    (tests/src/lib.rs) and names in TOOLCAGE_NGINX."""
    found = os.environ.get("TOOLCAGE_NGINX")
    if not found or not os.access(found, os.X_OK):
        pytest.fail(
            f"TOOLCAGE_NGINX={found!r} is no program; `cargo test -p toolcage-tests --test all clients` "
            "fetches Debian's nginx into target/nginx and sets it"
        )
    return found


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def block(site, head):
    """The body of the `head { ... }` block of `site`, whose `}` is indented
    as `head` is."""
    indent = re.match(r"\s*", head).group(0)
    found = re.findall(
        rf"^{re.escape(head)} \{{\n(.*?)^{indent}\}}$", site, re.MULTILINE | re.DOTALL
    )
    assert len(found) == 1, f"deploy/nginx.conf must have one `{head}` block"
    return found[0]


def deployed_pool():
    """The replicas deploy/nginx.conf lists in its pool, in order:
    [(address, route name)]. Each replica's route name (its `--task-route`)
    is its port there."""
    pool = block(NGINX_CONF.read_text(), "upstream toolcage")
    return re.findall(r"^\s*server (127\.0\.0\.1:(\d+)) ", pool, re.MULTILINE)


def deployed_config(replicas, port):
    """deploy/nginx.conf with its three replicas' addresses (in the pool and
    in each one's own upstream) and its listening port replaced: nothing
    else changes. The route names stay the conf's: replica i must run with
    `--task-route` the i-th route of `deployed_pool()`."""
    site = NGINX_CONF.read_text()
    listed = deployed_pool()
    assert len(listed) == len(replicas) == 3, listed
    # The structure the tasks rely on: each replica also alone in an
    # upstream named by its route, to which the map sends the requests whose
    # Mcp-Name is one of its task ids; anything else goes to the pool.
    assert len(re.findall(r"^upstream ", site, re.MULTILINE)) == 4
    entries = re.findall(
        r'^\s*("[^"]*"|\S+)\s+(\S+);$', block(site, "map $http_mcp_name $toolcage_upstream"),
        re.MULTILINE,
    )
    expected = [("default", "toolcage")]
    for address, route in listed:
        own = block(site, f"upstream toolcage_{route}")
        assert re.findall(r"^\s*server (\S+?)[ ;]", own, re.MULTILINE) == [address], own
        # In the pool and in its own upstream, nowhere else.
        assert site.count(address) == 2, address
        expected.append((f'"~^{route}\\.[0-9a-f]{{32}}$"', f"toolcage_{route}"))
    assert entries == expected, entries
    assert "proxy_pass http://$toolcage_upstream;" in block(site, "    location = /mcp")
    # Every replica's address replaced at once (a new address may be an
    # old one).
    new = dict(zip((address for address, _ in listed), replicas))
    site = re.sub(r"127\.0\.0\.1:\d+", lambda m: new.get(m.group(0), m.group(0)), site)
    site, listens = re.subn(r"listen 127\.0\.0\.1:\d+;", f"listen 127.0.0.1:{port};", site)
    assert listens == 1
    fail_timeout = re.findall(r"fail_timeout=(\d+)s", site)
    assert len(set(fail_timeout)) == 1, "one fail_timeout for every replica"
    return site, int(fail_timeout[0])


class Replica:
    """A `toolcage serve --http --stateless` that logs each call's start (the
    echo tool's "echoing N bytes" line, at info): when each call started
    there, as the replica saw it, and the length of its text (unique per
    call in a Wave). `port` 0 takes a free one; `flags` and `env` are the
    server's own."""

    def __init__(self, config_file, port=0, flags=(), env=None):
        self.config_file, self.flags, self.env = config_file, flags, env
        self.started = []  # (time.monotonic(), text length) of each call's start
        args = [*server_args(config_file), "--http", f"127.0.0.1:{port}", "--stateless",
                "--log-level", "toolcage::guest=info", *flags]
        self.process, url = launch_http(args, env=env, on_line=self.line)
        self.address = re.match(r"http://([^/]+)/mcp$", url).group(1)

    def line(self, line):
        match = re.search(r"echoing (\d+) bytes", line)
        if match:
            self.started.append((time.monotonic(), int(match.group(1))))

    def calls_started_within(self, seconds):
        now = time.monotonic()
        return sum(1 for t, _ in self.started if now - t <= seconds)

    def restarted(self):
        """The same server again, on the same port, once this one has exited."""
        port = int(self.address.rsplit(":", 1)[1])
        return Replica(self.config_file, port, self.flags, self.env)


@dataclass
class Balancer:
    url: str
    replicas: list  # of Replica
    access_log: Path
    fail_timeout: int

    def log(self):
        """The access log: one dict per request."""
        pattern = re.compile(
            r'^(\S+) (\S+) (\S+) "(.*?)" "(.*?)" "(.*?)" "(.*?)" "(.*?)" (\d+)$'
        )
        entries = []
        for line in self.access_log.read_text().splitlines():
            match = pattern.match(line)
            assert match, f"an access log line not in the test's format: {line}"
            end, duration, verb, call, method, name, upstream, upstream_status, status = (
                match.groups()
            )
            entries.append({
                "start": float(end) - float(duration),
                "end": float(end),
                "verb": verb,
                "call": call,
                "method": method,
                "name": name,
                "upstream": upstream,
                "upstream_status": upstream_status,
                "status": int(status),
            })
        return entries


# An nginx site as an operator would write it from nginx's own documentation,
# not deploy/nginx.conf: three servers with passive health checks, HTTP/1.1
# with keep-alive upstream, retries only on errors and timeouts. The client's
# Host goes through (the replicas serve loopback names), and so does every
# path.
PLAIN_SITE = """
upstream toolcage {{
    server {0} max_fails=1 fail_timeout={fail_timeout}s;
    server {1} max_fails=1 fail_timeout={fail_timeout}s;
    server {2} max_fails=1 fail_timeout={fail_timeout}s;
    keepalive 16;
}}
server {{
    listen 127.0.0.1:{port};
    client_max_body_size 16m;
    location / {{
        proxy_pass http://toolcage;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_next_upstream error timeout;
    }}
}}
"""


def plain_config(replicas, port, fail_timeout=10):
    return PLAIN_SITE.format(*replicas, port=port, fail_timeout=fail_timeout), fail_timeout


@contextmanager
def running_balancer(config_file, site=deployed_config, flags=(), env=None):
    """Three replicas (with the server's `flags` and `env`) behind a real
    nginx running `site(replica addresses, port)`: (its text, fail_timeout).
    Each replica runs with `--task-route` the port deploy/nginx.conf gives
    it, which that conf's map matches in task ids."""
    nginx = nginx_binary()
    replicas = [
        Replica(config_file, flags=(*flags, "--task-route", route), env=env)
        for _, route in deployed_pool()
    ]
    addresses = [replica.address for replica in replicas]
    directory = Path(tempfile.mkdtemp(prefix="toolcage-nginx-"))
    # nginx's workers (user nobody when started as root) create and use the
    # temporary directories in here.
    directory.chmod(0o755)
    port = free_port()
    text, fail_timeout = site(addresses, port)
    (directory / "toolcage.conf").write_text(text)
    main = directory / "nginx.conf"
    main.write_text(NGINX_MAIN.format(dir=directory))
    command = [nginx, "-e", str(directory / "error.log"), "-p", str(directory), "-c", str(main)]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, f"nginx -t refused the site:\n{checked.stderr}"
    server = subprocess.Popen([*command, "-g", "daemon off;"])
    balancer = Balancer(
        url=f"http://127.0.0.1:{port}/mcp",
        replicas=replicas,
        access_log=directory / "access.log",
        fail_timeout=fail_timeout,
    )
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
        yield balancer
    finally:
        server.terminate()
        server.wait(timeout=10)
        for process in (replica.process for replica in balancer.replicas):
            if process.poll() is None:
                process.terminate()
                assert process.wait(timeout=30) == 0, "a replica did not stop cleanly"
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def balancer(config_file):
    with running_balancer(config_file) as balancer:
        yield balancer


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


class Wave:
    """Calls through the balancer, each from its own SDK client, `limit` at
    a time: their outcomes, and when each tools/call was sent."""

    def __init__(self, url):
        self.url = url
        self.outcomes = {}  # call -> (its text, its result or MCPError)
        self.sent = {}  # call -> when its tools/call was sent
        self.texts = {}  # length of a call's text -> the call

    async def call(self, call, sleep_ms, limit):
        # A text of a length of its own, which the replica logs.
        text = f"{call}: its own text {'+' * len(self.texts)}"
        self.texts[len(text)] = call
        async with limit:

            def calling():
                self.sent[call] = time.monotonic()

            outcome = await sdk_call(self.url, call, text, sleep_ms, calling)
            self.outcomes[call] = (text, outcome)

    async def until_in_flight_on(self, replica, replicas, first):
        """Waits until `first` calls have been answered and every replica
        has served some, then until `replica` has started at least 2 calls
        in the last 0.5 s: calls that sleep 0.9 s or more, in flight there
        now."""
        while (
            len(self.outcomes) < first
            or not all(r.started for r in replicas)
            or replica.calls_started_within(0.5) < 2
        ):
            assert len(self.outcomes) < 3 * first, "never 2 calls in flight on the replica"
            await anyio.sleep(0.01)


async def test_a_replica_killed_mid_run_fails_only_its_calls_in_flight(balancer):
    """120 slow calls (0.9 to 1.5 s each), 24 at a time, about 8 in flight on
    each replica; one replica is killed with SIGKILL once it has calls in
    flight (it logs each call's start)."""
    victim = balancer.replicas[0]
    victim_address = victim.address
    wave, concurrency = Wave(balancer.url), 24
    with anyio.fail_after(60):
        limit = anyio.Semaphore(concurrency)
        async with anyio.create_task_group() as group:
            for i in range(120):
                # Durations of their own, so that the calls do not move in
                # lockstep rounds with gaps between them.
                group.start_soon(wave.call, f"before-{i}", 900 + (i * 137) % 600, limit)
            await wave.until_in_flight_on(victim, balancer.replicas, concurrency)
            victim.process.kill()
            killed_at, killed_monotonic = time.time(), time.monotonic()
            victim.process.wait()
    outcomes = wave.outcomes

    log = balancer.log()
    by_call = {}
    for entry in log:
        by_call.setdefault(entry["call"], []).append(entry)
    replicas = [replica.address for replica in balancer.replicas]

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
    # Every request that reached the killed replica and was in flight when
    # it died failed: none was answered twice, none silently.
    for entry in log:
        if entry["upstream"] == victim_address and entry["start"] < killed_at < entry["end"] - 0.2:
            assert entry["status"] == 502 and entry["call"] in failed, entry
    # Later requests were answered by the other replicas: nginx leaves a
    # replica that failed out for fail_timeout, and a request it still sent
    # there was refused a connection and tried on the next one.
    later = [e for e in log if e["start"] > killed_at + 0.05]
    assert later and all(e["status"] == 200 for e in later), later
    for entry in later:
        if victim_address in entry["upstream"]:
            assert entry["upstream"].startswith(f"{victim_address}, "), entry
    assert all(wave.sent[call] < killed_monotonic for call in failed)


async def test_a_refused_connection_is_retried_on_another_replica(balancer):
    """A replica that is down before any traffic: the first request nginx
    sends its way is refused a connection, which carried nothing, so nginx
    tries the next replica, though it is a POST; then leaves the dead one
    out. No call fails."""
    dead = balancer.replicas[2]
    dead.process.kill()
    dead.process.wait()
    wave, limit = Wave(balancer.url), anyio.Semaphore(3)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for i in range(12):
                group.start_soon(wave.call, f"call-{i}", 0, limit)
    for call, (text, outcome) in wave.outcomes.items():
        assert_own_result(call, text, outcome)
    log = balancer.log()
    assert all(e["status"] == 200 for e in log)
    retried = [e for e in log if dead.address in e["upstream"]]
    assert retried, "nginx never tried the dead replica"
    for entry in retried:
        first, then = entry["upstream"].split(", ")
        assert first == dead.address and then in (r.address for r in balancer.replicas[:2])
        assert (entry["upstream_status"], entry["verb"]) == ("502, 200", "POST"), entry


async def test_a_replica_stopped_with_sigterm_finishes_its_calls_and_loses_none(balancer):
    """A rolling restart's stop: 90 calls of 0.9 to 1.5 s, 24 at a time; one
    replica gets SIGTERM with calls in flight on it. They finish there, with
    their results, and later requests go to the other replicas. A request
    that nginx writes to an idle keep-alive connection of the stopping
    replica is still served there (with `Connection: close`): no call is
    lost."""
    stopping = balancer.replicas[1]
    wave, concurrency = Wave(balancer.url), 24
    with anyio.fail_after(60):
        limit = anyio.Semaphore(concurrency)
        async with anyio.create_task_group() as group:
            for i in range(90):
                group.start_soon(wave.call, f"call-{i}", 900 + (i * 137) % 600, limit)
            await wave.until_in_flight_on(stopping, balancer.replicas, concurrency)
            stopping.process.send_signal(signal.SIGTERM)
            stopped_at = time.time()
            # It exits 0 once its calls in flight have answered.
            await anyio.to_thread.run_sync(lambda: stopping.process.wait(timeout=30))
            assert stopping.process.returncode == 0
    log = balancer.log()
    for call, (text, outcome) in wave.outcomes.items():
        assert_own_result(call, text, outcome)
    assert all(e["status"] == 200 for e in log), [e for e in log if e["status"] != 200]
    # Calls were in flight on it at the SIGTERM, and finished there.
    finished_there = [
        e for e in log
        if e["upstream"] == stopping.address and e["method"] == "tools/call"
        and e["start"] < stopped_at < e["end"] and e["status"] == 200
    ]
    assert finished_there, "no call was in flight on the stopped replica"


# --- Tasks behind nginx -------------------------------------------------------

# A task id of a replica run by running_balancer: its route (the port
# deploy/nginx.conf gives it), a dot, 128 random bits.
ROUTED_TASK_ID = re.compile(r"^(\d+)\.[0-9a-f]{32}$")


@asynccontextmanager
async def tasks_client(url):
    """One SDK client (2026-07-28, no session) of `url` that declares the
    tasks extension: (the client, the extension)."""
    extension = tasks.TasksExtension()
    async with httpx2.AsyncClient(timeout=30) as http:
        async with Client(
            streamable_http_client(url, http_client=http), mode="2026-07-28",
            extensions=[extension],
        ) as client:
            yield client, extension


def replicas_by_route(balancer):
    """route -> the Replica that runs with it (running_balancer's order)."""
    return {route: replica for (_, route), replica in zip(deployed_pool(), balancer.replicas)}


def route_of(task_id):
    match = ROUTED_TASK_ID.match(task_id)
    assert match, f"not a routed task id: {task_id}"
    return match.group(1)


async def test_tasks_behind_nginx_reach_the_replica_that_made_them(config_file):
    """Every call of a client that declares tasks becomes a task at once
    (`--task-after-ms 0`). Twelve concurrent calls through deploy/nginx.conf
    make their tasks on several replicas; nginx sends each task's tasks/get
    to the replica that made it (by the Mcp-Name header), so every call
    resolves, with its own result. A tasks/cancel through nginx reaches its
    task, which is cancelled at once. A task whose replica is down gets the
    conf's JSON 502 (the task is lost with it), and calls still become tasks
    on the other replicas."""
    with running_balancer(config_file, flags=("--task-after-ms", "0")) as balancer:
        routes = replicas_by_route(balancer)
        async with tasks_client(balancer.url) as (client, extension):
            results = {}

            async def one(i):
                text = f"task call {i}"
                results[text] = await client.call_tool("echo", {"text": text, "sleep_ms": 300})

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for i in range(12):
                        group.start_soon(one, i)
            assert len(results) == 12
            for text, result in results.items():
                assert_own_result(text, text, result)
            made_on = {handle.task_id: route_of(handle.task_id) for handle in extension.handles}
            assert len(made_on) == 12, extension.handles
            assert set(made_on.values()) <= set(routes)
            assert len(set(made_on.values())) >= 2, f"every task made on one replica: {made_on}"

            # A cancel through nginx reaches the running task.
            with anyio.fail_after(10):
                handle = await client.session.call_tool(
                    "echo", {"text": "cancelled", "sleep_ms": 5000}, allow_claimed=True
                )
                assert isinstance(handle, tasks.CreateTaskResult), handle
                assert handle.status == "working", handle
                cancelled_at = time.monotonic()
                await tasks.cancel(client.session, handle.task_id)
                task = await tasks.wait(client.session, handle.task_id, every_s=0.01)
                assert task.status == "cancelled", task
                assert time.monotonic() - cancelled_at < 1

            # Its replica goes down: the task is lost, and the client is told
            # so as a JSON-RPC error, not sent to a replica that never knew it.
            down = routes[route_of(handle.task_id)]
            down.process.kill()
            down.process.wait()
            with anyio.fail_after(10):
                with pytest.raises(MCPError) as raised:
                    await tasks.get(client.session, handle.task_id)
                assert raised.value.code == -32603
                assert raised.value.error.message.startswith(
                    "Bad Gateway: no toolcage replica answered this request "
                    f"(nginx tried {down.address}: 502)."
                ), raised.value.error.message
                after = await client.call_tool("echo", {"text": "after", "sleep_ms": 300})
                assert_own_result("after", "after", after)
            assert route_of(extension.handles[-1].task_id) != route_of(handle.task_id)
        log = balancer.log()

    # Every request about a task named it in Mcp-Name and went to the replica
    # that made it, on the first try; every other request went to the pool.
    about_tasks = [e for e in log if e["method"].startswith("tasks/")]
    assert {e["method"] for e in about_tasks} == {"tasks/get", "tasks/cancel"}
    assert len([e for e in about_tasks if e["method"] == "tasks/get"]) > 12
    for entry in about_tasks:
        assert entry["upstream"] == routes[route_of(entry["name"])].address, entry
    served = [e for e in about_tasks if e["status"] == 200]
    assert {route_of(e["name"]) for e in served} == set(made_on.values()) | {route_of(handle.task_id)}
    calls = [e for e in log if e["method"] == "tools/call"]
    assert len(calls) == 14 and all(e["status"] == 200 for e in calls), calls


async def test_without_routing_a_task_is_polled_where_it_was_not_made(config_file):
    """The control: the same replicas behind a plain site, which spreads
    every request over the pool. The polls of one task reach the other
    replicas too, and those answer that the task was made by another
    replica, naming it and the balancer rule it needs: the routing of
    deploy/nginx.conf is what makes tasks work behind a balancer."""
    with running_balancer(config_file, plain_config, flags=("--task-after-ms", "0")) as balancer:
        routes = replicas_by_route(balancer)
        async with tasks_client(balancer.url) as (client, _):
            answered, refused = [], []
            with anyio.fail_after(15):
                handle = await client.session.call_tool(
                    "echo", {"text": "unrouted", "sleep_ms": 300}, allow_claimed=True
                )
                assert isinstance(handle, tasks.CreateTaskResult), handle
                for _ in range(12):
                    try:
                        answered.append(await tasks.get(client.session, handle.task_id))
                    except MCPError as error:
                        refused.append(error)
                    await anyio.sleep(0.05)
        log = balancer.log()
    route = route_of(handle.task_id)
    maker = routes[route].address
    assert refused, "every poll reached the replica that made the task"
    for error in refused:
        assert error.code == -32602, error
        message = error.error.message
        assert f"task `{handle.task_id}` was made by the replica with route `{route}`" in message
        assert "The balancer must send tasks/* requests by their Mcp-Name header" in message
        [here] = re.findall(r"this replica's route is `(\d+)`", message)
        assert here in routes and here != route, message
    # The polls that reached the replica that made the task were answered.
    assert answered and all(task.task_id == handle.task_id for task in answered)
    assert all(task.status in ("working", "completed") for task in answered), answered
    polls = [e for e in log if e["method"] == "tasks/get"]
    assert len(polls) == 12 and all(e["name"] == handle.task_id for e in polls), polls
    assert len([e for e in polls if e["upstream"] == maker]) == len(answered), polls
    assert {e["upstream"] for e in polls} - {maker}, polls


# --- Refusals and restarts behind nginx ---------------------------------------

MIB = 1 << 20
RAW_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


def raw_call(connection, call, text, token=None, sleep_ms=0):
    """A tools/call of echo as raw JSON-RPC on `connection` (an
    http.client.HTTPConnection to nginx), marked `X-Call: call`: (status,
    the reply's text or None)."""
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text, "sleep_ms": sleep_ms}},
    })
    headers = {**RAW_HEADERS, "X-Call": call}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connection.request("POST", "/mcp", body, headers)
    response = connection.getresponse()
    reply = response.read()
    if response.status != 200:
        return response.status, None
    return 200, json.loads(reply)["result"]["content"][0]["text"]


def refused_requests(capped):
    """Twenty refusals with 1 to 12 MiB bodies: (name, headers, size,
    status). Behind a balancer that caps bodies at 4 MiB (`capped`), the
    replicas' 401 and 403 are sent bodies up to that cap, and the larger
    bodies get the balancer's own 413."""
    kinds = [
        ("no token", {}, 401),
        ("foreign Origin", {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}, 403),
        ("body over the cap", {"Authorization": f"Bearer {TOKEN}"}, 413),
    ]
    if not capped:
        kinds.append(("foreign Host", {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}, 403))
    requests = []
    for i in range(20):
        name, headers, status = kinds[i % len(kinds)]
        size = (1 + i % 12) * MIB
        if status == 413:
            size = max(size, 5 * MIB)
        elif capped:
            size = min(size, 4 * MIB)
        requests.append((name, {**RAW_HEADERS, **headers, "X-Call": f"refused-{i}"}, size, status))
    return requests


@pytest.mark.parametrize("site", ["deployed", "plain"])
async def test_refusals_reach_the_client_as_themselves_and_leave_the_pool_whole(config_file, site):
    """The replicas require a token. Twenty refused requests with 1 to 12 MiB
    bodies come back through nginx as 401, 403 and 413, never as 502; then
    authorised calls are served by all three replicas: none was left out."""
    env = dict(os.environ, TOOLCAGE_TOKEN=TOKEN)
    config = deployed_config if site == "deployed" else plain_config
    with running_balancer(config_file, config, env=env) as balancer:
        port = int(balancer.url.rsplit(":", 1)[1].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for name, headers, size, status in refused_requests(capped=site == "deployed"):
            connection.request("POST", "/mcp", b"x" * size, headers)
            response = connection.getresponse()
            response.read()
            assert response.status == status, (name, size, response.status)
            if response.will_close:
                connection.close()
        replicas = {replica.address for replica in balancer.replicas}
        for i in range(9):
            assert raw_call(connection, f"allowed-{i}", f"allowed {i}", TOKEN) == (200, f"allowed {i}")
        connection.close()
        log = balancer.log()
    refused = [e for e in log if e["call"].startswith("refused-")]
    assert len(refused) == 20 and not any(e["status"] == 502 for e in refused), refused
    # Those that reached a replica got its own refusal, on the first try.
    for entry in refused:
        if entry["upstream"] != "-":
            assert entry["upstream"] in replicas and entry["upstream_status"] == str(entry["status"]), entry
    allowed = [e for e in log if e["call"].startswith("allowed-")]
    assert all(e["status"] == 200 for e in allowed), allowed
    assert {e["upstream"] for e in allowed} == replicas, allowed


async def test_sigterm_under_steady_load_loses_no_request(config_file):
    """Behind nginx with keep-alive upstream connections (a plain site,
    fail_timeout 1 s so a restarted replica soon takes requests again), twelve
    clients call without pause while replicas are stopped with SIGTERM and
    started again, twenty times, each time with calls on the one stopped:
    every call is answered, none with a 502."""
    site = lambda replicas, port: plain_config(replicas, port, fail_timeout=1)  # noqa: E731
    with running_balancer(config_file, site) as balancer:
        port = int(balancer.url.rsplit(":", 1)[1].split("/")[0])
        stop, outcomes = threading.Event(), []

        def client(worker):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            n = 0
            while not stop.is_set():
                text = f"worker {worker} call {n}"
                sleep_ms = (worker + n) % 4 * 10
                outcomes.append((text, raw_call(connection, f"w{worker}-{n}", text, sleep_ms=sleep_ms)))
                n += 1
            connection.close()

        clients = [threading.Thread(target=client, args=(w,)) for w in range(12)]
        for thread in clients:
            thread.start()
        try:
            for stop_number in range(20):
                victim = balancer.replicas[stop_number % 3]
                # Every replica back in the pool, and calls on the victim.
                deadline = time.monotonic() + 15
                while victim.calls_started_within(0.3) < 2 or not all(
                    replica.calls_started_within(0.3) for replica in balancer.replicas
                ):
                    assert time.monotonic() < deadline, f"stop {stop_number}: a replica idle"
                    time.sleep(0.01)
                victim.process.send_signal(signal.SIGTERM)
                assert victim.process.wait(timeout=30) == 0
                balancer.replicas[stop_number % 3] = victim.restarted()
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
        log = balancer.log()
        errors = (balancer.access_log.parent / "error.log").read_text().splitlines()
    failed = [(text, outcome) for text, outcome in outcomes if outcome != (200, text)]
    assert not failed, (failed, [line for line in errors if "[error]" in line])
    assert len(outcomes) > 500, len(outcomes)
    assert not [e for e in log if e["status"] != 200]


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
