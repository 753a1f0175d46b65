"""The HTTP edge of `toolcage serve --http`, spoken raw over sockets on
127.0.0.1 (host/src/mcp/http/: edge.rs, sessions.rs, limits.rs, and the
bearer check in mod.rs):
- one Host, read as RFC 9112 reads it: two Host lines, userinfo in Host or
  an invalid Host get 400; an absolute-form target's authority is the host
  checked; two Origin lines get 403;
- the bearer scheme in any case, with one or more spaces or tabs;
- a session is its opener's token's: another token gets 404 for it (POST,
  GET, DELETE), as for an unknown one; a DELETE of an unknown or ended
  session gets 404; each token holds at most --max-sessions-per-token, a new
  one past it closing the idlest (never one in use), and 429 only when
  all are in use; a session unused past --session-idle-ms is closed;
- a tools/call with bad params gets -32602 naming the problem; a malformed
  chunked body gets 400; a request that is not Unicode text (a lone
  surrogate, a byte that is not UTF-8) gets -32700 for its id;
- the limits on what a client holds, each obeyed and breached: the head's
  size and time, idle connections (shorter before a token is shown), the
  wait for a body after "100 Continue", the caps on connections (past the
  cap on unproven ones, a new connection takes the slot of the oldest idle
  one); a thousand idle and trickling sockets, and a flood of unfinished
  large heads, without a token, which leave the server's memory bounded
  and an honest client answered throughout.
Every loop is bounded in count and time.
"""

import http.client
import json
import os
import socket
import tempfile
import threading
import time

import pytest

from conftest import CALL, HEADERS, INITIALIZE, TOKEN, launch_http, server_args

TOKEN_B = "test-token-b-91c2"
TOKEN_C = "test-token-c-5d07"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def bearer(token):
    return {**HEADERS, "Authorization": f"Bearer {token}"}


def start(config_file, *flags):
    """`toolcage serve --http` with the three tokens and `flags`: (process,
    (host, port))."""
    tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
    tokens.write(f"{TOKEN}\n{TOKEN_B}\n{TOKEN_C}\n")
    tokens.close()
    args = [*server_args(config_file), "--http", "127.0.0.1:0", "--token-file", tokens.name]
    process, url = launch_http([*args, *flags], env=dict(os.environ))
    os.unlink(tokens.name)
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    return process, (host, int(port))


def stop(process):
    process.terminate()
    assert process.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def stateless(config_file):
    """Stateless, every limit at its default."""
    process, address = start(config_file, "--stateless")
    yield process, address
    stop(process)


@pytest.fixture(scope="module")
def sessions(config_file):
    """Sessions, every limit at its default."""
    process, address = start(config_file)
    yield address
    stop(process)


@pytest.fixture(scope="module")
def capped(config_file):
    """Sessions, at most 3 a token."""
    process, address = start(config_file, "--max-sessions-per-token", "3")
    yield address
    stop(process)


# The limits of the `limited` server, in seconds.
HEAD_S = 2.0
IDLE_S = 5.0
BODY_S = 1.5


@pytest.fixture(scope="module")
def limited(config_file):
    """Stateless, with small limits to breach quickly."""
    process, address = start(
        config_file, "--stateless",
        "--header-timeout-ms", str(int(HEAD_S * 1000)),
        "--idle-timeout-ms", str(int(IDLE_S * 1000)),
        "--body-timeout-ms", str(int(BODY_S * 1000)),
        "--max-header-kib", "16",
        "--max-connections", "30",
        "--max-unauthenticated-connections", "20",
    )
    yield address
    stop(process)


# --- raw HTTP -----------------------------------------------------------------


