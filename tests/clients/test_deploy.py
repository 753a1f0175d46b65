"""The deployment files in deploy/, run for real where this machine can: the
systemd unit's command line, the container image's command and HEALTHCHECK,
and the Kubernetes manifest's arguments, probes and Secret mount. Each is
started as a real `toolcage serve` (this machine's paths in place of the
deployed ones, a loopback port in place of the deployed one), probed and
called with the token the deployment hands it, and stopped with the signal
the deployment sends, within the time the deployment allows.

deploy/nginx.conf runs in test_scale.py, in front of three replicas.
"""

import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, TOOLS, TOKEN, launch_http

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "deployed"}},
}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def machine():
    """This machine's stand-ins for the deployed paths: a config, a token
    file, a credentials directory."""
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        (directory / "toolcage.toml").write_text("")
        (directory / "token").write_text(TOKEN + "\n")
        yield directory


def substitute(text, replacements):
    """`text` with every key of `replacements` replaced; each must occur."""
    for old, new in replacements.items():
        assert old in text, f"{old} no longer appears in: {text}"
        text = text.replace(old, str(new))
    return text


def start(argv):
    assert argv[0] == BIN, argv
    # Only the deployed token: none from this environment.
    env = dict(os.environ)
    env.pop("TOOLCAGE_TOKEN", None)
    return launch_http(argv[1:], env)


def request(port, method, path, body=None, headers=()):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body, dict(headers))
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def assert_serves(port, token, host=None):
    """/healthz answers; /mcp refuses a call without the token and answers
    it with the token."""
    assert request(port, "GET", "/healthz") == (200, "ok\n")
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if host:
        headers["Host"] = host
    status, _ = request(port, "POST", "/mcp", json.dumps(CALL), headers)
    assert status == 401, "the deployed server must require the token"
    headers["Authorization"] = f"Bearer {token}"
    status, body = request(port, "POST", "/mcp", json.dumps(CALL), headers)
    assert status == 200, body
    assert json.loads(body)["result"]["content"][0]["text"] == "deployed"


def stop(server, signal_name, within_seconds):
    server.send_signal(getattr(signal, signal_name))
    assert server.wait(timeout=within_seconds) == 0, f"no clean stop on {signal_name}"


