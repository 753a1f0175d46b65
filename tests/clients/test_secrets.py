"""A secret the tool never sees, over MCP with the official MCP Python SDK
over stdio: the bundled `fetch` tool calls a loopback API that demands a
bearer token and, like a buggy API, echoes it back. The host injects the
token from an environment variable named in toolcage.toml; the tool gets its
answer, and nothing that reaches the client (tools/list, tools/call, `_meta`)
carries the token. A redirect to another origin is followed without it."""

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mcp import Client, StdioServerParameters

from conftest import BIN

pytestmark = pytest.mark.anyio

META = "dev.toolcage/call"
TOKEN = "tc_live_9f8e7d6c5b4a+/="


@contextmanager
def api(ip, seen):
    """An API on `ip` that answers only with the token, and echoes it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            authorization = self.headers.get_all("Authorization") or []
            seen.append((self.path, authorization))
            if self.path.startswith("/go?to="):
                self.send_response(302)
                self.send_header("Location", self.path[len("/go?to="):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if authorization != [f"Bearer {TOKEN}"]:
                body, status = {"error": "unauthorized", "you_sent": authorization}, 401
            else:
                body, status = {"authorized": True, "you_sent": authorization[0]}, 200
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((ip, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{ip}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_injected_token_gets_the_answer_and_never_reaches_the_client(tmp_path):
    seen, elsewhere = [], []
    with api("127.0.0.1", seen) as origin, api("127.0.0.2", elsewhere) as other:
        config = tmp_path / "toolcage.toml"
        config.write_text(f"""
[secrets.API_TOKEN]
env = "TEST_API_TOKEN"

[components.fetch.network]
allow = ["http://{origin}", "http://{other}"]

[[components.fetch.network.inject]]
url = "http://{origin}"
header = "Authorization"
value = "Bearer {{{{ secrets.API_TOKEN }}}}"
""")
        server = StdioServerParameters(
            command=BIN,
            args=["--config", str(config), "serve"],
            env={"TEST_API_TOKEN": TOKEN},
        )
        async with Client(server) as client:
            listed = await client.list_tools()
            assert TOKEN not in listed.model_dump_json()

            result = await client.call_tool("fetch", {"url": f"http://{origin}/repos"})
            assert not result.is_error, result.content[0].text
            text = result.content[0].text
            assert '"authorized": true' in text, text
            assert "[redacted secret API_TOKEN]" in text, text
            assert result.meta[META]["net"]["redactions"] == 1, result.meta
            assert TOKEN not in result.model_dump_json()

            # A redirect to another origin: the tool follows it, the host
            # matches the new request again, and adds nothing.
            result = await client.call_tool(
                "fetch", {"url": f"http://{origin}/go?to=http://{other}/repos"}
            )
            assert "unauthorized" in result.content[0].text, result.content[0].text
            assert TOKEN not in result.model_dump_json()
    assert (("/repos", [f"Bearer {TOKEN}"])) in seen
    assert elsewhere == [("/repos", [])]