def head_of(method, target, headers, body=b""):
    """A request's bytes: `headers` is a list of (name, value) pairs, sent
    as they are (repeated names too)."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body and not any(name.lower() == "transfer-encoding" for name, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_response(sock, deadline_s=10):
    """Reads one response (its head, then a Content-Length or chunked body,
    or up to the close): (status, headers, body)."""
    sock.settimeout(deadline_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    if status == 100:
        return status, headers, rest
    if "content-length" in headers:
        length = int(headers["content-length"])
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, headers, rest[:length]
    if headers.get("transfer-encoding") == "chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, headers, dechunk(rest)
    while chunk := sock.recv(65536):
        rest += chunk
    return status, headers, rest


def dechunk(data):
    body = b""
    while data:
        size_line, data = data.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        body += data[:size]
        data = data[size + 2:]
    return body


def exchange(address, request, deadline_s=10):
    """`request` on a connection of its own: (status, headers, body)."""
    with socket.create_connection(address, timeout=deadline_s) as sock:
        sock.sendall(request)
        return read_response(sock, deadline_s)


def own_host(address):
    return f"{address[0]}:{address[1]}"


def call_request(address, token=TOKEN, host=None, target="/mcp", extra=(), call=CALL):
    headers = [("Host", host or own_host(address))]
    headers += [(name, value) for name, value in bearer(token).items()]
    headers += list(extra)
    return head_of("POST", target, headers, json.dumps(call).encode())


def answer(body):
    """The JSON-RPC message of a plain JSON or event-stream body."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip().startswith("{"):
            return json.loads(line[5:])
    raise AssertionError(f"no JSON-RPC message in {text!r}")


def echoed(body):
    return answer(body)["result"]["content"][0]["text"]


# --- Host and Origin ----------------------------------------------------------


def test_the_own_host_is_served(stateless):
    _, address = stateless
    status, _, body = exchange(address, call_request(address))
    assert status == 200 and echoed(body) == "still served"


def test_two_host_lines_are_refused(stateless):
    _, address = stateless
    request = call_request(address, extra=[("Host", "attacker.test")])
    assert exchange(address, request)[0] == 400


def test_userinfo_in_host_is_refused(stateless):
    _, address = stateless
    request = call_request(address, host=f"attacker.test@{own_host(address)}")
    assert exchange(address, request)[0] == 400


def test_an_invalid_host_is_refused(stateless):
    _, address = stateless
    assert exchange(address, call_request(address, host="not a host"))[0] == 400


def test_an_absolute_target_names_the_host(stateless):
    """RFC 9112 §3.2.2: the target's authority wins over Host."""
    _, address = stateless
    foreign = call_request(address, target="http://attacker.test/mcp")
    assert exchange(address, foreign)[0] == 403
    own = call_request(address, target=f"http://{own_host(address)}/mcp")
    status, _, body = exchange(address, own)
    assert status == 200 and echoed(body) == "still served"
    userinfo = call_request(address, target=f"http://x@{own_host(address)}/mcp")
    assert exchange(address, userinfo)[0] == 400


def test_two_origin_lines_are_refused(stateless):
    _, address = stateless
    own = f"http://{own_host(address)}"
    request = call_request(address, extra=[("Origin", own), ("Origin", "http://attacker.test")])
    assert exchange(address, request)[0] == 403
    # The own origin alone is served.
    status, _, body = exchange(address, call_request(address, extra=[("Origin", own)]))
    assert status == 200 and echoed(body) == "still served"


# --- the bearer scheme --------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}", f"Bearer\t{TOKEN}"],
)
def test_the_bearer_scheme_in_any_case_with_any_spaces(stateless, authorization):
    _, address = stateless
    headers = [("Host", own_host(address)), *HEADERS.items(), ("Authorization", authorization)]
    status, _, body = exchange(address, head_of("POST", "/mcp", headers, json.dumps(CALL).encode()))
    assert status == 200 and echoed(body) == "still served"


@pytest.mark.parametrize("authorization", ["Bearer", f"Basic {TOKEN}", f"Bearer{TOKEN}"])
def test_no_bearer_token_is_refused(stateless, authorization):
    _, address = stateless
    headers = [("Host", own_host(address)), *HEADERS.items(), ("Authorization", authorization)]
    assert exchange(address, head_of("POST", "/mcp", headers, json.dumps(CALL).encode()))[0] == 401


# --- error codes --------------------------------------------------------------


