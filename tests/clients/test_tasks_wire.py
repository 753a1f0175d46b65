"""Tasks (`io.modelcontextprotocol/tasks`, 2026-07-28) on the wire: raw
JSON-RPC lines to `toolcage serve` over stdio, no SDK in between, for what
the extension requires of a server and an SDK client would not send:
- a task only for a 2026-07-28 request that carries the extension in its
  own capabilities (not for a 2025-11-25 session that declared it at
  `initialize`, whose `initialize` result does not offer it either);
- -32602 for every `taskId` that is not a string, the server serving on;
- the tool's progress message from before the call became a task as the
  task's `statusMessage`."""

import json
import select
import subprocess
import time

import pytest

from conftest import BIN, server_args

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
# Every read waits at most this long.
READ_S = 20


class Wire:
    """`toolcage serve` on stdio, spoken to line by line."""

    def __init__(self, config_file, *flags):
        self.process = subprocess.Popen(
            [BIN, *server_args(config_file), *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0
        self.buffer = b""

    def send(self, method, params=None, id=True):
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if id:
            self.next_id += 1
            message["id"] = self.next_id
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        return message.get("id")

    def read(self):
        """The next message, within READ_S."""
        deadline = time.monotonic() + READ_S
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "toolcage sent no message in time"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = self.process.stdout.raw.read(65536)
                assert chunk, "toolcage closed stdout"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def answer(self, id):
        """The response to request `id`, skipping notifications."""
        for _ in range(1000):
            message = self.read()
            if message.get("id") == id and "method" not in message:
                return message
        raise AssertionError(f"no answer to {id}")

    def request(self, method, params=None):
        return self.answer(self.send(method, params))

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def meta(extensions=True):
    """A 2026-07-28 request's `_meta`, its capabilities with the tasks
    extension or without."""
    capabilities = {"extensions": {TASKS: {}}} if extensions else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "wire", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


def call(text, sleep_ms, extensions=True, modern=True):
    params = {"name": "echo", "arguments": {"text": text, "sleep_ms": sleep_ms}}
    if modern:
        params["_meta"] = meta(extensions)
    return params


@pytest.fixture
def wire(config_file):
    opened = []

    def open_wire(*flags):
        server = Wire(config_file, *flags)
        opened.append(server)
        return server

    yield open_wire
    for server in opened:
        server.close()


@pytest.mark.parametrize("revision", ["2025-11-25", "2025-06-18"])
def test_an_initialized_session_gets_its_result_in_line(wire, revision):
    """A session opened with `initialize` (declaring the extension there)
    is not offered it and gets its calls' results in line; a 2026-07-28
    request gets a task only when it carries the extension itself."""
    server = wire("--task-after-ms", "0")
    result = initialize(server, revision)
    assert result["protocolVersion"] == revision
    assert TASKS not in (result["capabilities"].get("extensions") or {}), result
    answer = server.request("tools/call", call("plain", 200, modern=False))
    assert answer["result"].get("resultType", "complete") != "task", answer
    assert answer["result"]["content"][0]["text"] == "plain"
    # A 2026-07-28 request on the same connection: a task only when its own
    # capabilities carry the extension, whatever `initialize` declared.
    plain = server.request("tools/call", call("plain", 100, extensions=False))
    assert plain["result"].get("resultType", "complete") != "task", plain
    assert plain["result"]["content"][0]["text"] == "plain"
    task = server.request("tools/call", call("task", 100))
    assert task["result"]["resultType"] == "task", task
    again = server.request("tools/call", call("again", 100, extensions=False))
    assert again["result"].get("resultType", "complete") != "task", again


def initialize(server, revision="2025-11-25"):
    """Opens a session at `revision`, declaring the tasks extension."""
    answer = server.request(
        "initialize",
        {
            "protocolVersion": revision,
            "capabilities": {"extensions": {TASKS: {}}},
            "clientInfo": {"name": "wire", "version": "1"},
        },
    )
    server.send("notifications/initialized", id=False)
    return answer["result"]


def test_every_task_id_that_is_not_a_string_is_invalid_params(wire):
    server = wire("--task-after-ms", "0")
    for method in ["tasks/get", "tasks/cancel"]:
        for task_id in [1, None, {}, [], True]:
            answer = server.request(method, {"taskId": task_id, "_meta": meta()})
            assert answer.get("error", {}).get("code") == -32602, (method, task_id, answer)
        unknown = server.request(method, {"taskId": "0" * 32, "_meta": meta()})
        assert unknown["error"]["code"] == -32602, unknown
    # And it serves on.
    answer = server.request("tools/call", call("still here", 0, extensions=False))
    assert answer["result"]["content"][0]["text"] == "still here"


def test_progress_from_before_the_task_is_its_status_message(wire):
    server = wire("--task-after-ms", "300")
    # echo reports "sleeping" at its start, then sleeps past the 300 ms.
    handle = server.request("tools/call", call("slow", 1500))
    assert handle["result"]["resultType"] == "task", handle
    task_id = handle["result"]["taskId"]
    statuses = []
    for _ in range(100):
        task = server.request("tasks/get", {"taskId": task_id, "_meta": meta()})["result"]
        if task["status"] != "working":
            break
        statuses.append(task.get("statusMessage"))
        time.sleep(0.1)
    assert statuses and all(status == "sleeping" for status in statuses), statuses
    assert task["status"] == "completed", task
