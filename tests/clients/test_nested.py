"""A tool calling a tool, over MCP through the official Python SDK: a
nested call whose rule is `ask` is put to the user with elicitation, as a
direct call is. Accepted, it runs; declined, it is refused; the result's
`_meta` lists both attempts."""

import os
import shutil
import tempfile
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from conftest import BIN

pytestmark = pytest.mark.anyio

META = "dev.toolcage/call"
FIXTURES = Path(os.environ["TOOLCAGE_FIXTURES"])

# `composer` may call echo; echo needs the user's approval.
CONFIG = """
[permissions]
default = "allow"
echo = "ask"

[components.composer]
calls = ["echo"]
"""


@pytest.fixture(scope="module")
def served():
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        tools = root / "tools"
        tools.mkdir()
        for name in ("echo.wasm", "composer.wasm"):
            shutil.copy(FIXTURES / name, tools / name)
        config = root / "toolcage.toml"
        config.write_text(CONFIG)
        yield [
            "--no-bundled", "--tools", str(tools), "--config", str(config),
            "--timeout-ms", "10000", "serve",
        ]


def compose(*texts):
    return {"calls": [{"tool": "echo", "arguments": {"text": t}} for t in texts]}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_nested_ask_is_put_to_the_user(served, mode):
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        approve = '"text": "yes"' in params.message
        return types.ElicitResult(action="accept", content={"approve": approve})

    server = StdioServerParameters(command=BIN, args=served)
    async with Client(server, mode=mode, elicitation_callback=answer) as client:
        result = await client.call_tool("compose", compose("yes", "no"))
    assert not result.is_error, result.content[0].text
    # Each nested call is asked about once, whatever the protocol: on
    # 2026-07-28 the call is retried with the answers, which it keeps.
    assert len(asked) == 2, asked
    assert all("`echo`" in question for question in asked), asked
    assert all("as the tool `compose` asks" in question for question in asked), asked
    assert {'"text": "yes"' in q for q in asked} == {True, False}, asked
    text = result.content[0].text
    assert text.startswith("yes\n"), text
    assert "The user refused this call to `echo`" in text and "declined" in text, text
    nested = result.meta[META]["nested"]
    assert [n["error_kind"] for n in nested] == [None, "permission_denied"], nested
    assert all(n["tool"] == "echo" and n["depth"] == 1 for n in nested), nested


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_nested_ask_without_elicitation_is_refused_saying_why(served, mode):
    server = StdioServerParameters(command=BIN, args=served)
    async with Client(server, mode=mode) as client:
        result = await client.call_tool("compose", compose("yes"))
    assert not result.is_error, result.content[0].text
    nested = result.meta[META]["nested"]
    assert nested[0]["error_kind"] == "permission_denied", nested
    assert "does not support elicitation" in result.content[0].text
