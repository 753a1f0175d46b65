"""Starts `toolcage serve` for the MCP client tests, over stdio or Streamable HTTP.

The Rust test `clients::python_client_sdks` runs these with:
- TOOLCAGE_BIN: the toolcage binary;
- TOOLCAGE_TOOLS: a directory holding the `echo` and `misbehave` fixtures;
- TOOLCAGE_FIXTURES: a directory holding `echo.wasm` and `echo_twin.wasm`
  (whose `twin_only` tool has a strict-ready schema), for the hot-reload and
  format tests to copy.
"""

import os
import re
import subprocess
import tempfile
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

BIN = os.environ["TOOLCAGE_BIN"]
TOOLS = os.environ["TOOLCAGE_TOOLS"]
TOKEN = "test-token-7f3a"

# A raw `initialize` request, for the tests that speak HTTP or JSON-RPC
# without the SDK.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}

# Calls to `counter` are denied, calls to `fail` need the user's approval,
# every other call is allowed.
CONFIG = """
[permissions]
default = "allow"
counter = "deny"
fail = "ask"
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="session")
def config_file():
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "toolcage.toml"
        path.write_text(CONFIG)
        yield str(path)


def server_args(config_file):
    return [
        "--no-bundled",
        "--tools", TOOLS,
        "--config", config_file,
        "--fuel", "50000000",
        "--timeout-ms", "5000",
        "serve",
    ]


def start_http(config_file, *flags):
    """Starts `toolcage serve --http` on a free loopback port; returns (process, url)."""
    return launch_http([*server_args(config_file), "--http", "127.0.0.1:0", *flags])


def launch_http(args, env=None, on_line=None):
    """Runs `toolcage ARGS` (a `serve --http`) until it says where it serves;
    returns (process, url). `on_line`, if given, gets every later line of
    its stderr."""
    server = subprocess.Popen([BIN, *args], stderr=subprocess.PIPE, text=True, env=env)

    def drain():
        for line in server.stderr:
            if on_line:
                on_line(line)

    for line in server.stderr:
        match = re.search(r"serving MCP at (http://\S+)", line)
        if match:
            threading.Thread(target=drain, daemon=True).start()
            return server, match.group(1)
    raise AssertionError("toolcage serve --http did not start")


@pytest.fixture(scope="session")
def http_server(config_file):
    """One `toolcage serve --http` for the session, on a free loopback port."""
    env = dict(os.environ, TOOLCAGE_TOKEN=TOKEN)
    process, url = launch_http([*server_args(config_file), "--http", "127.0.0.1:0"], env=env)
    yield url
    process.terminate()
    assert process.wait(timeout=30) == 0, "toolcage serve did not stop cleanly"


@pytest.fixture(params=["stdio", "http"])
def transport(request):
    return request.param


@pytest.fixture(params=["legacy", "2026-07-28"])
def mode(request):
    """The protocol: the initialize handshake of the older revisions, or 2026-07-28."""
    return request.param


@pytest.fixture
def connect(transport, mode, config_file, request):
    """`connect(**client_options)`: an async context manager giving a connected Client."""

    @asynccontextmanager
    async def open_client(**options):
        if transport == "stdio":
            server = StdioServerParameters(command=BIN, args=server_args(config_file))
            async with Client(server, mode=mode, **options) as client:
                yield client
        else:
            url = request.getfixturevalue("http_server")
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with Client(
                    streamable_http_client(url, http_client=http), mode=mode, **options
                ) as client:
                    yield client

    return open_client
