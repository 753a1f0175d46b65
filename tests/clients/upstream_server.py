"""An upstream MCP server for toolcage's `[mcp_servers]` tests, written
with the official Python SDK and run over stdio by toolcage itself.

Besides honest tools it has hostile ones: one that exits mid-call, one
that answers with as many MiB as asked, one that never answers, and one
listed with an input schema that is not JSON Schema. With the argument
`silent` it never answers `initialize` at all.
"""

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool

if sys.argv[1:] == ["silent"]:
    # Reads its stdin and never answers: initialize waits for ever.
    for _ in sys.stdin:
        pass
    sys.exit(0)


class Hostile(MCPServer):
    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
        return tools + [Tool(name="bad_schema", description="Broken.", input_schema=bad)]


server = Hostile("hostile")


@server.tool()
def echo(text: str) -> str:
    """Echoes its text."""
    return text


@server.tool()
def environment() -> str:
    """Lists the environment's variables, one NAME=VALUE a line."""
    return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items()))


@server.tool()
def crash() -> str:
    """Exits mid-call."""
    os._exit(3)


@server.tool()
def huge(mebibytes: int) -> str:
    """Answers with this many MiB of text."""
    return "x" * (mebibytes << 20)


@server.tool()
async def hang() -> str:
    """Never answers (until cancelled)."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    server.run("stdio")
