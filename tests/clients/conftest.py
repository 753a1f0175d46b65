"""Starts `toolcage serve` for the MCP client tests, over stdio or Streamable HTTP.

The Rust test `clients::python_client_sdks` runs these with:
- TOOLCAGE_BIN: the toolcage binary;
- TOOLCAGE_TOOLS: a directory holding the `echo` and `misbehave` fixtures;
- TOOLCAGE_FIXTURES: a directory holding `echo.wasm`, `echo_twin.wasm`
  (whose `twin_only` tool has a strict-ready schema) and `composer.wasm` (a
  tool calling tools), for the hot-reload, format and nested-call tests to
  copy;
- TOOLCAGE_DOCKER_REGISTRY: the CNCF distribution registry binary (Debian's
  `docker-registry`, 2.8) that the OCI tests run on loopback;
- TOOLCAGE_HIJACK: a component whose `read_file` clashes with the bundled one;
- TOOLCAGE_REDIS: Debian's `redis-server` (7.0, its libraries unpacked
  beside it) that the shared-state tests run on loopback.
"""

import hashlib
import http.client
import http.server
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import bcrypt
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import cosign

BIN = os.environ["TOOLCAGE_BIN"]
TOOLS = os.environ["TOOLCAGE_TOOLS"]
TOKEN = "test-token-7f3a"

# A raw `initialize` request, for the tests that speak HTTP or JSON-RPC
# without the SDK.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}

# A call of the echo fixture, and the headers of a raw MCP POST, for the
# tests that speak HTTP without the SDK (test_edge.py, test_refusals.py).
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "still served"}},
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}

# Calls to `counter` are denied, calls to `fail` need the user's approval,
# every other call is allowed.
CONFIG = """
[permissions]
default = "allow"
counter = "deny"
fail = "ask"
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="session")
def config_file():
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "toolcage.toml"
        path.write_text(CONFIG)
        yield str(path)


def server_args(config_file):
    return [
        "--no-bundled",
        "--tools", TOOLS,
        "--config", config_file,
        "--fuel", "50000000",
        "--timeout-ms", "5000",
        "serve",
    ]


def start_http(config_file, *flags):
    """Starts `toolcage serve --http` on a free loopback port; returns (process, url)."""
    return launch_http([*server_args(config_file), "--http", "127.0.0.1:0", *flags])


def launch_http(args, env=None, on_line=None):
    """Runs `toolcage ARGS` (a `serve --http`) until it says where it serves;
    returns (process, url). `on_line`, if given, gets every later line of
    its stderr."""
    server = subprocess.Popen([BIN, *args], stderr=subprocess.PIPE, text=True, env=env)

    def drain():
        for line in server.stderr:
            if on_line:
                on_line(line)

    for line in server.stderr:
        match = re.search(r"serving MCP at (http://\S+)", line)
        if match:
            threading.Thread(target=drain, daemon=True).start()
            return server, match.group(1)
    raise AssertionError("toolcage serve --http did not start")


@pytest.fixture(scope="session")
def http_server(config_file):
    """One `toolcage serve --http` for the session, on a free loopback port."""
    env = dict(os.environ, TOOLCAGE_TOKEN=TOKEN)
    process, url = launch_http([*server_args(config_file), "--http", "127.0.0.1:0"], env=env)
    yield url
    process.terminate()
    assert process.wait(timeout=30) == 0, "toolcage serve did not stop cleanly"


@pytest.fixture(params=["stdio", "http"])
def transport(request):
    return request.param


@pytest.fixture(params=["legacy", "2026-07-28"])
def mode(request):
    """The protocol: the initialize handshake of the older revisions, or 2026-07-28."""
    return request.param


@pytest.fixture
def connect(transport, mode, config_file, request):
    """`connect(**client_options)`: an async context manager giving a connected Client."""

    @asynccontextmanager
    async def open_client(**options):
        if transport == "stdio":
            server = StdioServerParameters(command=BIN, args=server_args(config_file))
            async with Client(server, mode=mode, **options) as client:
                yield client
        else:
            url = request.getfixturevalue("http_server")
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with Client(
                    streamable_http_client(url, http_client=http), mode=mode, **options
                ) as client:
                    yield client

    return open_client


# --- OCI registries (test_oci.py) ---------------------------------------------

# A registry starts in well under a second; this bounds a loaded machine.
REGISTRY_START_S = 20

# The path of a manifest request: /v2/<repository>/manifests/<tag or digest>.
MANIFEST_PATH = re.compile(r"^/v2/.+/manifests/[^/]+$")


def free_port():
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PortTaken(Exception):
    """The registry's port was taken before it could listen."""