@pytest.mark.parametrize(
    "params, named",
    [
        ({"name": "echo", "arguments": "text"}, "`params.arguments`"),
        ({"name": "echo", "arguments": ["text"]}, "`params.arguments`"),
        ({"name": "echo", "arguments": 7}, "`params.arguments`"),
        ({"arguments": {"text": "x"}}, "`params.name`"),
    ],
)
def test_bad_call_params_are_invalid_params(stateless, params, named):
    _, address = stateless
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    status, _, body = exchange(address, call_request(address, call=call))
    error = answer(body)["error"]
    assert error["code"] == -32602, (status, error)
    assert named in error["message"], error


@pytest.mark.parametrize("mode", ["stateless", "sessions"])
@pytest.mark.parametrize(
    "body, request_id",
    [
        # A lone surrogate: JSON's grammar, but no Unicode text.
        (b'{"jsonrpc":"2.0","id":41,"method":"tools/call",'
         b'"params":{"name":"echo","arguments":{"text":"\\ud800"}}}', 41),
        # A byte that is not UTF-8, the id after it.
        (b'{"jsonrpc":"2.0","method":"tools/call",'
         b'"params":{"name":"echo","arguments":{"text":"a\xff"}},"id":"forty-two"}', "forty-two"),
    ],
)
def test_a_request_that_is_not_unicode_gets_a_parse_error_for_its_id(request, mode, body, request_id):
    served = request.getfixturevalue(mode)
    address = served[1] if mode == "stateless" else served
    headers = [("Host", own_host(address)), *bearer(TOKEN).items()]
    status, _, answered = exchange(address, head_of("POST", "/mcp", headers, body))
    error = answer(answered)
    assert status == 400, (status, answered)
    assert error["id"] == request_id, error
    assert error["error"]["code"] == -32700, error
    assert "not valid JSON text" in error["error"]["message"], error
    # The server goes on: the next request is answered.
    follow = CALL if mode == "stateless" else INITIALIZE
    status, _, answered = exchange(address, call_request(address, call=follow))
    assert status == 200 and "result" in answer(answered), (status, answered)


def chunked_call(address, token=TOKEN, session=None):
    headers = [("Host", own_host(address)), *bearer(token).items()]
    headers.append(("Transfer-Encoding", "chunked"))
    if session:
        headers.append(("Mcp-Session-Id", session))
    return head_of("POST", "/mcp", headers, b"zz\r\n{}\r\n0\r\n\r\n")


def test_a_malformed_chunked_body_is_a_bad_request(stateless, sessions):
    _, address = stateless
    assert exchange(address, chunked_call(address))[0] == 400
    session = open_session(sessions, TOKEN)
    assert exchange(sessions, chunked_call(sessions, session=session))[0] == 400
    assert delete(sessions, TOKEN, session)[0] in (200, 202)


# --- sessions -----------------------------------------------------------------


def session_request(address, token, session, method="POST", message=LIST):
    headers = [("Host", own_host(address)), *bearer(token).items()]
    if session:
        headers.append(("Mcp-Session-Id", session))
    if method == "GET":
        headers = [(n, "text/event-stream" if n == "Accept" else v) for n, v in headers]
        return head_of("GET", "/mcp", headers)
    if method == "DELETE":
        return head_of("DELETE", "/mcp", headers)
    return head_of("POST", "/mcp", headers, json.dumps(message).encode())


def open_session(address, token):
    """An initialized session of `token`: its id."""
    status, headers, body = exchange(address, session_request(address, token, None, message=INITIALIZE))
    assert status == 200, (status, body)
    session = headers["mcp-session-id"]
    request = session_request(address, token, session, message=INITIALIZED)
    assert exchange(address, request)[0] == 202
    return session


def delete(address, token, session):
    return exchange(address, session_request(address, token, session, method="DELETE"))


def test_a_session_is_its_tokens_own(sessions):
    session = open_session(sessions, TOKEN)
    # Another token: 404 for each method, as for an unknown session.
    for method in ("POST", "GET", "DELETE"):
        status, _, body = exchange(sessions, session_request(sessions, TOKEN_B, session, method))
        assert status == 404, (method, status, body)
    status, _, body = exchange(sessions, session_request(sessions, TOKEN, session))
    assert status == 200, body
    assert any(tool["name"] == "echo" for tool in answer(body)["result"]["tools"])
    assert delete(sessions, TOKEN, session)[0] in (200, 202)
    # Ended: 404, a DELETE too; so is a session that never existed.
    assert delete(sessions, TOKEN, session)[0] == 404
    assert exchange(sessions, session_request(sessions, TOKEN, session))[0] == 404
    assert delete(sessions, TOKEN, "no-such-session")[0] == 404


