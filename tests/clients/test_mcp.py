"""toolcage's MCP server, driven by the official MCP Python SDK over stdio and
Streamable HTTP, on 2026-07-28 and on the older handshake revisions."""

import os
import shutil
import socket
import time

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcp import Client, StdioServerParameters

from conftest import BIN, INITIALIZE, TOKEN, server_args

pytestmark = pytest.mark.anyio

META = "dev.toolcage/call"


async def test_lists_tools_with_every_hint_explicit(connect, mode):
    async with connect() as client:
        version = client.session.protocol_version
        if mode == "legacy":
            assert version in ("2025-11-25", "2025-06-18"), version
        else:
            assert version == "2026-07-28"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"echo", "counter", "misbehave"} <= tools.keys()
        echo = tools["echo"]
        assert echo.title == "Echo"
        assert echo.output_schema["required"] == ["length"]
        hints = echo.annotations
        # Present and false, not absent (which MCP reads as true).
        assert (hints.read_only_hint, hints.destructive_hint) == (True, False)
        assert (hints.idempotent_hint, hints.open_world_hint) == (True, False)
        # The output limit (1 MiB) as Claude Code's per-tool result cap,
        # which goes no higher than 500,000 characters.
        assert echo.meta["anthropic/maxResultSizeChars"] == 500_000


async def test_a_schema_reaches_the_client_as_the_tool_wrote_it(mode, config_file, tmp_path):
    """JSON Schema 2020-12 as the fixture `schema_zoo` declares it: `$schema`,
    `$defs`, `additionalProperties`, `prefixItems`, `if`/`then`/`else`, each
    kept, nothing added."""
    shutil.copy(os.path.join(os.environ["TOOLCAGE_FIXTURES"], "schema_zoo.wasm"), tmp_path)
    args = ["--no-bundled", "--tools", str(tmp_path), "--config", config_file, "serve"]
    async with Client(StdioServerParameters(command=BIN, args=args), mode=mode) as client:
        (zoo,) = (await client.list_tools()).tools
    schema = zoo.input_schema
    assert sorted(schema) == sorted([
        "$schema", "type", "$defs", "properties", "required",
        "additionalProperties", "dependentRequired", "allOf",
    ])
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["point"] == {
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "number"}],
        "items": False,
        "minItems": 2,
    }
    assert schema["additionalProperties"] is False
    assert schema["properties"]["meta"]["additionalProperties"] is False
    assert schema["properties"]["center"] == {"$ref": "#/$defs/point"}
    assert schema["allOf"][0]["else"] == {"not": {"required": ["radius"]}}
    assert zoo.output_schema == schema


async def test_a_good_call_has_structured_content(connect):
    async with connect() as client:
        # The SDK checks structuredContent against the listed outputSchema.
        result = await client.call_tool("echo", {"text": "hi", "repeat": 2})
        assert not result.is_error
        assert result.content[0].text == "hihi"
        assert result.structured_content == {"length": 4}
        meta = result.meta[META]
        assert meta["error_kind"] is None
        assert meta["fuel_used"] > 0 and meta["duration_ms"] >= 0
        assert meta["peak_memory_bytes"] > 0 and meta["slot_wait_ms"] >= 0


async def test_invalid_arguments_are_an_error_result_naming_the_paths(connect):
    async with connect() as client:
        result = await client.call_tool("echo", {"repeat": 99})
        assert result.is_error
        assert result.structured_content is None
        text = result.content[0].text
        assert "text" in text and "/repeat" in text, text
        assert result.meta[META]["error_kind"] == "invalid_arguments"


async def test_an_unknown_tool_is_a_protocol_error(connect):
    async with connect() as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
        assert raised.value.code == -32602
        assert "Available tools" in raised.value.error.message


async def test_a_breached_limit_is_an_error_result_with_its_kind(connect):
    async with connect() as client:
        result = await client.call_tool("misbehave", {"mode": "loop"})
        assert result.is_error
        assert result.meta[META]["error_kind"] == "out_of_fuel"
        assert "ran out of fuel" in result.content[0].text


async def test_a_denied_tool_says_the_operator_denied_it(connect):
    async with connect() as client:
        result = await client.call_tool("counter", {})
        assert result.is_error
        assert result.meta[META]["error_kind"] == "permission_denied"
        assert "does not allow" in result.content[0].text


def answering(approve):
    """An elicitation callback that records the question and answers it."""
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        if approve is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"approve": approve})

    return answer, asked


@pytest.mark.parametrize("approve", [True, False, None])
async def test_ask_puts_the_call_to_the_user(connect, approve):
    answer, asked = answering(approve)
    async with connect(elicitation_callback=answer) as client:
        result = await client.call_tool("fail", {"why": "testing"})
        assert len(asked) == 1
        assert "`fail`" in asked[0] and '"why": "testing"' in asked[0], asked[0]
        assert result.is_error
        if approve:
            # It ran: the tool's own failure.
            assert result.meta[META]["error_kind"] == "tool_error"
            assert "The thing is missing" in result.content[0].text
        else:
            assert result.meta[META]["error_kind"] == "permission_denied"
            assert "declined" in result.content[0].text