class OciRegistry:
    """A CNCF distribution registry (2.8) serving plain HTTP on
    127.0.0.1:<free port>: its config, storage and log under `root`. With
    `credentials` = (user, password), it asks for basic auth against an
    htpasswd file (bcrypt), which 2.8 accepts over plain HTTP: its docs ask
    for TLS, its code does not check.

    `host` is "127.0.0.1:PORT"; `storage` the filesystem driver's root;
    `stop()`, `start()` and `restart()` keep the port."""

    def __init__(self, binary, root, credentials=None):
        self.binary = binary
        self.root = Path(root)
        self.storage = self.root / "storage"
        self.credentials = credentials
        self.config = self.root / "config.yml"
        self.log = self.root / "registry.log"
        self.process = None
        self.started_once = False
        self.port = free_port()

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    @property
    def user(self):
        return self.credentials[0] if self.credentials else None

    @property
    def password(self):
        return self.credentials[1] if self.credentials else None

    def api(self, authenticated=True):
        """A raw HTTP client of the registry (cosign.Registry), with the
        credentials unless `authenticated` is false."""
        if authenticated and self.credentials:
            return cosign.Registry(self.host, *self.credentials)
        return cosign.Registry(self.host)

    def _write_config(self):
        # JSON strings are YAML strings: paths and secrets need no escaping.
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {json.dumps(str(self.storage))}",
            "  delete:",
            "    enabled: true",
            "  maintenance:",
            "    uploadpurging:",
            "      enabled: false",
            "http:",
            f"  addr: {json.dumps(self.host)}",
            f"  secret: {json.dumps(secrets.token_hex(16))}",
            # No `debug:` listener at all.
        ]
        if self.credentials:
            user, password = self.credentials
            # Cost 5 (Go accepts 4 and up): a check per request stays cheap.
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text(f"{user}:{hashed}\n")
            lines += [
                "auth:",
                "  htpasswd:",
                "    realm: toolcage-tests",
                f"    path: {json.dumps(str(htpasswd))}",
            ]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self):
        """Starts it and waits until `GET /v2/` answers (200, or 401 behind
        auth). Fails with the registry's log when it does not. Should the
        free port it was given be taken meanwhile, the first start moves to
        another."""
        for _ in range(3):
            try:
                return self._start()
            except PortTaken:
                if self.started_once:
                    raise
                self.port = free_port()
        raise AssertionError("no free port for the registry")

    def _start(self):
        assert self.process is None, "the registry is running"
        logged = self.log.stat().st_size if self.log.exists() else 0
        self._write_config()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "serve", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + REGISTRY_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                connection = http.client.HTTPConnection(self.host, timeout=2)
                connection.request("GET", "/v2/")
                status = connection.getresponse().status
                connection.close()
                if status in (200, 401):
                    self.started_once = True
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        with open(self.log, "rb") as log:
            log.seek(logged)
            if b"address already in use" in log.read():
                raise PortTaken()
        log = self.log.read_text(errors="replace")
        raise AssertionError(f"docker-registry did not answer on {self.host}:\n{log}")

    def stop(self):
        """Stops it (the storage stays)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self):
        self.stop()
        return self.start()

    # Stored content: docker/registry/v2 in the filesystem driver's layout.

    def blob_path(self, digest):
        """The data file of a blob (a manifest is a blob too)."""
        algorithm, hex_digest = digest.split(":", 1)
        return (
            self.storage / "docker/registry/v2/blobs" / algorithm / hex_digest[:2] / hex_digest
            / "data"
        )

    def tag_digest(self, repo, tag):
        """The digest the registry's storage links `repo:tag` to."""
        link = (
            self.storage / "docker/registry/v2/repositories" / repo / "_manifests/tags" / tag
            / "current/link"
        )
        return link.read_text().strip()

    def alias_manifest(self, repo, digest, target):
        """Makes the registry answer a request for the manifest `digest` in
        `repo` with the manifest `target` (its storage links the one
        revision to the other's blob); its Docker-Content-Digest header then
        says `digest`."""
        revision = (
            self.storage / "docker/registry/v2/repositories" / repo / "_manifests/revisions"
            / digest.replace(":", "/", 1)
        )
        revision.mkdir(parents=True, exist_ok=True)
        (revision / "link").write_text(target)

    def tamper_blob(self, digest, offset=None):
        """Flips one bit of a stored blob (in the middle by default), keeping
        its size, so that the registry serves it under its old digest."""
        path = self.blob_path(digest)
        data = bytearray(path.read_bytes())
        at = len(data) // 2 if offset is None else offset
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        assert hashlib.sha256(data).hexdigest() != digest.split(":", 1)[1]
        return path

    def tamper_manifest(self, digest):
        """Changes one character of a stored manifest so that it stays the
        same size and valid JSON (the registry parses what it serves): inside
        an annotation value when it has one, else inside its config's digest.
        Returns what the bytes now hash to."""
        path = self.blob_path(digest)
        data = path.read_bytes()
        manifest = json.loads(data)
        values = list((manifest.get("annotations") or {}).values())
        for descriptor in [manifest.get("config") or {}, *manifest.get("layers", [])]:
            values += list((descriptor.get("annotations") or {}).values())
        values.append(manifest["config"]["digest"].split(":", 1)[1])
        for value in values:
            encoded = json.dumps(value)[1:-1].encode()
            at = data.find(encoded)
            if not encoded or at < 0:
                continue
            for i in range(len(encoded) - 1, -1, -1):
                char = encoded[i : i + 1]
                if char.isalnum():
                    swapped = b"b" if char == b"a" else b"a"
                    tampered = data[: at + i] + swapped + data[at + i + 1 :]
                    json.loads(tampered)
                    path.write_bytes(tampered)
                    return "sha256:" + hashlib.sha256(tampered).hexdigest()
        raise AssertionError(f"found nothing to change in the manifest {data!r}")