def systemd_unit():
    """The [Service] section: key -> list of values."""
    service, section = {}, None
    for line in (DEPLOY / "toolcage@.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section == "[Service]":
            service.setdefault(key, []).append(value)
    return service


def test_the_systemd_unit_runs_serves_and_stops_cleanly(machine):
    unit = systemd_unit()
    # Hardened as documented, and stopped the way serve stops gracefully.
    for key, value in {
        "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "ProtectHome": "yes", "PrivateTmp": "yes", "KillSignal": "SIGTERM",
    }.items():
        assert unit[key] == [value], key
    [credential] = unit["LoadCredential"]
    name, _, source = credential.partition(":")
    assert source == "/etc/toolcage/token"
    # systemd copies the credential into $CREDENTIALS_DIRECTORY/<name>.
    credentials = machine / "credentials"
    credentials.mkdir()
    (credentials / name).write_text((machine / "token").read_text())
    port = free_port()
    [exec_start] = unit["ExecStart"]
    command = substitute(exec_start, {
        "/usr/local/bin/toolcage": BIN,
        "/usr/local/lib/toolcage/tools": TOOLS,
        "/etc/toolcage/toolcage.toml": machine / "toolcage.toml",
        "${CREDENTIALS_DIRECTORY}": credentials,
        "%i": port,
    })
    server, url = start(shlex.split(command))
    try:
        assert url == f"http://127.0.0.1:{port}/mcp"
        assert_serves(port, TOKEN)
    finally:
        [timeout] = unit["TimeoutStopSec"]
        stop(server, unit["KillSignal"][0], int(timeout))


def containerfile():
    """The Containerfile's instructions, continuation lines joined:
    [(INSTRUCTION, arguments)]."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Containerfile").read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def one(instructions, word):
    [value] = [rest for w, rest in instructions if w == word]
    return value


def test_the_container_command_serves_and_its_healthcheck_probes_it(machine):
    instructions = containerfile()
    stages = [rest for word, rest in instructions if word == "FROM"]
    assert len(stages) == 2, "a build stage and a slim runtime stage"
    assert any("wasm32-wasip2" in rest for word, rest in instructions if word == "RUN")
    user = one(instructions, "USER")
    assert user.split(":")[0] not in ("0", "root"), "the image runs as a non-root user"
    entrypoint = json.loads(one(instructions, "ENTRYPOINT"))
    cmd = json.loads(one(instructions, "CMD"))
    argv = [*entrypoint, *cmd]
    address = argv[argv.index("--http") + 1]
    assert address == f"0.0.0.0:{one(instructions, 'EXPOSE')}"
    healthcheck = one(instructions, "HEALTHCHECK")
    check = json.loads(healthcheck[healthcheck.index("CMD [") + 4:])
    assert "/dev/tcp/127.0.0.1/8080" in check[-1] and "/healthz" in check[-1]

    port = free_port()
    replacements = {
        "/usr/local/bin/toolcage": BIN,
        "/opt/toolcage/tools": TOOLS,
        "/run/secrets/toolcage/token": machine / "token",
        "0.0.0.0:8080": f"127.0.0.1:{port}",
    }
    server, _ = start(json.loads(substitute(json.dumps(argv), replacements)))
    probe = [*check[:-1], check[-1].replace("/127.0.0.1/8080", f"/127.0.0.1/{port}")]
    try:
        assert_serves(port, TOKEN)
        assert subprocess.run(probe, timeout=10).returncode == 0, "HEALTHCHECK failed"
    finally:
        stop(server, one(instructions, "STOPSIGNAL"), 60)
    assert subprocess.run(probe, timeout=10, stderr=subprocess.DEVNULL).returncode != 0, (
        "HEALTHCHECK passed with the server stopped"
    )


def test_the_kubernetes_manifest_probes_mounts_and_names_agree(machine):
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()))
    [deployment] = [d for d in documents if d["kind"] == "Deployment"]
    [service] = [d for d in documents if d["kind"] == "Service"]
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    [container] = pod["containers"]
    [port] = container["ports"]
    args = container["args"]
    assert args[args.index("--http") + 1] == f"0.0.0.0:{port['containerPort']}"
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}, probe
    # The grace period covers the preStop pause and the longest call (the
    # default 30 s timeout: the args set none).
    assert "--timeout-ms" not in args
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= pause + 30
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The token file is the Secret's key, where the Secret is mounted,
    # readable by the pod's group.
    token_file = Path(args[args.index("--token-file") + 1])
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(token_file.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["defaultMode"] & 0o040, "the fsGroup must be able to read it"
    assert token_file.name == "token"
    # The names the Service is reached by are allowed.
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    allowed = [args[i + 1] for i, a in enumerate(args) if a == "--allow-host"]
    assert f"{name}.{namespace}.svc" in allowed and name in allowed
    # The image's entrypoint with these args serves, under those names.
    entrypoint = json.loads(one(containerfile(), "ENTRYPOINT"))
    local = free_port()
    argv = json.loads(substitute(json.dumps([*entrypoint, *args]), {
        "/usr/local/bin/toolcage": BIN,
        "/opt/toolcage/tools": TOOLS,
        str(token_file): machine / "token",
        f"0.0.0.0:{port['containerPort']}": f"127.0.0.1:{local}",
    }))
    server, _ = start(argv)
    try:
        service_port = service["spec"]["ports"][0]["port"]
        for host in allowed:
            assert_serves(local, TOKEN, host=f"{host}:{service_port}")
        status, _ = request(local, "POST", "/mcp", json.dumps(CALL), {
            "Host": "elsewhere.example", "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN}",
        })
        assert status == 403
    finally:
        stop(server, "SIGTERM", pod["terminationGracePeriodSeconds"])
