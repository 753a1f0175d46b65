"""Tasks (the `io.modelcontextprotocol/tasks` extension of MCP 2026-07-28):
long calls answered with a task handle that the official Python SDK client
polls (through its extension interface, tests/clients/tasks.py), over stdio
and Streamable HTTP. Behind nginx: test_scale.py."""

import os
import re
import time
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import tasks
from conftest import BIN, TOKEN, TOOLS, launch_http, server_args
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
TASK_ID = re.compile(r"^[0-9a-f]{32}$")


@asynccontextmanager
async def open_client(transport, config_file, *flags, extensions=None, token=TOKEN, url=None):
    """A 2026-07-28 client of `toolcage serve FLAGS` (a server of its own, or
    the one at `url`), declaring the tasks extension unless `extensions=[]`."""
    if extensions is None:
        extensions = [tasks.TasksExtension()]
    if transport == "stdio":
        server = StdioServerParameters(command=BIN, args=[*server_args(config_file), *flags])
        async with Client(server, mode=MODERN, extensions=extensions) as client:
            yield client
        return
    process = None
    if url is None:
        env = dict(os.environ, TOOLCAGE_TOKEN=token)
        process, url = launch_http([*server_args(config_file), "--http", "127.0.0.1:0", *flags], env=env)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(
                streamable_http_client(url, http_client=http), mode=MODERN, extensions=extensions
            ) as client:
                yield client
    finally:
        if process:
            process.terminate()
            assert process.wait(timeout=30) == 0


@pytest.fixture(params=["stdio", "http"])
def transport(request):
    return request.param


async def test_a_long_call_becomes_a_task_and_a_short_one_does_not(transport, config_file):
    extension = tasks.TasksExtension()
    async with open_client(
        transport, config_file, "--task-after-ms", "400", extensions=[extension]
    ) as client:
        discovered = await client.session.send_discover(MODERN)
        assert tasks.TASKS in discovered["capabilities"]["extensions"]
        result = await client.call_tool("echo", {"text": "quick"})
        assert result.content[0].text == "quick" and extension.handles == []

        started = time.monotonic()
        result = await client.call_tool("echo", {"text": "slow", "sleep_ms": 1500})
        # Polled to the end: the SDK's call_tool returns the tool's result.
        assert result.content[0].text == "slow" and not result.is_error
        assert result.structured_content == {"length": 4}
        assert time.monotonic() - started < 4
        [handle] = extension.handles
        assert TASK_ID.match(handle.task_id), handle
        assert handle.status == "working"
        assert handle.ttl_ms == 900_000 and handle.poll_interval_ms == 1000


async def test_get_reports_working_then_the_result(transport, config_file):
    async with open_client(transport, config_file, "--task-after-ms", "0") as client:
        handle = await client.session.call_tool(
            "echo", {"text": "later", "sleep_ms": 1200}, allow_claimed=True
        )
        assert isinstance(handle, tasks.CreateTaskResult)
        working = await tasks.get(client.session, handle.task_id)
        assert working.status == "working" and working.result is None
        assert working.created_at == handle.created_at
        done = await tasks.wait(client.session, handle.task_id)
        assert done.status == "completed", done
        assert done.result["content"][0]["text"] == "later"
        assert done.result["structuredContent"] == {"length": 5}
        assert done.result["isError"] is False
        # A finished task can be read again, until its ttl.
        again = await tasks.get(client.session, handle.task_id)
        assert again.status == "completed" and again.result == done.result
        # tasks/update is acknowledged (a tool asks nothing while it is a task).
        await tasks.update(client.session, handle.task_id, {"nothing": {"action": "decline"}})


async def test_a_tool_error_is_a_completed_task_with_an_error_result(transport, config_file):
    async with open_client(transport, config_file, "--task-after-ms", "0") as client:
        handle = await client.session.call_tool(
            "misbehave", {"mode": "loop"}, allow_claimed=True
        )
        done = await tasks.wait(client.session, handle.task_id)
        # The extension keeps `failed` for JSON-RPC errors.
        assert done.status == "completed", done
        assert done.result["isError"] is True
        assert "ran out of fuel" in done.result["content"][0]["text"]