def registry_binary():
    binary = os.environ.get("TOOLCAGE_DOCKER_REGISTRY")
    if not binary:
        pytest.fail(
            "TOOLCAGE_DOCKER_REGISTRY is not set: the OCI tests need the CNCF "
            "distribution registry (tests/src/lib.rs `docker_registry` fetches it)"
        )
    return binary


@pytest.fixture
def start_oci_registry(tmp_path_factory):
    """`start_oci_registry(credentials=None)`: a new running OciRegistry,
    behind basic auth when `credentials` = (user, password); every one is
    stopped at teardown."""
    binary = registry_binary()
    started = []

    def start(credentials=None):
        registry = OciRegistry(binary, tmp_path_factory.mktemp("registry"), credentials)
        started.append(registry)
        return registry.start()

    yield start
    for registry in started:
        registry.stop()


@pytest.fixture
def oci_registry(start_oci_registry):
    """A running registry without auth."""
    return start_oci_registry()


# Headers that belong to one hop, not forwarded either way.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "expect", "content-length",
}


class LyingProxy:
    """A loopback HTTP proxy in front of a registry: forwards every request
    (method, path, headers with the client's Host and Authorization, body)
    and every answer, except that while `lying` is true it replaces the
    `Docker-Content-Digest` header of manifest GET and HEAD answers with
    another well-formed digest. `lies` records (path, true digest, lie).
    While `fail_blobs` is above 0, a blob GET is answered 503 instead (and
    counts it down); `failed` records those paths.

    Hostile answers, each of at most HOSTILE_BYTES and HOSTILE_S, sent with
    no Content-Length (the body ends when the connection closes), so only
    reading tells their size: while `huge_manifests` is above 0, a manifest
    GET is answered with `huge_manifest_bytes` of JSON-looking bytes; while
    `endless_tokens` is true, a manifest GET without Authorization is
    answered 401 with a bearer challenge whose realm is this proxy's
    /token, which answers 200 with a body that does not end. `hostile` counts
    the bytes each hostile answer got out before the client hung up."""

    HOSTILE_BYTES = 1 << 30
    HOSTILE_S = 60

    def __init__(self, upstream):
        self.upstream = upstream
        self.lying = True
        self.lies = []
        self.fail_blobs = 0
        self.failed = []
        self.huge_manifests = 0
        self.huge_manifest_bytes = 64 << 20
        self.endless_tokens = False
        self.hostile = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def read_body(self):
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    body = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return body
                        body += self.rfile.read(size)
                        self.rfile.readline()
                length = self.headers.get("Content-Length")
                return self.rfile.read(int(length)) if length is not None else None

            def stream(self, total, status=200, headers=()):
                """Answers with `total` bytes (at most HOSTILE_BYTES, for at
                most HOSTILE_S) and no Content-Length, then closes."""
                self.close_connection = True
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b"{" + b" " * ((64 << 10) - 1)
                sent, deadline = 0, time.monotonic() + LyingProxy.HOSTILE_S
                try:
                    while sent < min(total, LyingProxy.HOSTILE_BYTES) and time.monotonic() < deadline:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except OSError:
                    pass
                proxy.hostile.append((self.path, sent))

            def forward(self):
                body = self.read_body()
                path = self.path.split("?", 1)[0]
                if proxy.endless_tokens and self.command == "GET" and path == "/token":
                    self.stream(LyingProxy.HOSTILE_BYTES)
                    return
                manifest = self.command == "GET" and MANIFEST_PATH.match(path)
                if proxy.endless_tokens and manifest and not self.headers.get("Authorization"):
                    challenge = f'Bearer realm="http://{proxy.host}/token",service="proxy"'
                    message = b'{"errors":[{"code":"UNAUTHORIZED","message":"token needed"}]}'
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", challenge)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                if proxy.huge_manifests > 0 and manifest:
                    proxy.huge_manifests -= 1
                    content_type = [("Content-Type", "application/vnd.oci.image.manifest.v1+json")]
                    self.stream(proxy.huge_manifest_bytes, headers=content_type)
                    return
                if proxy.fail_blobs > 0 and self.command == "GET" and "/blobs/" in self.path:
                    proxy.fail_blobs -= 1
                    proxy.failed.append(self.path)
                    message = b'{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                try:
                    connection = http.client.HTTPConnection(proxy.upstream, timeout=60)
                    connection.putrequest(
                        self.command, self.path, skip_host=True, skip_accept_encoding=True
                    )
                    for name, value in self.headers.items():
                        if name.lower() not in HOP_BY_HOP:
                            connection.putheader(name, value)
                    if body is not None:
                        connection.putheader("Content-Length", str(len(body)))
                    connection.endheaders(body)
                    response = connection.getresponse()
                    data = response.read()
                    headers = response.getheaders()
                    connection.close()
                except OSError as error:
                    message = f"upstream {proxy.upstream}: {error}".encode()
                    self.send_response(502)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                self.send_response_only(response.status, response.reason)
                lie = (
                    proxy.lying
                    and self.command in ("GET", "HEAD")
                    and MANIFEST_PATH.match(self.path.split("?", 1)[0])
                )
                length = None
                for name, value in headers:
                    lowered = name.lower()
                    if lowered == "content-length":
                        length = value
                        continue
                    if lowered in HOP_BY_HOP:
                        continue
                    if lie and lowered == "docker-content-digest":
                        told = "sha256:" + hashlib.sha256(f"lie:{value}".encode()).hexdigest()
                        proxy.lies.append((self.path, value, told))
                        value = told
                    self.send_header(name, value)
                if self.command == "HEAD":
                    if length is not None:
                        self.send_header("Content-Length", length)
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lying_proxy():
    """`lying_proxy(registry)`: a LyingProxy in front of `registry` (an
    OciRegistry or a "host:port"), stopped at teardown."""
    proxies = []

    def start(registry):
        proxy = LyingProxy(getattr(registry, "host", registry))
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()