def open_stream(address, token, session):
    """The GET of `session`'s event stream, its head read: the socket,
    still open (the session is in use while it is)."""
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(session_request(address, token, session, method="GET"))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    assert data.split(b"\r\n", 1)[0].split()[1] == b"200", data
    return sock


def served(address, token, session):
    return exchange(address, session_request(address, token, session))[0] == 200


def test_past_the_cap_a_new_session_takes_the_place_of_the_idlest(capped):
    """3 sessions a token: a fourth closes the one idle longest; one whose
    event stream is open is in use and never closed for another; with all
    three in use, an initialize gets 429; another token is not held back;
    a deleted session frees its place."""
    opened = [open_session(capped, TOKEN_C) for _ in range(3)]
    for session in opened:
        assert served(capped, TOKEN_C, session)
    fourth = open_session(capped, TOKEN_C)
    assert not served(capped, TOKEN_C, opened[0])
    assert all(served(capped, TOKEN_C, s) for s in (opened[1], opened[2], fourth))
    # opened[1] is now the idlest, but in use: opened[2] goes instead.
    streams = [open_stream(capped, TOKEN_C, opened[1])]
    fifth = open_session(capped, TOKEN_C)
    assert not served(capped, TOKEN_C, opened[2])
    assert served(capped, TOKEN_C, opened[1]) and served(capped, TOKEN_C, fifth)
    held = [opened[1], fourth, fifth]
    streams += [open_stream(capped, TOKEN_C, s) for s in held[1:]]
    request = session_request(capped, TOKEN_C, None, message=INITIALIZE)
    status, headers, body = exchange(capped, request)
    assert status == 429 and "mcp-session-id" not in headers
    assert b"in progress" in body
    assert all(served(capped, TOKEN_C, s) for s in held)
    other = open_session(capped, TOKEN_B)
    assert delete(capped, TOKEN, held[0])[0] == 404
    assert delete(capped, TOKEN_C, held[0])[0] in (200, 202)
    held[0] = open_session(capped, TOKEN_C)
    for sock in streams:
        sock.close()
    for session in held:
        assert delete(capped, TOKEN_C, session)[0] in (200, 202)
    assert delete(capped, TOKEN_B, other)[0] in (200, 202)


def test_clients_that_exit_without_delete_never_lock_new_ones_out(config_file):
    """200 clients open a session and go away without a DELETE, under the
    default cap of 64 a token: a new client is served at once, the first
    sessions were closed for later ones, and the server's memory stays
    bounded."""
    process, address = start(config_file)
    try:
        first = open_session(address, TOKEN_C)
        before = rss_kib(process.pid)
        for _ in range(200):
            open_session(address, TOKEN_C)
        grown_kib = rss_kib(process.pid) - before
        started = time.monotonic()
        session = open_session(address, TOKEN_C)
        assert served(address, TOKEN_C, session)
        assert time.monotonic() - started < 2
        assert not served(address, TOKEN_C, first)
        assert grown_kib < 64 * 1024, grown_kib
    finally:
        stop(process)


def test_an_unused_session_expires_after_the_idle_time(config_file):
    """--session-idle-ms: a session unused for longer is closed (404)."""
    process, address = start(config_file, "--session-idle-ms", "1000")
    try:
        session = open_session(address, TOKEN_C)
        assert served(address, TOKEN_C, session)
        deadline = time.monotonic() + 10
        while served(address, TOKEN_C, session):
            assert time.monotonic() < deadline, "the session outlived its idle time"
            time.sleep(1.5)
    finally:
        stop(process)


