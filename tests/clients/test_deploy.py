"""The deployment files in deploy/, run for real where this machine can: the
systemd unit's command line, the container image's command and HEALTHCHECK,
the Kubernetes manifest's arguments, probes, Secret and ConfigMap mounts
and its Redis, and the Compose file's replicas, Redis and nginx site. Each is
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

from conftest import BIN, TOOLS, TOKEN, launch_http, redis_binary, redis_keys, start_redis

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

    def named(kind, name):
        [found] = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
        return found

    deployment, service = named("Deployment", "toolcage"), named("Service", "toolcage")
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
    # The config is the ConfigMap's, where it is mounted; the files it names
    # are the Secrets' keys, where they are mounted; its Redis is the
    # Service of the Redis Deployment, whose password is the same Secret's.
    config_file = Path(args[args.index("--config") + 1])
    config_map = named("ConfigMap", "toolcage-config")
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(config_file.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "toolcage-config"
    config = config_map["data"][config_file.name]
    secrets_of = {}
    for path in re.findall(r'(?:file|key_file) = "([^"]+)"', config):
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(Path(path).parent)]
        [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["defaultMode"] & 0o040, path
        secrets_of[path] = (volume["secret"]["secretName"], Path(path).name)
    assert sorted(secrets_of.values()) == [("toolcage-redis", "password"), ("toolcage-state", "key")]
    redis_deployment, redis_service = named("Deployment", "toolcage-redis"), named("Service", "toolcage-redis")
    [redis_container] = redis_deployment["spec"]["template"]["spec"]["containers"]
    [password_env] = redis_container["env"]
    assert password_env["valueFrom"]["secretKeyRef"] == {"name": "toolcage-redis", "key": "password"}
    assert f"$({password_env['name']})" in redis_container["args"]
    redis_port = redis_service["spec"]["ports"][0]["port"]
    redis_url = f"redis://{redis_service['metadata']['name']}.{namespace}.svc:{redis_port}/0"
    assert f'url = "{redis_url}"' in config
    # Run for real: this machine's files and a real Redis in their places.
    password, key = "k8s-redis-password-91f3", "ab" * 32
    (machine / "password").write_text(password + "\n")
    (machine / "key").write_text(key + "\n")
    redis_local = free_port()
    # The Redis Deployment's own args (the image's entrypoint runs
    # redis-server with them), with the password where Kubernetes puts the
    # variable, on a loopback port.
    variable = f"$({password_env['name']})"
    redis = start_redis(redis_local, password, [
        str(redis_binary()[0]),
        *(password if arg == variable else arg for arg in redis_container["args"]),
        "--port", str(redis_local), "--bind", "127.0.0.1",
    ])
    (machine / "toolcage.toml").write_text(substitute(config, {
        "/run/secrets/toolcage-redis/password": machine / "password",
        "/run/secrets/toolcage-state/key": machine / "key",
        redis_url: f"redis://127.0.0.1:{redis_local}/0",
    }))
    # The image's entrypoint with these args serves, under those names.
    entrypoint = json.loads(one(containerfile(), "ENTRYPOINT"))
    local = free_port()
    argv = json.loads(substitute(json.dumps([*entrypoint, *args]), {
        "/usr/local/bin/toolcage": BIN,
        "/opt/toolcage/tools": TOOLS,
        str(token_file): machine / "token",
        str(config_file): machine / "toolcage.toml",
        f"0.0.0.0:{port['containerPort']}": f"127.0.0.1:{local}",
    }))
    try:
        server, _ = start(argv)
    except BaseException:
        redis.kill()
        raise
    try:
        service_port = service["spec"]["ports"][0]["port"]
        for host in allowed:
            assert_serves(local, TOKEN, host=f"{host}:{service_port}")
        status, _ = request(local, "POST", "/mcp", json.dumps(CALL), {
            "Host": "elsewhere.example", "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN}",
        })
        assert status == 403
        # Its state is in that Redis: a session's run left keys there.
        session = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": "run_code", "arguments": {"code": "x = 1\nx", "session": "s"}}}
        status, body = request(local, "POST", "/mcp", json.dumps(session), {
            "Host": f"{name}:{service_port}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18", "Authorization": f"Bearer {TOKEN}",
        })
        assert status == 200 and json.loads(body)["result"]["structuredContent"]["session"]["saved"], body
        assert redis_keys(redis_local, password, "toolcage:session:*"), "no session in Redis"
    finally:
        try:
            stop(server, "SIGTERM", pod["terminationGracePeriodSeconds"])
        finally:
            redis.kill()
            redis.wait()


def test_the_compose_file_runs_its_replicas_against_its_redis_behind_its_nginx(machine):
    """deploy/compose.yaml, as far as a machine without a container runtime
    can run it: its three replicas share one command line, which (the
    image's entrypoint before it, this machine's files in place of the
    secrets and the config, a real Debian redis-server in place of the
    Redis service) serves and keeps its state in that Redis; the Redis
    service's own entrypoint (run as the redis-server it starts) reads its
    password from the secret the config names, and its healthcheck passes
    while it runs and fails once it has stopped; and the nginx site
    balances over the three, as Debian's nginx checks it."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    replicas = [name for name in services if name.startswith("toolcage-")]
    assert len(replicas) == 3
    [command] = {json.dumps(services[name]["command"]) for name in replicas}
    args = json.loads(command)
    replica = services[replicas[0]]
    assert set(replica["secrets"]) == {"token", "redis_password", "state_key"}
    [config_entry] = replica["configs"]
    config_file = compose["configs"][config_entry["source"]]["file"]
    assert args[args.index("--config") + 1] == config_entry["target"]
    config = (DEPLOY / config_file).read_text()
    assert 'file = "/run/secrets/redis_password"' in config
    assert 'key_file = "/run/secrets/state_key"' in config
    assert 'url = "redis://redis:6379/0"' in config
    assert "/run/secrets/redis_password" in " ".join(services["redis"]["entrypoint"])
    assert services["redis"]["secrets"] == ["redis_password"]
    assert services["redis"]["user"].split(":")[0] not in ("0", "root")
    assert replica["depends_on"] == {"redis": {"condition": "service_healthy"}}
    # The site names the three replicas, and nginx accepts it.
    [site_entry] = services["nginx"]["configs"]
    site = (DEPLOY / compose["configs"][site_entry["source"]]["file"]).read_text()
    assert re.findall(r"server (toolcage-\d):8080", site) == replicas
    ports = {name: free_port() for name in replicas}
    local_site = substitute(site, {f"{name}:8080": f"127.0.0.1:{port}" for name, port in ports.items()})
    local_site = substitute(local_site, {"listen 8080;": f"listen 127.0.0.1:{free_port()};"})
    checked = nginx_checks(local_site)
    assert checked.returncode == 0, checked.stderr
    # One replica's command, run for real against a real Redis.
    password, key = "compose-redis-password-2a7c", "cd" * 32
    (machine / "password").write_text(password + "\n")
    (machine / "key").write_text(key + "\n")
    redis_port = free_port()
    # The Redis service's own entrypoint and healthcheck (Compose reads `$$`
    # as `$`), with this machine's password file and a loopback port.
    binary, _ = redis_binary()
    [shell, flag, script] = services["redis"]["entrypoint"]
    redis = start_redis(redis_port, password, [shell, flag, substitute(script.replace("$$", "$"), {
        "/run/secrets/redis_password": machine / "password",
        "exec redis-server": f"exec {binary} --port {redis_port} --bind 127.0.0.1",
    })])
    kind, check = services["redis"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    check = ["sh", "-c", substitute(check.replace("$$", "$"), {
        "/run/secrets/redis_password": machine / "password",
        "redis-cli": f"{binary.with_name('redis-cli')} -p {redis_port}",
    })]
    (machine / "toolcage.toml").write_text(substitute(config, {
        "/run/secrets/redis_password": machine / "password",
        "/run/secrets/state_key": machine / "key",
        "redis://redis:6379/0": f"redis://127.0.0.1:{redis_port}/0",
    }))
    entrypoint = json.loads(one(containerfile(), "ENTRYPOINT"))
    local = ports[replicas[0]]
    argv = json.loads(substitute(json.dumps([*entrypoint, *args]), {
        "/usr/local/bin/toolcage": BIN,
        "/opt/toolcage/tools": TOOLS,
        "/run/secrets/token": machine / "token",
        config_entry["target"]: machine / "toolcage.toml",
        "0.0.0.0:8080": f"127.0.0.1:{local}",
    }))
    try:
        healthy = subprocess.run(check, env=redis_binary()[1], stderr=subprocess.DEVNULL, timeout=10)
        assert healthy.returncode == 0, "the Redis healthcheck failed"
        server, _ = start(argv)
        try:
            assert_serves(local, TOKEN)
            session = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
                "name": "run_code", "arguments": {"code": "x = 1\nx", "session": "s"}}}
            status, body = request(local, "POST", "/mcp", json.dumps(session), {
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-06-18", "Authorization": f"Bearer {TOKEN}",
            })
            assert status == 200, body
            assert redis_keys(redis_port, password, "toolcage:session:*"), "no session in Redis"
        finally:
            stop(server, replica["stop_signal"], 60)
    finally:
        redis.kill()
        redis.wait()
    unhealthy = subprocess.run(check, env=redis_binary()[1], stderr=subprocess.DEVNULL, timeout=10)
    assert unhealthy.returncode != 0, "the Redis healthcheck passed with Redis stopped"


def nginx_checks(site):
    """`nginx -t` of `site` (an http-context file) in a directory of its own."""
    nginx = os.environ.get("TOOLCAGE_NGINX")
    assert nginx, "TOOLCAGE_NGINX is not set: tests/src/lib.rs fetches Debian's nginx"
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        (directory / "site.conf").write_text(site)
        (directory / "nginx.conf").write_text(
            f"pid {directory}/nginx.pid;\nerror_log {directory}/error.log;\n"
            "events {}\n"
            f"http {{\n    client_body_temp_path {directory}/body;\n"
            f"    proxy_temp_path {directory}/proxy;\n    fastcgi_temp_path {directory}/fastcgi;\n"
            f"    uwsgi_temp_path {directory}/uwsgi;\n    scgi_temp_path {directory}/scgi;\n"
            f"    access_log off;\n    include {directory}/site.conf;\n}}\n"
        )
        command = [nginx, "-e", str(directory / "error.log"), "-p", str(directory),
                   "-c", str(directory / "nginx.conf"), "-t"]
        return subprocess.run(command, capture_output=True, text=True, timeout=30)