async def test_cancel_stops_the_guest_within_milliseconds(transport, config_file):
    async with open_client(transport, config_file, "--task-after-ms", "0") as client:
        # Sleeps until its 5 s timeout unless cancelled.
        handle = await client.session.call_tool(
            "misbehave", {"mode": "sleep"}, allow_claimed=True
        )
        started = time.monotonic()
        await tasks.cancel(client.session, handle.task_id)
        task = await tasks.wait(client.session, handle.task_id, every_s=0.01)
        assert task.status == "cancelled", task
        assert time.monotonic() - started < 0.5
        result = await client.call_tool("echo", {"text": "still here"})
        assert result.content[0].text == "still here"


async def test_an_unknown_id_is_invalid_params(transport, config_file):
    async with open_client(transport, config_file) as client:
        for request in (tasks.get, tasks.cancel):
            with pytest.raises(MCPError) as raised:
                await request(client.session, "0" * 32)
            assert raised.value.code == -32602
            assert "there is no task" in raised.value.error.message


async def test_a_task_is_forgotten_after_its_ttl(config_file):
    async with open_client(
        "stdio", config_file, "--task-after-ms", "0", "--task-ttl-s", "1"
    ) as client:
        handle = await client.session.call_tool("echo", {"text": "x"}, allow_claimed=True)
        assert handle.ttl_ms == 1000
        done = await tasks.wait(client.session, handle.task_id, every_s=0.02)
        assert done.status == "completed"
        await anyio.sleep(1.2)
        with pytest.raises(MCPError) as raised:
            await tasks.get(client.session, handle.task_id)
        assert raised.value.code == -32602

        # A task still running at its ttl is stopped, not left running.
        handle = await client.session.call_tool(
            "misbehave", {"mode": "sleep"}, allow_claimed=True
        )
        await anyio.sleep(1.2)
        with pytest.raises(MCPError):
            await tasks.get(client.session, handle.task_id)
        started = time.monotonic()
        result = await client.call_tool("echo", {"text": "next"})
        assert result.content[0].text == "next" and time.monotonic() - started < 1


async def test_a_task_belongs_to_the_token_that_made_it(config_file, tmp_path):
    """Two tokens on one stateless server: the other token's tasks/get and
    tasks/cancel are answered as for an unknown id, and do not cancel it."""
    tokens = tmp_path / "tokens"
    other = "second-token-91c2"
    tokens.write_text(f"# one per client\n{TOKEN}\n\n{other}\n")
    process, url = launch_http([
        *server_args(config_file), "--http", "127.0.0.1:0", "--stateless",
        "--token-file", str(tokens), "--task-after-ms", "0",
    ])
    try:
        async with open_client("http", config_file, url=url) as mine, \
                open_client("http", config_file, url=url, token=other) as theirs:
            handle = await mine.session.call_tool(
                "echo", {"text": "mine", "sleep_ms": 800}, allow_claimed=True
            )
            for request in (tasks.get, tasks.cancel):
                with pytest.raises(MCPError) as raised:
                    await request(theirs.session, handle.task_id)
                assert raised.value.code == -32602
                assert "there is no task" in raised.value.error.message
            done = await tasks.wait(mine.session, handle.task_id)
            assert done.status == "completed"
            assert done.result["content"][0]["text"] == "mine"
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


async def test_a_client_without_the_extension_gets_no_task(transport, config_file):
    async with open_client(transport, config_file, "--task-after-ms", "0", extensions=[]) as client:
        result = await client.call_tool("echo", {"text": "inline", "sleep_ms": 300})
        assert result.content[0].text == "inline"
        # tasks/* need the extension declared on the request.
        with pytest.raises(MCPError) as raised:
            await tasks.get(client.session, "0" * 32)
        assert raised.value.code == -32021


