"""Tools from an OCI registry, end to end: the `toolcage` CLI (`push`,
`pull`, `sign`, then `list`, `call` and `serve` from the lock) against a
real CNCF distribution registry (2.8) on loopback, with cosign's keyed
signatures made and checked independently by cosign.py.

Each test has a project directory of its own (its `toolcage.toml` and
`toolcage.lock`), and its own XDG_CACHE_HOME (so its own content store,
`$XDG_CACHE_HOME/toolcage/oci`), DOCKER_CONFIG and HOME. Components:
`echo.wasm` (tools echo, counter, fail, bad_details), `echo_twin.wasm`
(echo answering "hijacked", twin_only) and TOOLCAGE_HIJACK (`read_file`,
which the bundled fs component already offers). A component pulled from
oci://HOST/tools/NAME:TAG is named NAME.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

import cosign
from conftest import BIN

FIXTURES = Path(os.environ["TOOLCAGE_FIXTURES"])
ECHO = FIXTURES / "echo.wasm"
TWIN = FIXTURES / "echo_twin.wasm"

# One CLI run: a pull or a first compile on a loaded CI machine stays well
# under this.
RUN_S = 120
# A pulled update is served within this (the watcher aims at 2 s).
RELOADED_WITHIN_S = 10

ECHO_TOOLS = ["bad_details", "counter", "echo", "fail"]
TWIN_TOOLS = ["echo", "twin_only"]
PUSHED = re.compile(r"^oci://(?P<host>[^/]+)/(?P<repo>.+)@(?P<digest>sha256:[0-9a-f]{64})$")


def sha256_file(path):
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def ref(host, repo="tools/echo", tag="1"):
    return f"oci://{host}/{repo}:{tag}"


def pinned(host, repo, digest):
    return f"oci://{host}/{repo}@{digest}"


class Project:
    """A project directory with a toolcage.toml, whose commands run with a
    cache, a Docker config and a HOME of their own, and without the bundled
    tools unless `bundled`."""

    def __init__(self, root, bundled=False):
        root = Path(root)
        self.dir = root / "project"
        self.cache = root / "cache"
        self.docker = root / "docker"
        self.home = root / "home"
        for directory in (self.dir, self.cache, self.docker, self.home):
            directory.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "toolcage.toml"
        self.lock_file = self.dir / "toolcage.lock"
        self.store = self.cache / "toolcage/oci"
        self.bundled = bundled
        self.env = dict(
            os.environ,
            XDG_CACHE_HOME=str(self.cache),
            DOCKER_CONFIG=str(self.docker),
            HOME=str(self.home),
        )
        self.env.pop("RUST_LOG", None)

    def write_config(self, tools=(), insecure=(), require_digest=None, keys=()):
        """toolcage.toml: `tools`, `[oci] insecure_registries`, `[trust]`,
        and a `[[trust.keys]]` per (prefix, key path relative to the
        project, require_signature or None) of `keys`."""
        lines = [
            f"tools = {json.dumps(list(tools))}",
            "",
            "[oci]",
            f"insecure_registries = {json.dumps(list(insecure))}",
        ]
        if require_digest is not None or keys:
            lines += ["", "[trust]"]
            if require_digest is not None:
                lines.append(f"require_digest = {json.dumps(require_digest)}")
        for prefix, key, require_signature in keys:
            lines += ["", "[[trust.keys]]", f"prefix = {json.dumps(prefix)}"]
            lines.append(f"key = {json.dumps(key)}")
            if require_signature is not None:
                lines.append(f"require_signature = {json.dumps(require_signature)}")
        self.config.write_text("\n".join(lines) + "\n")

    def run(self, *args, input=None, timeout=RUN_S):
        """`toolcage [--no-bundled] --config toolcage.toml ARGS` in the
        project directory."""
        command = [BIN]
        if not self.bundled:
            command.append("--no-bundled")
        if self.config.exists():
            command += ["--config", str(self.config)]
        return subprocess.run(
            [*command, *args],
            cwd=self.dir,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args, **options):
        result = self.run(*args, **options)
        assert result.returncode == 0, describe(args, result)
        return result

    def fails(self, *args, **options):
        result = self.run(*args, **options)
        assert result.returncode != 0, describe(args, result)
        return result

    def push(self, file, reference, *flags, **options):
        """`toolcage push FILE REF`: the pushed reference with its digest,
        its last line of stdout, as a match of PUSHED."""
        result = self.ok(*flags, "push", str(file), reference, **options)
        lines = result.stdout.strip().splitlines()
        assert lines, describe(("push",), result)
        pushed = PUSHED.match(lines[-1].strip())
        assert pushed, describe(("push",), result)
        return pushed

    def lock(self):
        """The lock's text, or None without one."""
        return self.lock_file.read_text() if self.lock_file.exists() else None

    def entries(self):
        """The lock's `[[component]]` tables by reference."""
        text = self.lock()
        if text is None:
            return {}
        return {entry["reference"]: entry for entry in tomllib.loads(text).get("component", [])}

    def tools(self):
        """`list --json`: {tool name: component name}."""
        listed = self.ok("list", "--json")
        return {tool["name"]: tool["component"] for tool in json.loads(listed.stdout)}

    def assert_not_loaded(self, component):
        """`list` refuses a configured reference the lock lacks, and loads
        nothing of it."""
        listed = self.run("list", "--json")
        assert listed.returncode != 0, describe(("list",), listed)
        assert "toolcage pull" in listed.stderr, describe(("list",), listed)
        assert f'"component": "{component}"' not in listed.stdout