def test_the_sdk_keeps_its_session(sessions):
    """The official SDK, through a session, within the cap."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def run():
        url = f"http://{own_host(sessions)}/mcp"
        headers = {"Authorization": f"Bearer {TOKEN_B}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                result = await client.call_tool("echo", {"text": "via the SDK"})
                return result.content[0].text

    assert anyio.run(run) == "via the SDK"


# --- limits, obeyed and breached ----------------------------------------------


def closed_within(sock, seconds):
    """Whether the server closes `sock` within `seconds`: the time it took,
    or None."""
    began = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - began < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - began
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - began
    return None


def test_a_slow_head_within_the_timeout_is_served(limited):
    request = call_request(limited)
    with socket.create_connection(limited, timeout=10) as sock:
        for piece in (request[:20], request[20:60], request[60:]):
            sock.sendall(piece)
            time.sleep(HEAD_S / 5)
        status, _, body = read_response(sock)
    assert status == 200 and echoed(body) == "still served"


def test_an_unfinished_head_is_cut_off(limited):
    with socket.create_connection(limited, timeout=10) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: " + own_host(limited).encode() + b"\r\n")
        took = closed_within(sock, HEAD_S + 3)
    assert took is not None and HEAD_S - 0.3 <= took <= HEAD_S + 2, took


def test_a_connection_that_sends_nothing_is_cut_off(limited):
    with socket.create_connection(limited, timeout=10) as sock:
        took = closed_within(sock, HEAD_S + 3)
    assert took is not None and took <= HEAD_S + 2, took


def test_a_proven_connection_stays_open_while_idle_then_is_closed(limited):
    with socket.create_connection(limited, timeout=10) as sock:
        sock.sendall(call_request(limited))
        assert read_response(sock)[0] == 200
        # Idle longer than the header timeout, within the idle timeout.
        time.sleep(HEAD_S * 1.5)
        sock.sendall(call_request(limited))
        assert read_response(sock)[0] == 200
        took = closed_within(sock, IDLE_S + 3)
    assert took is not None and IDLE_S - 0.5 <= took <= IDLE_S + 2, took


def test_a_connection_that_only_asked_for_healthz_stays_open_while_idle(limited):
    """nginx may send a POST on a keep-alive connection it used only for
    /healthz: such a connection, which showed no token, keeps the idle
    timeout too."""
    health = head_of("GET", "/healthz", [("Host", own_host(limited))])
    with socket.create_connection(limited, timeout=10) as sock:
        sock.sendall(health)
        assert read_response(sock)[:3:2] == (200, b"ok\n")
        time.sleep(HEAD_S * 1.5)
        sock.sendall(call_request(limited))
        status, _, body = read_response(sock)
    assert status == 200 and echoed(body) == "still served"


TCP_ESTABLISHED = 1


def still_established(sock):
    """Whether the kernel still holds `sock` open both ways (TCP_INFO's
    first byte is the state), read without reading the socket."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return info[0] == TCP_ESTABLISHED


def test_a_client_that_never_reads_its_answers_is_cut_off(limited):
    """Without a token, pipelining requests and never reading the answers
    would hold the connection for ever (the answers wait unwritten, so the
    requests never end): once a write has waited the header timeout, the
    connection is closed with requests still unanswered.

    The client never reads: it keeps sending until the server stops taking
    its requests and then cuts it off. How soon the server's writes stall
    depends on how fast it answers and how much the sockets buffer, so the
    bound is generous (60 s) and the cut is seen from the socket's state,
    not from a fixed sleep."""
    health = head_of("GET", "/healthz", [("Host", own_host(limited))])
    batch = health * 1000
    sent, cut, began = 0, None, time.monotonic()
    with socket.create_connection(limited, timeout=10) as sock:
        sock.settimeout(0.5)
        while time.monotonic() - began < 60 and sent < (64 << 20):
            try:
                sent += sock.send(batch)
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                cut = time.monotonic() - began
                break
            if not still_established(sock):
                cut = time.monotonic() - began
                break
        assert cut is not None, f"the connection was still open after {sent} bytes"
        answered = 0
        sock.settimeout(2)
        try:
            while chunk := sock.recv(1 << 20):
                answered += chunk.count(b"HTTP/1.1 200")
        except (OSError, socket.timeout):
            pass
    assert sent > 0 and answered < sent // len(health), (answered, sent // len(health))
    # The server goes on.
    status, _, body = exchange(limited, call_request(limited))
    assert status == 200 and echoed(body) == "still served"


