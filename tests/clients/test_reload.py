"""Hot reload seen by the MCP Python SDK: `toolcage serve --watch` over stdio
and Streamable HTTP, on 2026-07-28 (`subscriptions/listen`) and the older
revisions (session notifications). A tool added, changed and removed in the
watched directory is announced with `notifications/tools/list_changed`, and
the next list and call see the new version."""

import os
import shutil
import signal
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import BIN, launch_http

pytestmark = pytest.mark.anyio

# A directory with `echo.wasm` (tools echo, counter, fail, bad_details) and
# `echo_twin.wasm` (tools echo, answering "hijacked", and twin_only).
FIXTURES = Path(os.environ["TOOLCAGE_FIXTURES"])

# Generous against a loaded CI machine; the server aims at 2 s.
ANNOUNCED_WITHIN_S = 10


def put(directory, name, fixture):
    """Copies a fixture in the documented way: written elsewhere, renamed in."""
    staging = directory / f".{name}.part"
    shutil.copy(FIXTURES / fixture, staging)
    os.rename(staging, directory / name)


@asynccontextmanager
async def watched(transport, mode, directory, stderr_lines=None):
    """A client of `toolcage serve --watch` over `directory`, and a function
    waiting for the next tools/list_changed announcement. Over HTTP, the
    server's stderr lines (at log level info) go to `stderr_lines`."""
    args = ["--no-bundled", "--tools", str(directory), "--log-level", "toolcage=info",
            "serve", "--watch"]
    if stderr_lines is None:
        stderr_lines = []
    changed = anyio.Event()
    box = {"changed": changed}

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            box["changed"].set()

    async def next_change(client, subscription):
        if subscription is not None:
            with anyio.fail_after(ANNOUNCED_WITHIN_S):
                event = await subscription.__anext__()
            assert type(event).__name__ == "ToolsListChanged", event
            return
        with anyio.fail_after(ANNOUNCED_WITHIN_S):
            await box["changed"].wait()
        box["changed"] = anyio.Event()

    @asynccontextmanager
    async def listening(client):
        if mode == "2026-07-28":
            async with client.listen(tools_list_changed=True) as subscription:
                assert subscription.honored.tools_list_changed
                yield lambda: next_change(client, subscription)
        else:
            yield lambda: next_change(client, None)

    if transport == "stdio":
        server = StdioServerParameters(command=BIN, args=args)
        async with Client(server, mode=mode, message_handler=on_message) as client:
            async with listening(client) as wait:
                yield client, wait
        return
    process, url = launch_http([*args, "--http", "127.0.0.1:0"], on_line=stderr_lines.append)
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            async with Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                message_handler=on_message,
            ) as client:
                async with listening(client) as wait:
                    yield client, wait
    finally:
        process.terminate()
        process.wait(timeout=30)


async def names(client):
    return sorted(tool.name for tool in (await client.list_tools()).tools)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_hot_add_change_and_removal_are_announced_and_served(transport, mode):
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        async with watched(transport, mode, directory) as (client, wait_for_change):
            listed = await client.list_tools()
            assert listed.tools == []
            if mode == "2026-07-28":
                assert listed.ttl_ms == 2000 and listed.cache_scope == "public"

            # Added.
            put(directory, "tool.wasm", "echo_twin.wasm")
            await wait_for_change()
            assert await names(client) == ["echo", "twin_only"]
            result = await client.call_tool("echo", {"text": "hi"})
            assert result.content[0].text == "hijacked"

            # Changed: the next call runs the new version.
            put(directory, "tool.wasm", "echo.wasm")
            await wait_for_change()
            assert await names(client) == ["bad_details", "counter", "echo", "fail"]
            result = await client.call_tool("echo", {"text": "hi"})
            assert result.content[0].text == "hi"

            # Removed: calling it is now an unknown tool.
            os.remove(directory / "tool.wasm")
            await wait_for_change()
            assert await names(client) == []
            with pytest.raises(MCPError) as error:
                await client.call_tool("echo", {"text": "hi"})
            assert "no tool named `echo`" in str(error.value)


async def test_a_reload_that_changes_nothing_announces_nothing():
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        put(directory, "tool.wasm", "echo.wasm")
        lines = []
        async with watched("http", "legacy", directory, lines) as (client, wait_for_change):
            assert "echo" in await names(client)

            def reloads():
                return sum("tools directories reloaded" in line for line in lines)

            # The watcher's first look, at start-up.
            with anyio.fail_after(ANNOUNCED_WITHIN_S):
                while reloads() == 0:
                    await anyio.sleep(0.05)
            before = reloads()
            # Same content under a new modification time, and a file that is
            # never loaded: the watcher reloads, and nothing changes.
            os.utime(directory / "tool.wasm")
            (directory / "notes.wasm.part").write_bytes(b"partial")
            with anyio.fail_after(ANNOUNCED_WITHIN_S):
                while reloads() == before:
                    await anyio.sleep(0.05)
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.5):
                    await wait_for_change()
            result = await client.call_tool("echo", {"text": "same"})
            assert result.content[0].text == "same"


async def test_sighup_reloads_the_directories_and_the_permissions_and_refuses_a_bad_config():
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        tools = directory / "tools"
        tools.mkdir()
        config = directory / "toolcage.toml"
        config.write_text('[permissions]\ndefault = "allow"\n')
        lines = []
        process, url = launch_http(
            ["--no-bundled", "--tools", str(tools), "--config", str(config),
             "serve", "--http", "127.0.0.1:0"],
            on_line=lines.append,
        )
        try:
            async with httpx2.AsyncClient(timeout=30) as http:
                async with Client(
                    streamable_http_client(url, http_client=http), mode="legacy"
                ) as client:
                    assert await names(client) == []

                    # Not watched: the new file is served after SIGHUP only.
                    put(tools, "tool.wasm", "echo.wasm")
                    config.write_text('[permissions]\ndefault = "allow"\necho = "deny"\n')
                    process.send_signal(signal.SIGHUP)
                    with anyio.fail_after(ANNOUNCED_WITHIN_S):
                        while "echo" not in await names(client):
                            await anyio.sleep(0.1)
                    result = await client.call_tool("echo", {"text": "hi"})
                    assert result.is_error and "does not allow" in result.content[0].text
                    assert (await client.call_tool("counter", {})).is_error is False

                    # A bad config is refused; the previous one keeps serving.
                    config.write_text("[permissions\n")
                    process.send_signal(signal.SIGHUP)
                    with anyio.fail_after(ANNOUNCED_WITHIN_S):
                        while not any("config refused" in line for line in lines):
                            await anyio.sleep(0.1)
                    result = await client.call_tool("echo", {"text": "hi"})
                    assert result.is_error and "does not allow" in result.content[0].text
                    assert (await client.call_tool("counter", {})).is_error is False
        finally:
            process.terminate()
            assert process.wait(timeout=30) == 0
