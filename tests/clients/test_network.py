"""The bundled `fetch` tool over MCP, driven by the official MCP Python SDK
over stdio, against real HTTP servers on loopback: a granted fetch converts
HTML to text and reports its network figures in `_meta`; a destination
without a grant is refused with a message the model can act on; a redirect to
a server the operator did not grant is never followed."""

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mcp import Client, StdioServerParameters

from conftest import BIN

pytestmark = pytest.mark.anyio

META = "dev.toolcage/call"

PAGE = b"""<!doctype html><html><head><title>Docs</title>
<script>document.write('never shown')</script></head>
<body><h1>Release notes</h1><p>Version <b>2.0</b> adds <a href="/more">grants</a>.</p>
<ul><li>first</li><li>second</li></ul><p>""" + b"More words. " * 40 + b"""</p></body></html>"""


@contextmanager
def serving(ip, seen):
    """A plain HTTP server on `ip` (loopback), recording the paths it is asked for."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            if self.path == "/page":
                body, kind, status = PAGE, "text/html; charset=utf-8", 200
            elif self.path.startswith("/go?to="):
                self.send_response(302)
                self.send_header("Location", self.path[len("/go?to="):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            elif self.path == "/image":
                body, kind, status = b"\x89PNG\r\n\x1a\n\0\0", "image/png", 200
            else:
                body, kind, status = b"missing", "text/plain", 404
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((ip, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{ip}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_granted_fetch_returns_text_and_its_network_figures():
    public_seen, internal_seen = [], []
    with serving("127.0.0.1", public_seen) as public, serving("127.0.0.2", internal_seen) as internal:
        args = ["--allow-net", f"http://{public}", "--timeout-ms", "10000", "serve"]
        server = StdioServerParameters(command=BIN, args=args)
        async with Client(server) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            hints = tools["fetch"].annotations
            assert (hints.read_only_hint, hints.open_world_hint) == (True, True)

            result = await client.call_tool("fetch", {"url": f"http://{public}/page"})
            assert not result.is_error, result.content[0].text
            text = result.content[0].text
            assert "Release notes" in text and "first" in text and "second" in text, text
            assert "<p>" not in text and "never shown" not in text, text
            assert result.structured_content["status"] == 200
            assert result.structured_content["next_offset"] is None
            net = result.meta[META]["net"]
            assert net["requests"] == 1 and net["denied"] == 0, net
            # bytes_out is the request head: no body was sent.
            assert net["bytes_in"] == len(PAGE) and 0 < net["bytes_out"] < 1024, net

            # Long content comes in pieces, each saying where to go on.
            result = await client.call_tool(
                "fetch", {"url": f"http://{public}/page", "max_chars": 100}
            )
            assert result.structured_content["next_offset"] == 100
            assert "offset=100" in result.content[0].text

            # Not granted: refused before anything is sent, and said so.
            result = await client.call_tool("fetch", {"url": f"http://{internal}/page"})
            assert result.is_error
            assert "not granted" in result.content[0].text, result.content[0].text
            assert result.meta[META]["net"]["denied"] == 1

            # A redirect to the ungranted server is followed by the tool, and
            # checked by the host again: refused.
            result = await client.call_tool(
                "fetch", {"url": f"http://{public}/go?to=http://{internal}/page"}
            )
            assert result.is_error
            assert "not granted" in result.content[0].text
            net = result.meta[META]["net"]
            assert (net["requests"], net["denied"]) == (1, 1), net

            # Binary content is refused.
            result = await client.call_tool("fetch", {"url": f"http://{public}/image"})
            assert result.is_error
            assert "binary content (image/png)" in result.content[0].text
    assert internal_seen == []
    assert "/page" in public_seen


async def test_without_a_grant_fetch_says_the_operator_granted_nothing():
    seen = []
    with serving("127.0.0.1", seen) as public:
        server = StdioServerParameters(command=BIN, args=["serve"])
        async with Client(server) as client:
            result = await client.call_tool("fetch", {"url": f"http://{public}/page"})
            assert result.is_error
            assert "not granted" in result.content[0].text
            assert result.meta[META]["net"] == {
                "requests": 0, "denied": 1, "bytes_out": 0, "bytes_in": 0,
                "redactions": 0,
            }
    assert seen == []