async def test_ask_without_elicitation_is_a_denial_saying_why(connect):
    async with connect() as client:
        result = await client.call_tool("fail", {})
        assert result.is_error
        assert result.meta[META]["error_kind"] == "permission_denied"
        text = result.content[0].text
        assert "approval" in text and "cannot ask its user" in text
        assert "does not support elicitation" in text


async def test_progress_arrives_in_order_before_the_result(connect):
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async with connect() as client:
        result = await client.call_tool(
            "echo", {"text": "x", "sleep_ms": 20}, progress_callback=on_progress
        )
        assert not result.is_error
        assert reports == [(0.5, 1.0, "sleeping")]


async def test_logs_arrive_at_the_level_asked_for(connect, mode):
    received = []

    async def on_log(params):
        received.append((params.level, params.data))

    options = {"logging_callback": on_log}
    if mode != "legacy":
        options["log_level"] = "info"
    async with connect(**options) as client:
        if mode == "legacy":
            await client.set_logging_level("info")
        await client.call_tool("echo", {"text": "abc"})
        assert ("info", "echoing 3 bytes") in received
        received.clear()
        if mode == "legacy":
            await client.set_logging_level("error")
            await client.call_tool("echo", {"text": "abc"})
            assert received == []


async def test_cancelling_stops_the_tool_and_the_server_keeps_serving(connect):
    async with connect() as client:
        started = time.monotonic()
        with anyio.move_on_after(0.3):
            # Sleeps until its 5 s timeout unless cancelled.
            await client.call_tool("misbehave", {"mode": "sleep"})
        assert time.monotonic() - started < 2
        result = await client.call_tool("echo", {"text": "still here"})
        assert result.content[0].text == "still here"


async def test_ten_slow_calls_run_concurrently(connect):
    async with connect() as client:
        results = []

        async def call(i):
            result = await client.call_tool("echo", {"text": str(i), "sleep_ms": 300})
            results.append(result.content[0].text)

        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(call, i)
        elapsed = time.monotonic() - started
        assert sorted(results, key=int) == [str(i) for i in range(10)]
        assert elapsed < 1.5, f"10 calls of 300 ms took {elapsed:.2f} s"


def too_big_status(url):
    """Announces a 5 MiB body, past the 4 MiB cap, sends a little more than
    the cap, and reads the status (sending it all would race the server
    closing the connection)."""
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            (
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\n"
                f"Content-Length: {5 << 20}\r\n\r\n"
            ).encode()
        )
        try:
            # Past the cap, then the server answers without reading the rest.
            connection.sendall(b"x" * ((4 << 20) + 65536))
        except OSError:
            pass  # it may already have answered and closed
        status = connection.makefile("rb").readline().decode()
    return int(status.split()[1])


async def test_http_requires_the_token_and_refuses_foreign_origins(http_server, anyio_backend):
    initialize = INITIALIZE
    accept = {"Accept": "application/json, text/event-stream"}
    authorized = {**accept, "Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            response = await http.request(method, http_server, json=initialize if method == "POST" else None, headers=accept)
            assert response.status_code == 401, (method, response.status_code)
        wrong = {**accept, "Authorization": "Bearer wrong"}
        assert (await http.post(http_server, json=initialize, headers=wrong)).status_code == 401
        foreign = {**authorized, "Origin": "http://evil.example"}
        assert (await http.post(http_server, json=initialize, headers=foreign)).status_code == 403
        own = http_server.rsplit("/mcp", 1)[0]
        response = await http.post(http_server, json=initialize, headers={**authorized, "Origin": own})
        assert response.status_code == 200
        response = await http.post(http_server, json=initialize, headers=authorized)
        assert response.status_code == 200
        assert too_big_status(http_server) == 413
        response = await http.post(http_server, json=initialize, headers=authorized)
        assert response.status_code == 200, "the server keeps serving"
        health = await http.get(http_server.replace("/mcp", "/healthz"))
        assert health.status_code == 200


async def test_a_quiet_long_call_is_kept_alive_only_for_a_progress_token(config_file):
    """--keep-alive-ms 1000: a 3 s call whose tool reports once (at its
    start) gets "still running" progress each quiet second; the same call
    without a progress token gets no progress at all."""
    server = StdioServerParameters(
        command=BIN, args=[*server_args(config_file), "--keep-alive-ms", "1000"]
    )
    reports = []
    notifications = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async def on_message(message):
        notifications.append(message)

    async with Client(server, message_handler=on_message) as client:
        result = await client.call_tool(
            "echo", {"text": "x", "sleep_ms": 3000}, progress_callback=on_progress
        )
        assert not result.is_error
        assert reports[0] == (0.5, 1.0, "sleeping"), reports
        kept = [r for r in reports[1:] if r[2].startswith("still running")]
        assert len(kept) >= 2 and len(kept) == len(reports) - 1, reports
        values = [r[0] for r in reports]
        assert values == sorted(set(values)), reports

        def progress(seen):
            return [n for n in seen if isinstance(n, types.ProgressNotification)]

        # The same predicate sees the keep-alive notifications above...
        assert len(progress(notifications)) == len(reports), notifications
        notifications.clear()
        result = await client.call_tool("echo", {"text": "x", "sleep_ms": 2500})
        assert not result.is_error
        # ... and none without a token.
        assert progress(notifications) == [], notifications