async def test_no_tasks_offers_no_extension(config_file):
    extension = tasks.TasksExtension()
    async with open_client(
        "stdio", config_file, "--no-tasks", extensions=[extension]
    ) as client:
        discovered = await client.session.send_discover(MODERN)
        assert tasks.TASKS not in discovered["capabilities"].get("extensions", {})
        result = await client.call_tool("echo", {"text": "inline", "sleep_ms": 300})
        assert result.content[0].text == "inline" and extension.handles == []


async def test_a_script_run_as_a_task_shows_each_nested_call_as_it_ends(tmp_path):
    """`run_code` made a task at once: polling `tasks/get` sees the status
    say how many nested calls have ended, and how the last did, as they
    end; the result is the script's."""
    config = tmp_path / "toolcage.toml"
    config.write_text('[permissions]\ndefault = "allow"\n')
    args = ["--tools", TOOLS, "--config", str(config), "serve", "--task-after-ms", "0"]
    script = "\n".join(f'await echo(text="{n}", sleep_ms=500)' for n in range(3)) + '\n"all"'
    server = StdioServerParameters(command=BIN, args=args)
    async with Client(server, mode=MODERN, extensions=[tasks.TasksExtension()]) as client:
        handle = await client.session.call_tool("run_code", {"code": script}, allow_claimed=True)
        seen = []
        while True:
            task = await tasks.get(client.session, handle.task_id)
            if task.status_message and task.status_message not in seen:
                seen.append(task.status_message)
            if task.status in tasks.TERMINAL:
                break
            await anyio.sleep(0.1)
    assert task.status == "completed", task
    assert task.result["content"][0]["text"] == '"all"', task.result
    ended = [message for message in seen if "nested call" in message]
    assert "1 nested call ended; the last: `echo` (ok)" in ended, seen
    assert "2 nested calls ended; the last: `echo` (ok)" in ended, seen


async def test_a_script_task_waits_for_an_answer_and_resumes_once(tmp_path):
    """`run_code` made a task at once, whose script edits a file and then
    writes one under an `ask` rule: the task waits in `input_required` with
    the question in `inputRequests`; `tasks/update` with a yes resumes it,
    a second one is ignored, and the edit before the question ran once."""
    rw = tmp_path / "rw"
    rw.mkdir()
    (rw / "log.txt").write_text("END\n")
    config = tmp_path / "toolcage.toml"
    config.write_text('[permissions]\ndefault = "allow"\nwrite_file = "ask"\n')
    args = ["--tools", TOOLS, "--config", str(config), "--mount", f"{rw}:/rw:rw"]
    args += ["serve", "--task-after-ms", "0"]
    script = (
        'await edit_file(path="/rw/log.txt", old_text="END", new_text="x\\nEND")\n'
        'await write_file(path="/rw/asked.txt", content="yes")\n"done"'
    )

    async def never(context, params):
        raise AssertionError("a task's question goes through inputRequests, not a request")

    server = StdioServerParameters(command=BIN, args=args)
    extension = tasks.TasksExtension()
    async with Client(server, mode=MODERN, extensions=[extension], elicitation_callback=never) as client:
        handle = await client.session.call_tool("run_code", {"code": script}, allow_claimed=True)
        deadline = time.monotonic() + 30
        while (task := await tasks.get(client.session, handle.task_id)).status == "working":
            assert time.monotonic() < deadline, task
            await anyio.sleep(0.05)
        assert task.status == "input_required", task
        (key, asked), = task.input_requests.items()
        assert asked["method"] == "elicitation/create", asked
        assert "write_file" in asked["params"]["message"], asked
        assert not (rw / "asked.txt").exists()
        yes = {"action": "accept", "content": {"approve": True}}
        await tasks.update(client.session, handle.task_id, {key: yes})
        await tasks.update(client.session, handle.task_id, {key: yes})
        done = await tasks.wait(client.session, handle.task_id, every_s=0.05)
    assert done.status == "completed", done
    assert done.result["content"][0]["text"] == '"done"', done.result
    assert (rw / "log.txt").read_text() == "x\nEND\n"
    assert (rw / "asked.txt").read_text() == "yes"