def describe(args, result):
    return (
        f"toolcage {' '.join(map(str, args))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )


def assert_says(result, *words):
    """Each of `words` is in stderr, ignoring case."""
    said = result.stderr.lower()
    for word in words:
        assert word.lower() in said, f"stderr lacks {word!r}:\n{result.stderr}"


def manifest_of(registry, repo, digest):
    data, _ = registry.api().get_manifest(repo, digest)
    assert data is not None and cosign.digest_of(data) == digest
    return json.loads(data)


def wasm_layer(registry, repo, digest):
    """The digest of the one layer of a pushed component's manifest."""
    layers = manifest_of(registry, repo, digest)["layers"]
    assert len(layers) == 1, layers
    return layers[0]["digest"]


# --- Push, pull, and running from the lock ----------------------------------


def test_push_then_pull_by_tag_and_by_digest_then_run_offline_from_the_lock(
    oci_registry, tmp_path
):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])

    echo_tag = ref(host, "tools/echo", "1")
    pushed = project.push(ECHO, echo_tag)
    assert pushed["host"] == host and pushed["repo"] == "tools/echo"
    echo_digest = pushed["digest"]
    assert oci_registry.tag_digest("tools/echo", "1") == echo_digest
    assert wasm_layer(oci_registry, "tools/echo", echo_digest) == sha256_file(ECHO)
    # The CNCF Wasm layout, annotated with what it offers.
    manifest = manifest_of(oci_registry, "tools/echo", echo_digest)
    assert manifest["config"]["mediaType"] == "application/vnd.wasm.config.v0+json"
    assert manifest["layers"][0]["mediaType"] == "application/wasm"
    annotations = manifest["annotations"]
    assert annotations["dev.toolcage.tools"].split(",") == ["echo", "counter", "fail", "bad_details"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", annotations["dev.toolcage.wit"]), annotations
    assert annotations["org.opencontainers.image.title"] == "echo"
    assert annotations["org.opencontainers.image.version"] == "1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", annotations["org.opencontainers.image.created"])

    twin_digest = project.push(TWIN, ref(host, "tools/twin", "1"))["digest"]
    twin_pin = pinned(host, "tools/twin", twin_digest)

    project.write_config(tools=[echo_tag, twin_pin], insecure=[host])
    project.ok("pull")
    entries = project.entries()
    assert set(entries) == {echo_tag, twin_pin}, project.lock()
    assert entries[echo_tag]["digest"] == echo_digest
    assert entries[echo_tag]["component"] == sha256_file(ECHO)
    assert entries[twin_pin]["digest"] == twin_digest
    assert entries[twin_pin]["component"] == sha256_file(TWIN)
    for entry in entries.values():
        assert entry["pulled"], entry
    assert project.store.is_dir() and any(project.store.rglob("*")), "nothing stored"

    # The registry is gone: the lock and the store are enough.
    oci_registry.stop()
    tools = project.tools()
    assert {name: tools[name] for name in ECHO_TOOLS} == dict.fromkeys(ECHO_TOOLS, "echo")
    assert tools["twin_only"] == "twin"
    assert tools["echo"] == "echo"
    called = project.ok("call", "echo", json.dumps({"text": "offline", "repeat": 2}))
    assert called.stdout.strip() == "offlineoffline"
    assert project.ok("call", "twin_only", "{}").stdout.strip() == "twin"
    # `--tools` takes references too.
    project.write_config(insecure=[host])
    listed = project.ok("--tools", twin_pin, "list", "--json")
    assert {tool["name"] for tool in json.loads(listed.stdout)} == set(TWIN_TOOLS)

    # A reference the lock lacks is refused, pointing at `toolcage pull`.
    project.write_config(tools=[echo_tag, ref(host, "tools/echo", "2")], insecure=[host])
    project.assert_not_loaded("nothing")


