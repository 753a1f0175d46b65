"""Replicas sharing their state in Redis (`[state] backend = "redis"`):
`toolcage serve --http` replicas with one sealing key and one Debian
`redis-server` on 127.0.0.1 (a fresh port, a password read from a secret,
nothing saved to disk), reached by the official MCP Python SDK on
2026-07-28.

Three replicas behind a real nginx spreading requests round robin, with no
`Mcp-Name` routing (tasks live in Redis):

- a task started through nginx is polled to completion through nginx, its
  polls answered by the other replicas too;
- the replica running a task is killed (SIGKILL): the task is reported
  failed, naming why, within its heartbeat's expiry, and nginx's other
  replicas go on serving;
- a cancel reaching another replica stops the task where it runs;
- a script task paused on a question is answered through nginx and resumes
  once, on the replica that holds it;
- a script paused on a question (request_state) is retried on another
  replica and resumes once; a session set through one replica is read
  through another;
- Redis killed mid-run: calls that need no state answer, those that need
  it get a clear error, no replica exits; Redis restarted empty: an
  unknown task id is -32602 saying the store forgot it, a session starts
  empty and a run missing its globals says why, and the store reconnects
  by itself;
- a real Prometheus scraping a replica sees its tasks by status and its
  store's latency and errors.

Two replicas reached directly, each call sent to a replica of the test's
choosing:

- a code-mode session set through one replica is read through the other;
- a script paused on a question through one replica is answered through
  the other and resumes exactly once, and its state, once used, is refused
  by either;
- a Redis that cannot be reached at start stops `serve` (exit 2, naming
  it), unless `[state] required = false`, when it serves with a store of
  its own and says so.
"""

import os
import re
import signal
import socket
import subprocess
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import tasks
from conftest import BIN, TOOLS, launch_http, start_redis
from test_scale import NGINX_MAIN, nginx_binary, plain_config

pytestmark = pytest.mark.anyio

PASSWORD = "shared-state-password-77e2"
WRITE_ONCE = (
    'await edit_file(path="/rw/log.txt", old_text="END", new_text="x\\nEND")\n'
    'await write_file(path="/rw/asked.txt", content="yes")\n"done"'
)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def config_text(tmp_path, port, extra=""):
    (tmp_path / "redis.password").write_text(PASSWORD + "\n")
    (tmp_path / "state.key").write_text("cd" * 32 + "\n")
    return (
        '[permissions]\ndefault = "allow"\nwrite_file = "ask"\n\n'
        f'[secrets.REDIS]\nfile = "{tmp_path / "redis.password"}"\n\n'
        f'[state]\nbackend = "redis"\nurl = "redis://127.0.0.1:{port}/0"\n'
        f'password_secret = "REDIS"\nkey_file = "{tmp_path / "state.key"}"\n{extra}'
    )


@asynccontextmanager
async def replicas(tmp_path):
    """Redis and two replicas sharing it and /rw (holding log.txt); yields
    a function opening a 2026-07-28 client of replica 0 or 1."""
    port = free_port()
    redis = start_redis(port, PASSWORD)
    rw = tmp_path / "rw"
    rw.mkdir()
    (rw / "log.txt").write_text("END\n")
    config = tmp_path / "toolcage.toml"
    config.write_text(config_text(tmp_path, port))
    args = ["--tools", TOOLS, "--config", str(config), "--mount", f"{rw}:/rw:rw"]
    servers = [launch_http([*args, "serve", "--http", "127.0.0.1:0"]) for _ in range(2)]

    async def yes(context, params):
        return types.ElicitResult(action="accept", content={"approve": True})

    @asynccontextmanager
    async def client_of(replica):
        async with httpx2.AsyncClient(timeout=30) as http:
            transport = streamable_http_client(servers[replica][1], http_client=http)
            async with Client(transport, mode="2026-07-28", elicitation_callback=yes) as client:
                yield client

    try:
        yield client_of
    finally:
        for process, _ in servers:
            process.terminate()
            assert process.wait(timeout=30) == 0
        redis.kill()
        redis.wait()


