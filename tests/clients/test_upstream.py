"""An upstream MCP server's tools served again by `toolcage serve`, seen by
the MCP Python SDK: toolcage is a gateway, its policy in the middle. The
upstream server (`upstream_server.py`, on this same Python) changes its
tool list while toolcage serves, and toolcage's own clients hear of it, on
2026-07-28 (`subscriptions/listen`) and the older revisions; a tool named
like a bundled one stays the bundled one's."""

import sys
import tempfile
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from conftest import BIN

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent / "upstream_server.py"
ANNOUNCED_WITHIN_S = 10


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_upstream_tools_are_served_and_their_changes_announced(mode):
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "toolcage.toml"
        config.write_text(
            "[mcp_servers.h]\n"
            f"command = {str(sys.executable)!r}\n"
            f"args = [{str(SERVER)!r}]\n"
            'prefix = ""\n'
        )
        box = {"changed": anyio.Event()}

        async def on_message(message):
            if isinstance(message, types.ToolListChangedNotification):
                box["changed"].set()

        server = StdioServerParameters(command=BIN, args=["--config", str(config), "serve"])
        async with Client(server, mode=mode, message_handler=on_message) as client:

            async def tools():
                return {tool.name: tool for tool in (await client.list_tools()).tools}

            async def changed(subscription):
                with anyio.fail_after(ANNOUNCED_WITHIN_S):
                    if subscription is not None:
                        event = await subscription.__anext__()
                        assert type(event).__name__ == "ToolsListChanged", event
                    else:
                        await box["changed"].wait()
                        box["changed"] = anyio.Event()

            listed = await tools()
            assert "pid" in listed and "change_tools" in listed
            # The bundled read_file keeps its name: the server's is shadowed.
            assert "why it cannot be read" not in listed["read_file"].description
            result = await client.call_tool("echo", {"text": "through toolcage"})
            assert result.content[0].text == "through toolcage"
            # Validated by toolcage before the server sees it.
            result = await client.call_tool("echo", {"text": 7})
            assert result.is_error and "do not match its input schema" in result.content[0].text

            async def add_and_remove(subscription):
                await client.call_tool("change_tools", {"add": True})
                await changed(subscription)
                assert "added" in await tools()
                result = await client.call_tool("added", {})
                assert result.content[0].text == "added"
                await client.call_tool("change_tools", {"add": False})
                await changed(subscription)
                assert "added" not in await tools()

            if mode == "2026-07-28":
                async with client.listen(tools_list_changed=True) as subscription:
                    await add_and_remove(subscription)
            else:
                await add_and_remove(None)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_upstream_servers_question_reaches_the_user_through_toolcage(mode):
    """The upstream server asks its user (elicitation) during a call, or
    during a script's call of it. The client is asked once, naming the
    tool, and the answer goes back to the server. Before 2026-07-28 the
    question is an `elicitation/create` request while the call waits; from
    2026-07-28 it ends the call as input-required, and the retry carries
    the answer to the server's same question."""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "toolcage.toml"
        config.write_text(
            "[mcp_servers.h]\n"
            f"command = {str(sys.executable)!r}\n"
            f"args = [{str(SERVER)!r}]\n"
        )
        asked = []

        async def answer(context, params):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"name": "Grace"})

        server = StdioServerParameters(command=BIN, args=["--config", str(config), "serve"])
        async with Client(server, mode=mode, elicitation_callback=answer) as client:
            result = await client.call_tool("mcp__h__ask", {})
            assert result.content[0].text == "hello Grace", result
            assert asked == ["The tool `mcp__h__ask` asks: What is your name?"]
            script = "[(await mcp__h__ask())['output'], (await mcp__h__echo(text='x'))['output']]"
            result = await client.call_tool("run_code", {"code": script})
            assert not result.is_error, result
            assert result.structured_content["result"] == ["hello Grace", "x"], result
            assert asked[1:] == ["The tool `mcp__h__ask` asks: What is your name?"], asked