def test_pull_locked_refuses_to_change_the_lock(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    echo_tag = ref(host)
    echo_digest = project.push(ECHO, echo_tag)["digest"]
    project.write_config(tools=[echo_tag], insecure=[host])
    project.ok("pull")
    assert project.entries()[echo_tag]["digest"] == echo_digest

    # Unchanged: --locked succeeds.
    project.ok("pull", "--locked")
    assert project.entries()[echo_tag]["digest"] == echo_digest

    # The tag moves in the registry: the locked digest still stands.
    twin_digest = project.push(TWIN, echo_tag)["digest"]
    assert twin_digest != echo_digest
    project.ok("pull", "--locked")
    assert project.entries()[echo_tag]["digest"] == echo_digest
    project.ok("pull")
    assert project.entries()[echo_tag]["digest"] == echo_digest

    # A reference the lock lacks would add an entry: refused, lock untouched.
    before = project.lock()
    twin_tag = ref(host, "tools/twin", "1")
    project.push(TWIN, twin_tag)
    project.write_config(tools=[echo_tag, twin_tag], insecure=[host])
    refused = project.fails("pull", "--locked")
    assert refused.stderr.strip(), describe(("pull", "--locked"), refused)
    assert project.lock() == before

    # --update would move the tag's pin: refused under --locked too.
    project.write_config(tools=[echo_tag], insecure=[host])
    refused = project.fails("pull", "--locked", "--update")
    assert project.lock() == before

    # Without --locked, both happen.
    project.write_config(tools=[echo_tag, twin_tag], insecure=[host])
    project.ok("pull", "--update")
    entries = project.entries()
    assert entries[echo_tag]["digest"] == twin_digest
    assert twin_tag in entries


def test_one_refused_reference_leaves_the_lock_unchanged(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    good = ref(host, "tools/echo", "1")
    bad = ref(host, "tools/twin", "1")
    project.push(ECHO, good)
    twin_digest = project.push(TWIN, bad)["digest"]
    oci_registry.tamper_blob(wasm_layer(oci_registry, "tools/twin", twin_digest))

    project.write_config(tools=[good, bad], insecure=[host])
    refused = project.fails("pull")
    assert refused.returncode == 1, describe(("pull",), refused)
    assert project.lock() is None, "a failed pull wrote a lock"

    project.write_config(tools=[good], insecure=[host])
    project.ok("pull")
    before = project.lock()
    project.write_config(tools=[good, bad], insecure=[host])
    project.fails("pull")
    assert project.lock() == before


def test_a_plain_http_registry_needs_an_insecure_registries_entry(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    echo_tag = ref(host)
    project.push(ECHO, echo_tag)

    project.write_config(tools=[echo_tag])
    project.fails("pull")
    assert project.lock() is None
    project.fails("push", str(ECHO), ref(host, "tools/echo", "2"))
    assert oci_registry.api().get_manifest("tools/echo", "2") == (None, None)


# --- Refusals ----------------------------------------------------------------


def assert_refused(project, reference, component, *words):
    """`pull` refuses `reference`, saying `words`; the lock has no entry
    for it and `list` does not load it."""
    refused = project.fails("pull")
    assert_says(refused, *words)
    assert reference not in project.entries(), project.lock()
    project.assert_not_loaded(component)
    return refused


def test_a_tampered_layer_is_refused(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    oci_registry.tamper_blob(wasm_layer(oci_registry, "tools/echo", digest))

    project.write_config(tools=[echo_tag], insecure=[host])
    assert_refused(project, echo_tag, "echo", "layer", "digest")


def test_a_tampered_manifest_pulled_by_its_digest_is_refused(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    digest = project.push(ECHO, ref(host))["digest"]
    oci_registry.tamper_manifest(digest)

    reference = pinned(host, "tools/echo", digest)
    project.write_config(tools=[reference], insecure=[host])
    assert_refused(project, reference, "echo", "pinned")


def test_a_digest_pin_the_registry_answers_with_another_manifest_is_refused(
    oci_registry, tmp_path
):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    digest = project.push(ECHO, ref(host))["digest"]
    # A well-formed digest that is not the manifest's, which the registry
    # (through its storage) answers with the manifest, under that digest.
    wrong = cosign.digest_of(b"not this manifest")
    oci_registry.alias_manifest("tools/echo", wrong, digest)
    data, headers = oci_registry.api().get_manifest("tools/echo", wrong)
    assert cosign.digest_of(data) == digest and headers["docker-content-digest"] == wrong

    reference = pinned(host, "tools/echo", wrong)
    project.write_config(tools=[reference], insecure=[host])
    assert_refused(project, reference, "echo", "pinned")


def signed_project(tmp_path, registry, key_name="team", require_signature=None):
    """A project trusting `team.pub` (written here) for oci://HOST/tools/;
    returns (project, the private key)."""
    project = Project(tmp_path)
    key, _, _ = cosign.write_keypair(project.dir, key_name)
    keys = [(f"oci://{registry.host}/tools/", f"{key_name}.pub", require_signature)]
    project.write_config(insecure=[registry.host], keys=keys)
    return project, key


def configure_tools(project, registry, tools):
    """Keeps the project's trust keys, with `tools`."""
    text = project.config.read_text()
    project.config.write_text(
        re.sub(r"^tools = .*$", f"tools = {json.dumps(tools)}", text, count=1, flags=re.M)
    )


def test_a_signature_by_another_key_is_refused(oci_registry, tmp_path):
    host = oci_registry.host
    project, _ = signed_project(tmp_path, oci_registry)
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    cosign.sign_and_push(host, "tools/echo", digest, cosign.generate_key())

    configure_tools(project, oci_registry, [echo_tag])
    assert_refused(project, echo_tag, "echo", "does not verify")


def test_a_signature_of_another_digest_is_refused(oci_registry, tmp_path):
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry)
    first = project.push(ECHO, ref(host, "tools/echo", "1"))["digest"]
    second_tag = ref(host, "tools/echo", "2")
    second = project.push(TWIN, second_tag)["digest"]
    # The first's payload, validly signed, under the second's signature tag.
    payload = cosign.payload(f"{host}/tools/echo", first)
    cosign.push_signature(host, "tools/echo", second, payload, cosign.sign(key, payload))

    configure_tools(project, oci_registry, [second_tag])
    assert_refused(project, second_tag, "echo", "another digest")


def test_a_signature_for_another_repository_is_refused(oci_registry, tmp_path):
    """A digest signed for tools/grep must not run as tools/echo (whose name
    and grants it would take), even under the same trusted prefix."""
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry)
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    payload = cosign.payload(f"{host}/tools/grep", digest)
    cosign.push_signature(host, "tools/echo", digest, payload, cosign.sign(key, payload))

    configure_tools(project, oci_registry, [echo_tag])
    assert_refused(project, echo_tag, "echo", "another repository")


def test_no_signature_is_refused_when_a_key_requires_one(oci_registry, tmp_path):
    host = oci_registry.host
    project, _ = signed_project(tmp_path, oci_registry, require_signature=True)
    echo_tag = ref(host)
    project.push(ECHO, echo_tag)

    configure_tools(project, oci_registry, [echo_tag])
    assert_refused(project, echo_tag, "echo", "no signature")


def test_a_truncated_signature_is_refused(oci_registry, tmp_path):
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry)
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    payload = cosign.payload(f"{host}/tools/echo", digest)
    der = base64.b64decode(cosign.sign(key, payload))
    truncated = base64.b64encode(der[: len(der) - 7]).decode()
    cosign.push_signature(host, "tools/echo", digest, payload, truncated)

    configure_tools(project, oci_registry, [echo_tag])
    assert_refused(project, echo_tag, "echo", "malformed")


def test_a_registry_misreporting_docker_content_digest_is_refused(
    oci_registry, lying_proxy, tmp_path
):
    proxy = lying_proxy(oci_registry)
    project = Project(tmp_path)
    project.write_config(insecure=[oci_registry.host, proxy.host])
    project.push(ECHO, ref(oci_registry.host))

    through_proxy = ref(proxy.host)
    project.write_config(tools=[through_proxy], insecure=[oci_registry.host, proxy.host])
    assert_refused(project, through_proxy, "echo", "Docker-Content-Digest")
    assert proxy.lies, "toolcage asked the proxy for no manifest"


# --- cosign compatibility ---------------------------------------------------


def test_a_signature_made_by_cosign_py_verifies_in_pull(oci_registry, tmp_path):
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry, require_signature=True)
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    cosign.sign_and_push(host, "tools/echo", digest, key)
    assert cosign.fetch_and_verify(host, "tools/echo", digest, project.dir / "team.pub")

    configure_tools(project, oci_registry, [echo_tag])
    project.ok("pull")
    entry = project.entries()[echo_tag]
    assert entry["digest"] == digest
    assert entry.get("signature"), project.lock()
    # Checked again offline, against the key the config names now.
    oci_registry.stop()
    assert project.tools()["echo"] == "echo"


@pytest.mark.parametrize("key_format", ["pkcs8", "sec1"])
def test_toolcage_sign_pushes_what_cosign_verifies(oci_registry, tmp_path, key_format):
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry, require_signature=True)
    key_file = project.dir / f"signing.{key_format}.pem"
    key_file.write_bytes(cosign.private_pem(key, sec1=key_format == "sec1"))
    key_file.chmod(0o600)
    echo_tag = ref(host)
    digest = project.push(ECHO, echo_tag)["digest"]
    assert not cosign.fetch_and_verify(host, "tools/echo", digest, key)

    # A tag can move between push and sign: only a digest is signed.
    refused = project.fails("sign", echo_tag, "--key", str(key_file))
    assert_says(refused, "digest")
    # Another signer (cosign's format) signed first: its signature stays.
    other = cosign.generate_key()
    cosign.sign_and_push(host, "tools/echo", digest, other)
    project.ok("sign", pinned(host, "tools/echo", digest), "--key", str(key_file))
    assert cosign.fetch_and_verify(host, "tools/echo", digest, key)
    assert cosign.fetch_and_verify(host, "tools/echo", digest, other)
    assert not cosign.fetch_and_verify(host, "tools/echo", digest, cosign.generate_key())
    signature = manifest_of(
        oci_registry,
        "tools/echo",
        oci_registry.api().resolve("tools/echo", cosign.signature_tag(digest)),
    )
    assert signature["config"]["mediaType"] == cosign.OCI_CONFIG
    layer = signature["layers"][-1]
    assert layer["mediaType"] == cosign.SIMPLESIGNING
    payload = json.loads(oci_registry.api().get_blob("tools/echo", layer["digest"]))
    assert payload["critical"] == {
        "identity": {"docker-reference": f"{host}/tools/echo"},
        "image": {"docker-manifest-digest": digest},
        "type": cosign.SIGNATURE_TYPE,
    }

    # And toolcage accepts its own signature.
    configure_tools(project, oci_registry, [echo_tag])
    project.ok("pull")
    assert project.entries()[echo_tag].get("signature"), project.lock()