def text(result):
    return result.content[0].text


async def test_a_session_set_through_one_replica_is_read_through_the_other(tmp_path):
    async with replicas(tmp_path) as client_of:
        async with client_of(0) as first, client_of(1) as second:
            set_ = await first.call_tool("run_code", {"code": "rows = [1, 2, 3]\nlen(rows)", "session": "s"})
            assert text(set_) == "3", text(set_)
            read = await second.call_tool("run_code", {"code": "sum(rows)", "session": "s"})
            assert text(read) == "6", text(read)
            assert read.structured_content["session"]["restored"] is True


async def test_a_run_paused_on_one_replica_resumes_once_on_the_other(tmp_path):
    async with replicas(tmp_path) as client_of:
        async with client_of(0) as first, client_of(1) as second:
            paused = await first.session.call_tool("run_code", {"code": WRITE_ONCE}, allow_input_required=True)
            assert isinstance(paused, types.InputRequiredResult), paused
            yes = types.ElicitResult(action="accept", content={"approve": True})

            async def retry(client):
                return await client.session.call_tool(
                    "run_code",
                    {"code": WRITE_ONCE},
                    allow_input_required=True,
                    input_responses={key: yes for key in paused.input_requests},
                    request_state=paused.request_state,
                )

            done = await retry(second)
            assert text(done) == '"done"', text(done)
            for client in (first, second):
                again = await retry(client)
                assert again.is_error and "it was used already" in text(again), text(again)
    assert (tmp_path / "rw" / "log.txt").read_text() == "x\nEND\n"
    assert (tmp_path / "rw" / "asked.txt").read_text() == "yes"


def test_an_unreachable_redis_stops_serve_unless_it_is_not_required(tmp_path):
    port = free_port()  # nothing listens there
    config = tmp_path / "toolcage.toml"
    config.write_text(config_text(tmp_path, port))
    args = [BIN, "--tools", TOOLS, "--config", str(config), "serve", "--http", "127.0.0.1:0"]
    stopped = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 2, stopped
    assert f"Redis at redis://127.0.0.1:{port}/0" in stopped.stderr, stopped.stderr
    assert "required = false" in stopped.stderr and PASSWORD not in stopped.stderr, stopped.stderr

    config.write_text(config_text(tmp_path, port, "required = false\n"))
    process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    said = []
    try:
        for line in process.stderr:
            said.append(line)
            if "serving MCP at" in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = "".join(said)
    assert "serving MCP at" in said, said
    assert f"Redis at redis://127.0.0.1:{port}/0" in said, said
    assert "serving with a state store of this process's own" in said, said


# Five beats well past Redis's 1 s command timeout, so that a slow beat is
# not taken for a dead replica.
HEARTBEAT_MS = 500
# A replica silent for five beats is taken for dead.
EXPIRY_S = 5 * HEARTBEAT_MS / 1000


@dataclass
class Balanced:
    url: str
    servers: list  # of (process, address)
    access_log: Path
    redis_port: int
    redis: subprocess.Popen

    def log(self):
        """The access log (NGINX_MAIN's format): (method, upstream, status)
        of each request."""
        pattern = re.compile(r'^\S+ \S+ \S+ "(?:.*?)" "(.*?)" "(?:.*?)" "(.*?)" "(?:.*?)" (\d+)$')
        entries = []
        for line in self.access_log.read_text().splitlines():
            match = pattern.match(line)
            assert match, f"an access log line not in the test's format: {line}"
            entries.append(match.groups())
        return entries

    def upstreams(self, method):
        return [upstream for m, upstream, _ in self.log() if m == method]

    def other_than(self, address):
        """The URL of a replica other than the one at `address`."""
        return next(f"http://{at}/mcp" for _, at in self.servers if at != address)

    def server_at(self, address):
        [process] = [process for process, at in self.servers if at == address]
        return process