# --- Telemetry (test_telemetry.py) --------------------------------------------

import urllib.parse
import urllib.request

import otlp


@pytest.fixture
def otlp_receiver():
    """`otlp_receiver(mode="ok")`: a new running otlp.Receiver (modes `ok`,
    `refuse`, `hang`); every one is stopped at teardown."""
    started = []

    def start(mode="ok"):
        receiver = otlp.Receiver(mode)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


# Prometheus starts in a second or two; this bounds a loaded machine.
PROMETHEUS_START_S = 30


def prometheus_binary():
    binary = os.environ.get("TOOLCAGE_PROMETHEUS")
    if not binary:
        pytest.fail(
            "TOOLCAGE_PROMETHEUS is not set: the telemetry tests need Prometheus "
            "(tests/src/lib.rs `prometheus` fetches it)"
        )
    # It runs in a directory of its own.
    return os.path.abspath(binary)


class Prometheus:
    """A Prometheus server (Debian's, 2.42) on 127.0.0.1:<free port>,
    scraping `target` ("127.0.0.1:PORT", path /metrics) every second as job
    `toolcage`, with `Authorization: Bearer <token>` read from a
    credentials file when `token` is given. Its config, storage and log are
    under `root`."""

    def __init__(self, binary, root, target, token=None):
        self.binary = binary
        self.root = Path(root)
        self.target = target
        self.token = token
        self.config = self.root / "prometheus.yml"
        self.log = self.root / "prometheus.log"
        self.process = None
        self.port = free_port()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self):
        # JSON strings are YAML strings: paths need no escaping.
        lines = [
            "global:",
            "  scrape_interval: 1s",
            "  scrape_timeout: 1s",
            "  evaluation_interval: 1s",
            "scrape_configs:",
            "  - job_name: toolcage",
            "    metrics_path: /metrics",
            "    static_configs:",
            f"      - targets: [{json.dumps(self.target)}]",
        ]
        if self.token is not None:
            credentials = self.root / "token"
            credentials.write_text(self.token)
            lines += [
                "    authorization:",
                "      type: Bearer",
                f"      credentials_file: {json.dumps(str(credentials))}",
            ]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self):
        """Starts it and waits until it is ready; should the free port it
        was given be taken meanwhile, moves to another."""
        self._write_config()
        for _ in range(3):
            if self._start():
                return self
            self.port = free_port()
        raise AssertionError("no free port for Prometheus")

    def _start(self):
        """Starts it; true once ready, false when its port was taken."""
        logged = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--storage.tsdb.path={self.root / 'data'}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + PROMETHEUS_START_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as ready:
                    if ready.status == 200:
                        return True
            except OSError:
                pass  # not listening yet, or 503 (an HTTPError) while it starts
            time.sleep(0.1)
        self.stop()
        with open(self.log, "rb") as log:
            log.seek(logged)
            if b"address already in use" in log.read():
                return False
        log = self.log.read_text(errors="replace")
        raise AssertionError(f"Prometheus did not get ready on {self.url}:\n{log}")

    def stop(self):
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def api(self, path, **params):
        """GETs /api/v1/PATH?PARAMS; returns its `data`."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        """An instant query: its series, as [(labels, value)]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [(series["metric"], float(series["value"][1])) for series in data["result"]]

    def scrape_state(self):
        """The target's health and last scrape error, for failure messages."""
        targets = self.api("targets")["activeTargets"]
        return [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]

    def wait_for_query(self, expr, predicate=bool, timeout=20):
        """Polls `expr` until `predicate(series)` holds; returns the series."""
        deadline = time.monotonic() + timeout
        while True:
            series = self.query(expr)
            if predicate(series):
                return series
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{expr} gave {series} after {timeout} s; targets: {self.scrape_state()}"
                )
            time.sleep(0.25)