# --- cosign's encrypted key files ----------------------------------------------


@pytest.mark.parametrize("label", [cosign.SIGSTORE_KEY_LABEL, cosign.COSIGN_KEY_LABEL])
def test_sign_reads_cosigns_encrypted_key(oci_registry, tmp_path, label):
    """A key sealed by cosign.py as cosign seals it (scrypt, secretbox)
    signs with COSIGN_PASSWORD, and cosign.py verifies the signature; a
    wrong password, a truncated file and another KDF are each refused with
    the file named, and nothing is pushed."""
    host = oci_registry.host
    project, key = signed_project(tmp_path, oci_registry, require_signature=True)
    key_file = project.dir / "cosign.key"
    password = b"correct horse battery staple"
    key_file.write_bytes(cosign.encrypted_pem(key, password, label=label))
    digest = project.push(ECHO, ref(host))["digest"]
    target = pinned(host, "tools/echo", digest)

    for content, words in [
        (cosign.encrypted_pem(key, b"wrong password", label=label), ["password is wrong"]),
        (key_file.read_bytes()[:300], ["truncated"]),
        (cosign.encrypted_pem(key, password, label=label, kdf="argon2"), ["argon2", "scrypt"]),
    ]:
        bad = project.dir / "bad.key"
        bad.write_bytes(content)
        project.env["COSIGN_PASSWORD"] = password.decode()
        refused = project.fails("sign", target, "--key", str(bad), input="")
        assert_says(refused, str(bad), *words)
        assert "panic" not in refused.stderr
    assert not cosign.fetch_and_verify(host, "tools/echo", digest, key)

    # Without a password, and no terminal to ask on: refused, saying how.
    project.env.pop("COSIGN_PASSWORD")
    refused = project.fails("sign", target, "--key", str(key_file), input="")
    assert_says(refused, str(key_file), "COSIGN_PASSWORD", "--key-password-stdin")

    project.env["COSIGN_PASSWORD"] = password.decode()
    project.ok("sign", target, "--key", str(key_file))
    assert cosign.fetch_and_verify(host, "tools/echo", digest, key)
    # From stdin as well, when COSIGN_PASSWORD is not set.
    project.env.pop("COSIGN_PASSWORD")
    project.ok(
        "sign", target, "--key", str(key_file), "--key-password-stdin", input=password.decode() + "\n"
    )
    configure_tools(project, oci_registry, [ref(host)])
    project.ok("pull")
    assert project.entries()[ref(host)].get("signature"), project.lock()


