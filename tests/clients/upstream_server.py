"""An upstream MCP server for toolcage's `[mcp_servers]` tests, written
with the official Python SDK and run over stdio by toolcage itself.

Besides honest tools it has hostile ones: one that exits mid-call, one
that answers with as many MiB as asked, one that never answers, one that
floods `notifications/tools/list_changed`, and one listed with an input
schema that is not JSON Schema. Others show what the server can reach
(files, the network, its environment), for the confinement tests. With
the argument `silent` it never answers `initialize` at all; with `many N`
(or after its tool `grow`) it lists N tools more; with `http PORT` it serves
Streamable HTTP on 127.0.0.1:PORT (any Host header: the tests reach it by
made-up names too), its answers as SSE streams, or with `http PORT json`
as JSON bodies.
"""

import asyncio
import os
import sys

# With `STARTS` set, each start appends the process id to that file, and
# fails at once while `$STARTS.fail` exists (for the restart tests).
if os.environ.get("STARTS"):
    with open(os.environ["STARTS"], "a") as starts:
        starts.write(f"{os.getpid()}\n")
    if os.path.exists(os.environ["STARTS"] + ".fail"):
        sys.exit(1)

import socket

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import Tool

if sys.argv[1:] == ["silent"]:
    # Reads its stdin and never answers: initialize waits for ever.
    for _ in sys.stdin:
        pass
    sys.exit(0)


# `many N` lists N more tools, `many_000` on (listed only, never called).
extra_tools = int(sys.argv[2]) if sys.argv[1:2] == ["many"] else 0


class Hostile(MCPServer):
    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
        empty = {"type": "object"}
        many = [Tool(name=f"many_{i:03}", description="Listed.", input_schema=empty) for i in range(extra_tools)]
        return tools + [Tool(name="bad_schema", description="Broken.", input_schema=bad)] + many


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
def read_file(path: str) -> str:
    """The text of a file, or why it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return f"error: {e}"


@server.tool()
def connect(port: int) -> str:
    """Connects to 127.0.0.1:port: `connected`, or why not."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as e:
        return f"error: {e}"


@server.tool()
async def steps(count: int, ctx: Context) -> str:
    """Reports its progress, and logs, `count` times."""
    for i in range(count):
        await ctx.report_progress(i + 1, count, f"step {i + 1}")
        await ctx.info(f"did step {i + 1}")
    return "done"


def added() -> str:
    """A tool added while the server runs."""
    return "added"


@server.tool()
async def change_tools(add: bool, ctx: Context) -> str:
    """Adds the tool `added` (or removes it), and says the list changed."""
    if add:
        server.add_tool(added)
    else:
        server.remove_tool("added")
    await ctx.request_context.session.send_tool_list_changed()
    return "changed"


@server.tool()
async def grow(count: int, ctx: Context) -> str:
    """Lists `count` more tools (`many_000` on), and says the list changed."""
    global extra_tools
    extra_tools = count
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def flood(count: int, ctx: Context) -> str:
    """Says `count` times that the tool list changed (it did not)."""
    for _ in range(count):
        await ctx.request_context.session.send_tool_list_changed()
    return "flooded"


@server.tool()
def authorization(ctx: Context) -> str:
    """The Authorization header of the request that called it."""
    return (ctx.headers or {}).get("authorization", "none")


@server.tool()
def linger() -> str:
    """Keeps the process alive after its input ends (a non-daemon thread)."""
    import threading
    import time

    threading.Thread(target=time.sleep, args=(3600,)).start()
    return "lingering"


class Name(BaseModel):
    name: str


@server.tool()
async def ask(ctx: Context) -> str:
    """Asks the user their name (elicitation), and greets them."""
    result = await ctx.elicit("What is your name?", Name)
    if result.action == "accept":
        return f"hello {result.data.name}"
    return result.action


@server.tool()
async def ask_with(variable: str, ctx: Context) -> str:
    """Asks a question that quotes one of its environment's variables."""
    result = await ctx.elicit(f"{os.environ.get(variable)}: what is your name?", Name)
    return result.action


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        from mcp.server.transport_security import TransportSecuritySettings

        open_hosts = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            transport_security=open_hosts,
            json_response=sys.argv[3:4] == ["json"],
        )
    else:
        server.run("stdio")