def test_a_head_over_the_cap_is_refused(limited):
    big = call_request(limited, extra=[("X-Padding", "p" * (20 << 10))])
    with socket.create_connection(limited, timeout=10) as sock:
        try:
            sock.sendall(big)
            status = read_response(sock)[0]
        except (ConnectionError, BrokenPipeError):
            status = None
    assert status in (431, None)
    within = call_request(limited, extra=[("X-Padding", "p" * (8 << 10))])
    status, _, body = exchange(limited, within)
    assert status == 200 and echoed(body) == "still served"


def expect_continue(address):
    body = json.dumps(CALL).encode()
    headers = [("Host", own_host(address)), *bearer(TOKEN).items()]
    headers += [("Content-Length", str(len(body))), ("Expect", "100-continue")]
    return head_of("POST", "/mcp", headers), body


def test_a_body_that_never_comes_after_continue_times_out(limited):
    head, _ = expect_continue(limited)
    with socket.create_connection(limited, timeout=10) as sock:
        sock.sendall(head)
        assert read_response(sock)[0] == 100
        began = time.monotonic()
        status = read_response(sock, BODY_S + 5)[0]
        took = time.monotonic() - began
        closed = closed_within(sock, 2)
    assert status == 408 and BODY_S - 0.3 <= took <= BODY_S + 2, (status, took)
    assert closed is not None


def test_a_body_sent_after_continue_within_the_timeout_is_served(limited):
    head, body = expect_continue(limited)
    with socket.create_connection(limited, timeout=10) as sock:
        sock.sendall(head)
        assert read_response(sock)[0] == 100
        time.sleep(BODY_S / 3)
        sock.sendall(body)
        status, _, answered = read_response(sock)
    assert status == 200 and echoed(answered) == "still served"


def open_connections(address, count):
    return [socket.create_connection(address, timeout=10) for _ in range(count)]


def close_all(sockets):
    for sock in sockets:
        sock.close()
    # The server sees them go.
    time.sleep(0.2)


def test_a_new_connection_beyond_the_unproven_cap_takes_the_oldest_idle_slot(limited):
    """20 connections that showed no token at most: a 21st is served, and
    the oldest idle one is closed for it; a proven one is served
    throughout."""
    proven = socket.create_connection(limited, timeout=10)
    unproven = []
    try:
        proven.sendall(call_request(limited))
        assert read_response(proven)[0] == 200
        unproven = open_connections(limited, 20)
        time.sleep(0.2)
        # A partial head: unproven and not yet a request in progress.
        unproven[1].sendall(b"POST /mcp HTTP/1.1\r\nHost: x")
        with socket.create_connection(limited, timeout=10) as honest:
            honest.sendall(call_request(limited))
            status, _, body = read_response(honest)
            assert status == 200 and echoed(body) == "still served"
        assert closed_within(unproven[0], 1) is not None, "the oldest, idle"
        # The cap full again: the next one closes the next oldest.
        unproven.append(socket.create_connection(limited, timeout=10))
        time.sleep(0.1)
        with socket.create_connection(limited, timeout=10) as next_one:
            next_one.sendall(call_request(limited))
            assert read_response(next_one)[0] == 200
        assert closed_within(unproven[1], 1) is not None, "the next oldest, mid-head"
        proven.sendall(call_request(limited))
        assert read_response(proven)[0] == 200
    finally:
        close_all([proven, *unproven])
    status, _, body = exchange(limited, call_request(limited))
    assert status == 200 and echoed(body) == "still served"