def test_generate_key_pair_writes_what_cosign_reads(oci_registry, tmp_path):
    """`toolcage generate-key-pair` writes NAME.key in cosign's format, with
    cosign's scrypt parameters (cosign.py decrypts it) and NAME.pub; it
    refuses to overwrite them; the key signs, and the signature verifies
    with NAME.pub in cosign.py and in pull."""
    host = oci_registry.host
    project = Project(tmp_path)
    project.env["COSIGN_PASSWORD"] = "s3cret"
    project.ok("generate-key-pair", "--output-key-prefix", "team")
    private_path, public_path = project.dir / "team.key", project.dir / "team.pub"
    assert private_path.stat().st_mode & 0o077 == 0
    pem = private_path.read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"), pem
    key, envelope = cosign.decrypt_pem(pem, b"s3cret")
    assert envelope["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert len(base64.b64decode(envelope["kdf"]["salt"])) == 32
    assert cosign.public_pem(key) == public_path.read_bytes()
    # cosign.py signs with it, and the signature verifies with team.pub.
    assert cosign.verify(public_path, b"data", cosign.sign(key, b"data"))

    before = (pem, public_path.read_bytes())
    refused = project.fails("generate-key-pair", "--output-key-prefix", "team")
    assert_says(refused, "team.key", "overwrite")
    assert (private_path.read_bytes(), public_path.read_bytes()) == before

    keys = [(f"oci://{host}/tools/", "team.pub", True)]
    project.write_config(insecure=[host], keys=keys)
    digest = project.push(ECHO, ref(host))["digest"]
    project.ok("sign", pinned(host, "tools/echo", digest), "--key", "team.key")
    assert cosign.fetch_and_verify(host, "tools/echo", digest, public_path)
    configure_tools(project, oci_registry, [ref(host)])
    project.ok("pull")
    assert project.entries()[ref(host)].get("signature"), project.lock()


# --- Registry credentials ------------------------------------------------------


def test_basic_auth_from_docker_config_or_the_command_line(start_oci_registry, tmp_path):
    user, password = "alice", "pa55-w0rd"
    registry = start_oci_registry((user, password))
    host = registry.host
    project = Project(tmp_path / "a")
    project.write_config(insecure=[host])
    echo_tag = ref(host)

    # No credentials: refused by the registry, and said so.
    refused = project.fails("push", str(ECHO), echo_tag)
    assert re.search(r"401|unauthori[sz]ed", refused.stderr, re.I), refused.stderr
    assert registry.api().get_manifest("tools/echo", "1") == (None, None)

    # --registry-user with the password on stdin.
    digest = project.push(
        ECHO, echo_tag, "--registry-user", user, "--registry-password-stdin",
        input=password + "\n",
    )["digest"]
    assert registry.api().resolve("tools/echo", "1") == digest

    project.write_config(tools=[echo_tag], insecure=[host])
    refused = project.fails("pull")
    assert re.search(r"401|unauthori[sz]ed", refused.stderr, re.I), refused.stderr
    assert project.lock() is None

    # $DOCKER_CONFIG/config.json, as `docker login` writes it.
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (project.docker / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    project.ok("pull")
    assert project.entries()[echo_tag]["digest"] == digest
    second = project.push(TWIN, ref(host, "tools/twin", "1"))["digest"]
    assert registry.api().resolve("tools/twin", "1") == second
    registry.stop()
    assert project.tools()["echo"] == "echo"
    registry.start()

    # A wrong password is refused as none is.
    other = Project(tmp_path / "b")
    other.write_config(tools=[echo_tag], insecure=[host])
    refused = other.fails(
        "--registry-user", user, "--registry-password-stdin", "pull", input="wrong\n"
    )
    assert re.search(r"401|unauthori[sz]ed", refused.stderr, re.I), refused.stderr
    other.ok("--registry-user", user, "--registry-password-stdin", "pull", input=password + "\n")
    assert other.entries()[echo_tag]["digest"] == digest


# --- Names and reload ---------------------------------------------------------


def test_a_pulled_tool_named_like_a_bundled_one_is_shadowed(oci_registry, tmp_path):
    hijack = os.environ.get("TOOLCAGE_HIJACK")
    assert hijack, "TOOLCAGE_HIJACK (a component offering `read_file`) is not set"
    host = oci_registry.host
    project = Project(tmp_path, bundled=True)
    project.write_config(insecure=[host])
    hijack_tag = ref(host, "tools/hijack", "1")
    project.push(hijack, hijack_tag)
    project.write_config(tools=[hijack_tag], insecure=[host])
    project.ok("pull")

    listed = project.ok("list", "--json")
    tools = json.loads(listed.stdout)
    owners = {tool["name"]: (tool["component"], tool["source"]) for tool in tools}
    assert owners["read_file"] == ("fs", "bundled")
    assert all(tool["component"] != "hijack" for tool in tools)
    assert "read_file" in listed.stderr and "first wins" in listed.stderr, listed.stderr


@pytest.mark.anyio
async def test_serve_watch_serves_a_pulled_update(oci_registry, tmp_path):
    host = oci_registry.host
    project = Project(tmp_path)
    project.write_config(insecure=[host])
    echo_tag = ref(host)
    project.push(ECHO, echo_tag)
    project.write_config(tools=[echo_tag], insecure=[host])
    project.ok("pull")

    server = StdioServerParameters(
        command=BIN,
        args=["--no-bundled", "--config", str(project.config), "serve", "--watch"],
        env=project.env,
        cwd=project.dir,
    )
    with anyio.fail_after(RUN_S):
        async with Client(server, mode="legacy") as client:

            async def names():
                return sorted(tool.name for tool in (await client.list_tools()).tools)

            assert await names() == ECHO_TOOLS
            result = await client.call_tool("echo", {"text": "before"})
            assert result.content[0].text == "before"

            # Another component under the same tag, pulled with --update.
            new_digest = project.push(TWIN, echo_tag)["digest"]
            await anyio.to_thread.run_sync(
                lambda: project.ok("pull", "--update", echo_tag)
            )
            assert project.entries()[echo_tag]["digest"] == new_digest

            with anyio.fail_after(RELOADED_WITHIN_S):
                while await names() != TWIN_TOOLS:
                    await anyio.sleep(0.2)
            result = await client.call_tool("echo", {"text": "after"})
            assert result.content[0].text == "hijacked"


# --- Retries and progress ----------------------------------------------------


def with_custom_section(wasm, name, size):
    """`wasm` with a custom section of `size` zero bytes appended: the same
    component, larger."""

    def leb128(n):
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    content = leb128(len(name)) + name.encode() + bytes(size)
    return wasm + b"\x00" + leb128(len(content)) + content


def test_a_failing_registry_is_tried_three_times_and_large_pulls_report_progress(
    oci_registry, lying_proxy, tmp_path
):
    project = Project(tmp_path)
    proxy = lying_proxy(oci_registry)
    proxy.lying = False
    big = tmp_path / "big.wasm"
    big.write_bytes(with_custom_section(ECHO.read_bytes(), "padding", 6 << 20))
    reference = ref(proxy.host, "tools/big")
    project.write_config([reference], insecure=[proxy.host])
    project.push(big, reference)

    # Two 503s, then the blob: pulled, with a progress line per quarter.
    proxy.fail_blobs = 2
    pulled = project.ok("pull")
    assert len(proxy.failed) == 2, proxy.failed
    progress = [line for line in pulled.stderr.splitlines() if "pulling" in line]
    assert len(progress) == 4 and progress[-1].endswith("6.2 of 6.2 MiB"), pulled.stderr
    assert project.tools()["echo"] == "big"

    # A registry that keeps failing: three attempts, then the 503 is said.
    shutil.rmtree(project.store)
    project.lock_file.unlink()
    proxy.fail_blobs = 100
    proxy.failed.clear()
    failed = project.fails("pull")
    assert len(proxy.failed) == 3, proxy.failed
    assert_says(failed, "503")
    assert project.lock() is None


# --- Ceilings on what a registry sends -------------------------------------------


def pull_watched(project, *args, timeout=RUN_S):
    """`toolcage pull ARGS`, its peak resident memory (VmHWM, KiB) read from
    /proc while it runs: (completed process, peak KiB)."""
    command = [BIN, "--no-bundled", "--config", str(project.config), "pull", *args]
    process = subprocess.Popen(
        command,
        cwd=project.dir,
        env=project.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak, deadline = 0, time.monotonic() + timeout
    status = Path(f"/proc/{process.pid}/status")
    while process.poll() is None and time.monotonic() < deadline:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    if process.poll() is None:
        process.kill()
    stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), peak


def store_files(project):
    return sorted(p.relative_to(project.store) for p in project.store.rglob("*"))


def hostile_answers(proxy, within=10.0):
    """The hostile answers `proxy` recorded. Each is recorded once its writes
    fail, which may be a moment after the client hung up and exited."""
    deadline = time.monotonic() + within
    while not proxy.hostile and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(proxy.hostile)


def test_a_hostile_registry_cannot_make_pull_use_unbounded_memory(
    oci_registry, lying_proxy, tmp_path
):
    """A manifest answered with 64 MiB, and a token answer that does not end:
    each pull fails within seconds naming what was too large, its peak
    memory stays within 64 MiB of a normal pull's, and the lock and the
    store stay as they were."""
    project = Project(tmp_path)
    proxy = lying_proxy(oci_registry)
    proxy.lying = False
    reference = ref(proxy.host)
    project.write_config([reference], insecure=[proxy.host])
    project.push(ECHO, reference)
    pulled, baseline = pull_watched(project)
    assert pulled.returncode == 0, describe(("pull",), pulled)
    assert baseline > 0
    lock, stored = project.lock(), store_files(project)

    proxy.huge_manifests = 1
    started = time.monotonic()
    failed, peak = pull_watched(project, "--update")
    assert failed.returncode == 1, describe(("pull", "--update"), failed)
    assert_says(failed, "manifest is larger than the 4194304 bytes")
    assert time.monotonic() - started < 20
    assert peak < baseline + (64 << 10), (peak, baseline)
    assert (project.lock(), store_files(project)) == (lock, stored)
    # It stopped reading: the proxy got out far less than it had to send.
    [(_, sent)] = hostile_answers(proxy)
    assert sent < 32 << 20, proxy.hostile

    proxy.endless_tokens = True
    proxy.hostile.clear()
    started = time.monotonic()
    failed, peak = pull_watched(project, "--update")
    assert failed.returncode == 1, describe(("pull", "--update"), failed)
    assert_says(failed, "token answer is larger than the 65536 bytes")
    assert time.monotonic() - started < 20
    assert peak < baseline + (64 << 10), (peak, baseline)
    assert (project.lock(), store_files(project)) == (lock, stored)
    answers = hostile_answers(proxy)
    assert answers and all(sent < 32 << 20 for _, sent in answers), answers
