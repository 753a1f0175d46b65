"""Replicas sharing their state in Redis (`[state] backend = "redis"`):
two `toolcage serve --http` with one sealing key and one Debian
`redis-server` on 127.0.0.1 (a fresh port, a password read from a secret,
nothing saved to disk), reached by the official MCP Python SDK on
2026-07-28, each call sent to a replica of the test's choosing, as a
balancer without `Mcp-Name` routing might:

- a code-mode session set through one replica is read through the other;
- a script paused on a question through one replica is answered through
  the other and resumes exactly once, and its state, once used, is refused
  by either;
- a Redis that cannot be reached at start stops `serve` (exit 2, naming
  it), unless `[state] required = false`, when it serves with a store of
  its own and says so.
"""

import os
import socket
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import BIN, TOOLS, launch_http

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


def start_redis(port):
    """Debian's redis-server (TOOLCAGE_REDIS, its libraries beside it) on
    `port`, answering once this returns."""
    found = os.environ.get("TOOLCAGE_REDIS")
    assert found, "TOOLCAGE_REDIS is not set: the shared-state tests need Debian's redis-server (tests/src/lib.rs fetches it)"
    binary = Path(found)
    env = dict(os.environ)
    libraries = binary.parent.parent / "lib" / "x86_64-linux-gnu"
    if libraries.is_dir():
        env["LD_LIBRARY_PATH"] = str(libraries)
    args = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*args, "--requirepass", PASSWORD], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.sendall(f"AUTH {PASSWORD}\r\nPING\r\n".encode())
                if probe.recv(64).startswith(b"+OK"):
                    return process
        except OSError:
            time.sleep(0.02)
    process.kill()
    raise AssertionError("redis-server did not answer")


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
    redis = start_redis(port)
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
