"""Refusals that never reset a connection under a client still sending.

Straight to one `toolcage serve --http --stateless` with a token: a client
that writes its whole body before it reads (as Python's `http.client` and
nginx do) gets every early refusal as itself (token, Host, Origin, body cap,
method, content type, Accept, path), and its connection stays open for the
next request. A refusal of a request that asked for `Expect: 100-continue`
gets no "100 Continue" and its connection is closed; one refused after its
body was asked for (over the cap) gets its 413 after sending it all. A
client trickling a refused body, or sending more than the bound, is cut off
at the documented bound while other calls go on.
Through nginx: test_scale.py.
"""

import http.client
import json
import os
import socket
import threading
import time

import pytest

from conftest import CALL, HEADERS, TOKEN, launch_http, server_args

MIB = 1 << 20
# host/src/mcp/http/refusal.rs: DISCARD_MAX_TIME, DISCARD_MAX_BYTES.
DISCARD_MAX_TIME = 5.0
DISCARD_MAX_BYTES = 32 * MIB

AUTHORISED = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def guarded(config_file):
    """A stateless server with a token (and the default 4 MiB body cap): its
    (host, port)."""
    env = dict(os.environ, TOOLCAGE_TOKEN=TOKEN)
    process, url = launch_http(
        [*server_args(config_file), "--http", "127.0.0.1:0", "--stateless"], env=env
    )
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    yield host, int(port)
    process.terminate()
    assert process.wait(timeout=30) == 0


def call(address):
    """An authorised tools/call on a connection of its own: its text."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.request("POST", "/mcp", json.dumps(CALL), AUTHORISED)
    response = connection.getresponse()
    assert response.status == 200, response.read()
    text = json.loads(response.read())["result"]["content"][0]["text"]
    connection.close()
    return text


# What each early refusal path is sent (beside a body of `size` bytes), and
# its status.
REFUSALS = {
    "no token": ("POST", "/mcp", HEADERS, 3 * MIB, 401),
    "wrong token": ("POST", "/mcp", {**HEADERS, "Authorization": "Bearer nope"}, 3 * MIB, 401),
    "foreign Host": ("POST", "/mcp", {**AUTHORISED, "Host": "evil.example"}, 3 * MIB, 403),
    "foreign Origin": (
        "POST", "/mcp", {**AUTHORISED, "Origin": "http://evil.example"}, 3 * MIB, 403
    ),
    "body over the cap": ("POST", "/mcp", AUTHORISED, 12 * MIB, 413),
    "method": ("PUT", "/mcp", AUTHORISED, 3 * MIB, 405),
    "content type": ("POST", "/mcp", {**AUTHORISED, "Content-Type": "text/plain"}, 3 * MIB, 415),
    "Accept": ("POST", "/mcp", {**AUTHORISED, "Accept": "text/html"}, 3 * MIB, 406),
    "unknown path": ("POST", "/elsewhere", AUTHORISED, 3 * MIB, 404),
}


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refusal_reaches_a_client_that_sends_its_whole_body_first(guarded, refusal):
    method, path, headers, size, status = REFUSALS[refusal]
    connection = http.client.HTTPConnection(*guarded, timeout=30)
    # http.client writes the whole body, then reads: a reset under it would
    # raise BrokenPipeError or ConnectionResetError here.
    connection.request(method, path, b"x" * size, headers)
    response = connection.getresponse()
    assert response.status == status, response.read()
    response.read()
    # The connection stays open: the next request goes on the same socket.
    assert not response.will_close
    sock = connection.sock
    connection.request("GET", "/healthz")
    health = connection.getresponse()
    assert (health.status, health.read()) == (200, b"ok\n")
    assert connection.sock is sock, "the refusal closed the connection"
    connection.close()


def test_a_refusal_of_an_expected_body_invites_none_and_closes(guarded):
    """`Expect: 100-continue` without a token: the 401 comes at once, with no
    "100 Continue" before it, and the connection is closed after it."""
    with socket.create_connection(guarded, timeout=10) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            b"Content-Length: 3145728\r\nExpect: 100-continue\r\n\r\n"
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 401 "), received
    assert b"100 Continue" not in received


def head(address, length, extra=b""):
    """The head of a POST to /mcp with the token and a body of `length`."""
    return (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\n"
        + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {length}\r\n".encode()
        + extra + b"\r\n"
    )


def test_a_body_asked_for_then_refused_is_read_to_its_end(guarded):
    """`Expect: 100-continue` with 12 MiB over the 4 MiB cap: the server asks
    for the body ("100 Continue") and refuses it at the cap; the client sends
    it all and reads the 413, with no reset."""
    with socket.create_connection(guarded, timeout=10) as sock:
        sock.sendall(head(guarded, 12 * MIB, b"Expect: 100-continue\r\n"))
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
        sock.sendall(b"x" * (12 * MIB))
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413 "), answer


def test_a_refused_body_larger_than_the_bound_is_cut_off(guarded):
    """80 MiB announced and sent as fast as the server reads, over the 4 MiB
    cap: the 413 comes at once, and the connection is closed once the server
    has thrown away DISCARD_MAX_BYTES more, long before the end."""
    sent, answer, closed = 0, b"", False
    with socket.create_connection(guarded, timeout=10) as sock:
        sock.sendall(head(guarded, 80 * MIB))
        sock.settimeout(0)
        chunk = b"x" * MIB
        while sent < 80 * MIB and not closed:
            try:
                sent += sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            try:
                data = sock.recv(65536)
                closed |= data == b""
                answer += data
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed = True
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert closed, f"the connection took all {sent} bytes"
    # The cap, the bound, and what the sockets' buffers held.
    assert 4 * MIB + DISCARD_MAX_BYTES <= sent <= 4 * MIB + DISCARD_MAX_BYTES + 16 * MIB, sent


def test_a_trickled_refused_body_is_cut_off_at_the_bound(guarded):
    """A client that announces 10 MiB without a token and sends 1 KiB every
    50 ms gets its 401 at once and its connection closed after
    DISCARD_MAX_TIME; calls on other connections are served meanwhile."""
    served, stop = [], threading.Event()

    def others():
        while not stop.is_set():
            served.append(call(guarded))
            time.sleep(0.05)

    caller = threading.Thread(target=others)
    caller.start()
    try:
        with socket.create_connection(guarded, timeout=10) as sock:
            sock.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\n"
                + f"Content-Length: {10 * MIB}\r\n\r\n".encode()
            )
            began = time.monotonic()
            sock.settimeout(0.05)
            answer, closed_after = b"", None
            while closed_after is None and time.monotonic() - began < 3 * DISCARD_MAX_TIME:
                try:
                    sock.sendall(b"y" * 1024)
                    chunk = sock.recv(65536)
                    if not chunk:
                        closed_after = time.monotonic() - began
                    answer += chunk
                except socket.timeout:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    closed_after = time.monotonic() - began
                if not answer.startswith(b"HTTP/1.1 401 ") and time.monotonic() - began > 1:
                    pytest.fail(f"no 401 within a second of the headers: {answer!r}")
    finally:
        stop.set()
        caller.join(timeout=30)
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert closed_after is not None, "the trickling client was never cut off"
    assert DISCARD_MAX_TIME - 0.5 <= closed_after <= DISCARD_MAX_TIME + 2, closed_after
    assert len(served) >= 20 and set(served) == {"still served"}, served