@pytest.fixture
def prometheus(tmp_path_factory):
    """`prometheus(target, token=None)`: a new running Prometheus scraping
    `target` ("127.0.0.1:PORT") every second; every one is stopped at
    teardown."""
    binary = prometheus_binary()
    started = []

    def start(target, token=None):
        server = Prometheus(binary, tmp_path_factory.mktemp("prometheus"), target, token)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


# --- Redis (Debian's redis-server, fetched by tests/src/lib.rs) --------------


def redis_binary():
    """Debian's redis-server (TOOLCAGE_REDIS, redis-cli and its libraries
    beside it), and an environment that finds those libraries."""
    found = os.environ.get("TOOLCAGE_REDIS")
    assert found, "TOOLCAGE_REDIS is not set: tests/src/lib.rs fetches Debian's redis-server"
    binary = Path(found)
    env = dict(os.environ)
    libraries = binary.parent.parent / "lib" / "x86_64-linux-gnu"
    if libraries.is_dir():
        env["LD_LIBRARY_PATH"] = str(libraries)
    return binary, env


def start_redis(port, password, argv=None):
    """Debian's redis-server on 127.0.0.1:`port` with `password`, empty,
    answering once this returns; `argv`, when given, is a deployment's own
    command line for it, which must do the same."""
    binary, env = redis_binary()
    if argv is None:
        argv = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--requirepass", password]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert process.poll() is None, f"redis-server exited: {argv}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                if probe.recv(64).startswith(b"+OK"):
                    return process
        except OSError:
            time.sleep(0.02)
    process.kill()
    raise AssertionError("redis-server did not answer")


def redis_keys(port, password, pattern):
    """The keys matching `pattern` in the Redis on `port` (RESP, by hand)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(f"AUTH {password}\r\nKEYS {pattern}\r\n".encode())
        time.sleep(0.2)
        reply = connection.recv(65536).decode()
    return re.findall(r"^(toolcage:[^\r\n]+)\r?$", reply, re.MULTILINE)
