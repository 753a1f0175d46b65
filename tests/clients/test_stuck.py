"""A call whose tool is blocked in a host file operation (a read of a FIFO in
a mount never returns) is answered `timeout` at its deadline on every
frontend, five at once too, and the server still stops: at the end of
stdin and on SIGTERM, saying how many workers it left behind."""

import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import BIN, INITIALIZE

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TIMEOUT_MS = 1000
# The deadline, plus the second the issue allows for the answer.
ANSWERED_WITHIN_S = TIMEOUT_MS / 1000 + 1
CALLS = 5


@pytest.fixture
def fifo_mount(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "plain.txt").write_text("plain\n")
    return tmp_path


def serve_args(mount, *flags):
    return [
        "--mount", f"{mount}:/m",
        "--timeout-ms", str(TIMEOUT_MS),
        "--log-level", "warn",
        "serve", *flags,
    ]


def read_call(id, path="/m/fifo"):
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": path}},
    }


def assert_timed_out(reply):
    result = reply["result"]
    assert result["isError"], result
    assert result["_meta"]["dev.toolcage/call"]["error_kind"] == "timeout", result
    assert "time limit" in result["content"][0]["text"], result


def start_stdio(mount):
    server = subprocess.Popen(
        [BIN, *serve_args(mount)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Lines as they come, read on a thread (a buffered pipe and `select`
    # would miss lines already in the buffer).
    server.lines = queue.Queue()
    threading.Thread(
        target=lambda: [server.lines.put(line) for line in server.stdout], daemon=True
    ).start()
    return server


def send(server, *messages):
    for message in messages:
        server.stdin.write(json.dumps(message) + "\n")
    server.stdin.flush()


def read_replies(server, ids, within_s):
    """The replies to `ids` the server wrote within `within_s`."""
    replies, until = {}, time.monotonic() + within_s
    while set(ids) - set(replies):
        left = until - time.monotonic()
        if left <= 0:
            break
        try:
            message = json.loads(server.lines.get(timeout=left))
        except queue.Empty:
            break
        if message.get("id") in ids:
            replies[message["id"]] = message
    return replies


def test_stdio_answers_fifo_reads_at_their_deadline_and_ends_at_end_of_stdin(fifo_mount):
    server = start_stdio(fifo_mount)
    try:
        send(server, INITIALIZE, INITIALIZED)
        assert read_replies(server, [1], 30), "no answer to initialize"
        ids = list(range(2, 2 + CALLS))
        began = time.monotonic()
        send(server, *[read_call(id) for id in ids])
        replies = read_replies(server, ids, 30)
        took = time.monotonic() - began
        assert sorted(replies) == ids, f"answered: {sorted(replies)}"
        assert took <= ANSWERED_WITHIN_S, f"{CALLS} calls answered after {took:.2f} s"
        for reply in replies.values():
            assert_timed_out(reply)
        # The server still serves while the workers are stuck.
        send(server, read_call(10, "/m/plain.txt"))
        reply = read_replies(server, [10], 30)[10]
        assert reply["result"]["content"][0]["text"].startswith("plain"), reply
        server.stdin.close()
        assert server.wait(timeout=10) == 0
        stderr = server.stderr.read()
        assert "given-up calls still blocked in a file operation" in stderr, stderr
    finally:
        server.kill()


def test_stdio_sigterm_ends_with_a_worker_stuck(fifo_mount):
    server = start_stdio(fifo_mount)
    try:
        send(server, INITIALIZE, INITIALIZED, read_call(2))
        time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        replies = read_replies(server, [2], 30)
        assert_timed_out(replies[2])
        assert server.wait(timeout=10) == 0
    finally:
        server.kill()


def post(url, message, timeout=30):
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    request = urllib.request.Request(url, json.dumps(message).encode(), headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read().decode()
    if body.lstrip().startswith("{"):
        return json.loads(body)
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip():
            data = json.loads(line[5:])
            if "id" in data:
                return data
    raise AssertionError(f"no reply in {body!r}")


def test_http_answers_fifo_reads_at_their_deadline_and_stops_on_sigterm(fifo_mount):
    server = subprocess.Popen(
        [BIN, *serve_args(fifo_mount, "--http", "127.0.0.1:0", "--stateless")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in server.stderr:
            if "serving MCP at" in line:
                url = line.split("serving MCP at", 1)[1].strip()
                break
        assert url, "toolcage serve --http did not start"
        lines = []
        threading.Thread(target=lambda: lines.extend(server.stderr), daemon=True).start()
        replies, took = {}, {}

        def call(id):
            began = time.monotonic()
            replies[id] = post(url, read_call(id))
            took[id] = time.monotonic() - began

        threads = [threading.Thread(target=call, args=(id,)) for id in range(2, 2 + CALLS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(replies) == CALLS, f"answered: {sorted(replies)}"
        for id, reply in replies.items():
            assert_timed_out(reply)
            assert took[id] <= ANSWERED_WITHIN_S, f"call {id} answered after {took[id]:.2f} s"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
        time.sleep(0.2)
        stderr = "".join(lines)
        assert "given-up calls still blocked in a file operation" in stderr, stderr
    finally:
        server.kill()