def test_a_thousand_idle_and_trickling_sockets_leave_honest_clients_served(stateless):
    """At the default caps (256 unproven of 1,024), 1,000 sockets without a
    token, half silent and half stuck in a head, reopened as they are
    closed: an honest client's request is answered within 1 s, five times
    in a row, and the server's memory stays bounded."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2000 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    process, address = stateless
    held = []
    try:
        before = rss_kib(process.pid)
        for i in range(1000):
            sock = socket.create_connection(address, timeout=10)
            if i % 2:
                try:
                    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: " + own_host(address).encode())
                except OSError:
                    pass  # already closed to make room for a newer one
            held.append(sock)
        for _ in range(5):
            # The flood reopens a hundred of its sockets, then the client
            # comes.
            for i in range(100):
                held[i].close()
                held[i] = socket.create_connection(address, timeout=10)
            started = time.monotonic()
            with socket.create_connection(address, timeout=10) as honest:
                honest.sendall(call_request(address))
                status, _, body = read_response(honest, deadline_s=5)
            assert status == 200 and echoed(body) == "still served"
            assert time.monotonic() - started < 1.0
        grown = rss_kib(process.pid) - before
        assert grown < 64 * 1024, f"RSS grew by {grown} KiB"
    finally:
        close_all(held)


def test_connections_beyond_the_cap_are_closed(limited):
    """30 connections at most, proven or not: the 31st is closed at once."""
    proven, unproven = [], []
    try:
        # Each shows its token before the next opens.
        for _ in range(25):
            proven.append(socket.create_connection(limited, timeout=10))
            proven[-1].sendall(call_request(limited))
            assert read_response(proven[-1])[0] == 200
        unproven = open_connections(limited, 5)
        with socket.create_connection(limited, timeout=10) as beyond:
            assert closed_within(beyond, 1) is not None, "a 31st connection"
        for sock in proven[:3]:
            sock.sendall(call_request(limited))
            assert read_response(sock)[0] == 200
    finally:
        close_all(proven + unproven)
    status, _, body = exchange(limited, call_request(limited))
    assert status == 200 and echoed(body) == "still served"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("head_kib, held_at_most", [(60, 256), (390, 0)])
def test_a_flood_of_unfinished_heads_is_bounded(stateless, head_kib, held_at_most):
    """500 connections without a token, each sending `head_kib` of a head
    that never ends. Within the 64 KiB cap (60 KiB), at most 256 are held
    (until the header timeout), the rest closed at once; past it (390 KiB,
    the attack's), every one is closed (431). Either way the server grows by
    less than 64 MiB, and a client whose connection showed its token is
    answered throughout."""
    process, address = stateless
    honest = socket.create_connection(address, timeout=10)
    served, stop_honest = [], threading.Event()

    def calls():
        deadline = time.monotonic() + 60
        while not stop_honest.is_set() and time.monotonic() < deadline:
            honest.sendall(call_request(address))
            status, _, body = read_response(honest)
            served.append((status, echoed(body)))
            time.sleep(0.02)

    honest.sendall(call_request(address))
    assert read_response(honest)[0] == 200
    before = rss_kib(process.pid)
    caller = threading.Thread(target=calls)
    caller.start()
    flood, closed = [], 0
    piece = b"POST /mcp HTTP/1.1\r\nHost: " + own_host(address).encode() + b"\r\nX-Pad: "
    piece += b"p" * (head_kib << 10)
    try:
        for _ in range(500):
            sock = socket.create_connection(address, timeout=10)
            flood.append(sock)
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                closed += 1
        time.sleep(1)
        grown = rss_kib(process.pid) - before
        closed = sum(closed_within(sock, 0.02) is not None for sock in flood)
        time.sleep(0.5)
    finally:
        stop_honest.set()
        caller.join(timeout=30)
        for sock in flood:
            sock.close()
        honest.close()
    print(f"flood: {closed} of 500 closed at once, +{grown} KiB, {len(served)} honest calls")
    assert closed >= 500 - held_at_most, closed
    assert grown < 64 * 1024, f"grew by {grown} KiB"
    assert len(served) >= 10 and set(served) == {(200, "still served")}, served[:5]


# --- the flags ----------------------------------------------------------------


def test_the_limits_need_http(config_file):
    import subprocess

    from conftest import BIN

    done = subprocess.run(
        [BIN, *server_args(config_file), "--max-connections", "5"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0 and "apply to --http only" in done.stderr, done


def test_a_zero_limit_is_refused(config_file):
    import subprocess

    from conftest import BIN

    done = subprocess.run(
        [BIN, *server_args(config_file), "--http", "127.0.0.1:0", "--max-connections", "0"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0, done
    assert "max_connections must be greater than 0" in done.stderr, done.stderr