@asynccontextmanager
async def balanced(tmp_path):
    """Redis, three replicas sharing it and /rw (holding log.txt) behind a
    plain round-robin nginx site; each replica makes every call of a client
    declaring tasks a task at once, and beats every HEARTBEAT_MS."""
    port = free_port()
    redis = start_redis(port, PASSWORD)
    rw = tmp_path / "rw"
    rw.mkdir()
    (rw / "log.txt").write_text("END\n")
    config = tmp_path / "toolcage.toml"
    config.write_text(config_text(tmp_path, port))
    args = ["--tools", TOOLS, "--config", str(config), "--mount", f"{rw}:/rw:rw",
            "--timeout-ms", "60000", "serve", "--http", "127.0.0.1:0", "--stateless",
            "--task-after-ms", "0", "--task-heartbeat-ms", str(HEARTBEAT_MS), "--metrics"]
    servers = []
    for _ in range(3):
        process, url = launch_http(args)
        servers.append((process, re.match(r"http://([^/]+)/mcp$", url).group(1)))
    directory = tmp_path / "nginx"
    directory.mkdir()
    directory.chmod(0o755)
    tmp_path.chmod(0o755)
    listen = free_port()
    site, _ = plain_config([address for _, address in servers], listen, fail_timeout=1)
    (directory / "toolcage.conf").write_text(site)
    (directory / "nginx.conf").write_text(NGINX_MAIN.format(dir=directory))
    command = [nginx_binary(), "-e", str(directory / "error.log"), "-p", str(directory),
               "-c", str(directory / "nginx.conf")]
    nginx = subprocess.Popen([*command, "-g", "daemon off;"])
    balancer = Balanced(f"http://127.0.0.1:{listen}/mcp", servers, directory / "access.log", port, redis)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx2.get(f"http://127.0.0.1:{listen}/healthz", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert nginx.poll() is None, (directory / "error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not pass /healthz through"
            time.sleep(0.05)
        yield balancer
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        for process, _ in servers:
            if process.poll() is None:
                process.terminate()
                assert process.wait(timeout=30) == 0, "a replica did not stop cleanly"
        balancer.redis.kill()
        balancer.redis.wait()


@asynccontextmanager
async def through(balancer, extensions=(), url=None):
    """One 2026-07-28 SDK client of the balancer (or of `url`)."""
    async def never(context, params):
        raise AssertionError("the question goes through the result, not a request")

    async with httpx2.AsyncClient(timeout=30) as http:
        transport = streamable_http_client(url or balancer.url, http_client=http)
        async with Client(transport, mode="2026-07-28", extensions=list(extensions),
                          elicitation_callback=never) as client:
            yield client


async def start_task(client, name, arguments):
    handle = await client.session.call_tool(name, arguments, allow_claimed=True)
    assert isinstance(handle, tasks.CreateTaskResult), handle
    return handle.task_id


async def test_a_task_is_polled_to_completion_through_round_robin(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            task_id = await start_task(client, "echo", {"text": "spread", "sleep_ms": 1500})
            seen = []
            with anyio.fail_after(30):
                while (task := await tasks.get(client.session, task_id)).status == "working":
                    seen.append(task)
                    await anyio.sleep(0.1)
        log = balancer.log()
    assert task.status == "completed", task
    assert task.result["content"][0]["text"] == "spread"
    assert seen and all(t.task_id == task_id for t in seen)
    [maker] = [upstream for method, upstream, _ in log if method == "tools/call"]
    polls = [(upstream, status) for method, upstream, status in log if method == "tasks/get"]
    assert all(status == "200" for _, status in polls), polls
    # The polls were sent one after another, so the log's order is theirs:
    # replicas other than the maker answered `working`.
    assert len(polls) == len(seen) + 1, (polls, seen)
    elsewhere = [task for (upstream, _), task in zip(polls, seen) if upstream != maker]
    assert elsewhere and all(task.status == "working" for task in elsewhere), polls


async def test_a_task_whose_replica_is_killed_fails_within_the_heartbeats_expiry(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            task_id = await start_task(client, "echo", {"text": "doomed", "sleep_ms": 30000})
            [maker] = balancer.upstreams("tools/call")
            assert (await tasks.get(client.session, task_id)).status == "working"
            balancer.server_at(maker).send_signal(signal.SIGKILL)
            killed = time.monotonic()
            with anyio.fail_after(30):
                while (task := await tasks.get(client.session, task_id)).status == "working":
                    await anyio.sleep(0.05)
            took = time.monotonic() - killed
            # nginx goes on serving through the others.
            echoed = await client.call_tool("echo", {"text": "still here"})
    assert task.status == "failed", task
    assert "the replica running it stopped" in task.status_message, task
    assert task.error["code"] == -32603, task.error
    assert took <= EXPIRY_S + 2, f"failed after {took:.2f} s"
    assert echoed.content[0].text == "still here"


async def test_a_cancel_through_another_replica_stops_the_task(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            task_id = await start_task(client, "echo", {"text": "stop me", "sleep_ms": 30000})
            [maker] = balancer.upstreams("tools/call")
            async with through(balancer, [tasks.TasksExtension()], balancer.other_than(maker)) as other:
                await tasks.cancel(other.session, task_id)
            with anyio.fail_after(10):
                done = await tasks.wait(client.session, task_id, every_s=0.05)
    assert done.status == "cancelled", done
    assert "cancelled" in done.status_message, done


async def test_a_script_task_is_answered_through_another_replica_and_resumes_once(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            task_id = await start_task(client, "run_code", {"code": WRITE_ONCE})
            with anyio.fail_after(30):
                while (task := await tasks.get(client.session, task_id)).status == "working":
                    await anyio.sleep(0.05)
            assert task.status == "input_required", task
            (key, _), = task.input_requests.items()
            yes = {"action": "accept", "content": {"approve": True}}
            [maker] = balancer.upstreams("tools/call")
            async with through(balancer, [tasks.TasksExtension()], balancer.other_than(maker)) as other:
                await tasks.update(other.session, task_id, {key: yes})
                await tasks.update(other.session, task_id, {key: yes})
            with anyio.fail_after(30):
                done = await tasks.wait(client.session, task_id, every_s=0.05)
        assert balancer.upstreams("tasks/update") == [], "an answer went to the replica running the task"
    assert done.status == "completed", done
    assert done.result["content"][0]["text"] == '"done"', done.result
    assert (tmp_path / "rw" / "log.txt").read_text() == "x\nEND\n"
    assert (tmp_path / "rw" / "asked.txt").read_text() == "yes"


async def test_a_paused_run_and_a_session_move_between_replicas_through_round_robin(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer) as client:
            paused = await client.session.call_tool("run_code", {"code": WRITE_ONCE}, allow_input_required=True)
            assert isinstance(paused, types.InputRequiredResult), paused
            yes = types.ElicitResult(action="accept", content={"approve": True})
            done = await client.session.call_tool(
                "run_code", {"code": WRITE_ONCE}, allow_input_required=True,
                input_responses={key: yes for key in paused.input_requests},
                request_state=paused.request_state,
            )
            assert text(done) == '"done"', text(done)
            set_ = await client.call_tool("run_code", {"code": "rows = [1, 2, 3]\nlen(rows)", "session": "s"})
            read = await client.call_tool("run_code", {"code": "sum(rows)", "session": "s"})
        calls = balancer.upstreams("tools/call")
    assert calls[0] != calls[1] and calls[2] != calls[3], calls
    assert (text(set_), text(read)) == ("3", "6")
    assert read.structured_content["session"]["restored"] is True
    assert (tmp_path / "rw" / "log.txt").read_text() == "x\nEND\n"


async def test_redis_lost_and_restarted_empty(tmp_path):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            # Plain calls (a client without the extension) need no state.
            async with through(balancer) as plain:
                set_ = await plain.call_tool("run_code", {"code": "kept = 41\nkept", "session": "s"})
                assert text(set_) == "41"
                task_id = await start_task(client, "echo", {"text": "held", "sleep_ms": 100})
                maker = balancer.upstreams("tools/call")[-1]
                await anyio.sleep(0.5)
                balancer.redis.kill()
                balancer.redis.wait()
                for _ in range(3):
                    echoed = await plain.call_tool("echo", {"text": "no state needed"})
                    assert echoed.content[0].text == "no state needed"
                lost = await plain.call_tool("run_code", {"code": "kept", "session": "s"})
                assert "could not be restored (the host could not read it" in text(lost), text(lost)
                assert "state store failed" in text(lost) or "Redis" in text(lost), text(lost)
                errors, answered = [], []
                for _ in range(3):
                    try:
                        answered.append(await tasks.get(client.session, task_id))
                    except MCPError as error:
                        errors.append(error)
                # The replica that made the task answers for it; the others
                # say the store failed.
                assert answered and all(t.status == "completed" for t in answered), answered
                assert errors and all(e.error.code == -32603 for e in errors), errors
                assert all("the state store failed" in e.error.message for e in errors), errors

                balancer.redis = start_redis(balancer.redis_port, PASSWORD)
                # Once every replica's store has reconnected, an unknown id
                # is unknown (not a failed store) wherever it lands.
                with anyio.fail_after(20):
                    while True:
                        unknown = []
                        for _ in range(3):
                            try:
                                await tasks.get(client.session, "f" * 32)
                            except MCPError as error:
                                unknown.append(error)
                        if all(e.error.code == -32602 for e in unknown):
                            break
                        await anyio.sleep(0.2)
                assert len(unknown) == 3, unknown
                assert all("a store restarted empty" in e.error.message for e in unknown), unknown
                # The task made before the restart is forgotten by the
                # replicas that did not make it.
                async with through(balancer, [tasks.TasksExtension()], balancer.other_than(maker)) as other:
                    with pytest.raises(MCPError) as forgotten:
                        await tasks.get(other.session, task_id)
                assert forgotten.value.error.code == -32602, forgotten.value
                gone = await plain.call_tool("run_code", {"code": "kept", "session": "s"})
                assert gone.is_error and "NameError" in text(gone), text(gone)
                assert '[session "s" started empty: nothing was kept under this name' in text(gone), text(gone)
                # The session goes on from there, on every replica.
                again = await plain.call_tool("run_code", {"code": "kept = 7\nkept", "session": "s"})
                for _ in range(3):
                    read = await plain.call_tool("run_code", {"code": "kept", "session": "s"})
                    assert text(read) == "7", text(read)
        assert all(process.poll() is None for process, _ in balancer.servers), "a replica exited"


async def test_prometheus_sees_the_tasks_by_status_and_the_stores_latency_and_errors(tmp_path, prometheus):
    async with balanced(tmp_path) as balancer:
        async with through(balancer, [tasks.TasksExtension()]) as client:
            task_id = await start_task(client, "echo", {"text": "counted", "sleep_ms": 0})
            [maker] = balancer.upstreams("tools/call")
            with anyio.fail_after(20):
                await tasks.wait(client.session, task_id, every_s=0.05)
        scraper = await off_loop(prometheus, maker)
        completed = 'toolcage_tasks{toolcage_task_status="completed"}'
        series = await off_loop(scraper.wait_for_query, completed, lambda s: s and s[0][1] >= 1)
        assert series[0][1] == 1, series
        writes = ('toolcage_state_operation_duration_seconds_count'
                  '{toolcage_state_backend="redis",toolcage_state_operation="put"}')
        await off_loop(scraper.wait_for_query, writes, lambda s: s and s[0][1] >= 2)
        balancer.redis.kill()
        balancer.redis.wait()
        async with through(balancer, url=f"http://{maker}/mcp") as direct:
            lost = await direct.call_tool("run_code", {"code": "1", "session": "s"})
            assert "could not be restored" in text(lost), text(lost)
        errors = 'sum(toolcage_state_errors_total{toolcage_state_backend="redis"})'
        await off_loop(scraper.wait_for_query, errors, lambda s: s and s[0][1] >= 1)


async def off_loop(function, *args, **kwargs):
    """Runs a blocking `function` on a thread."""
    return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))
