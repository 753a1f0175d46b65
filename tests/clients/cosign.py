"""cosign's keyed signatures, written independently of toolcage with
`cryptography` and raw registry HTTP, to check toolcage against.

The layout, from cosign's specs/SIGNATURE_SPEC.md and its source
(pkg/oci/remote/remote.go `normalize`, pkg/oci/static/signature.go,
pkg/oci/empty/empty.go) and sigstore's pkg/signature/payload/payload.go:
- the signed payload is the simple-signing JSON, compact and in the field
  order of Go's `encoding/json` over sigstore's `SimpleContainerImage`:
  `{"critical":{"identity":{"docker-reference":REPO},"image":
  {"docker-manifest-digest":DIGEST},"type":"cosign container image
  signature"},"optional":null}`, REPO being `registry/repository` with no tag
  or digest;
- the signature is ECDSA P-256 over SHA-256 of the payload, ASN.1 DER,
  base64 (standard alphabet, padded);
- it is stored in the image's own repository under the tag
  `sha256-<hex>.sig`: an OCI image manifest whose config has media type
  `application/vnd.oci.image.config.v1+json` and whose layer is the payload
  blob, media type `application/vnd.dev.cosign.simplesigning.v1+json`,
  annotated `dev.cosignproject.cosign/signature` = the base64 signature.
  Several signatures of one digest are several layers of that manifest.
"""

import base64
import hashlib
import http.client
import json
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

SIGNATURE_TYPE = "cosign container image signature"
SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"

TIMEOUT_S = 30


def digest_of(data):
    """`sha256:<hex>` of `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def signature_tag(manifest_digest):
    """The tag cosign keeps `manifest_digest`'s signatures under."""
    algorithm, hex_digest = manifest_digest.split(":", 1)
    return f"{algorithm}-{hex_digest}.sig"


def payload(docker_reference, manifest_digest):
    """The simple-signing payload cosign signs for `manifest_digest`, as bytes."""
    document = {
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": SIGNATURE_TYPE,
        },
        "optional": None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


# --- Keys -------------------------------------------------------------------


def generate_key():
    """A new P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def public_pem(key):
    """The public half as PEM SubjectPublicKeyInfo (what `cosign.pub` holds)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        key = key.public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def private_pem(key, sec1=False):
    """The private key as unencrypted PEM: PKCS#8, or SEC1 (`EC PRIVATE KEY`)."""
    private_format = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if sec1
        else serialization.PrivateFormat.PKCS8
    )
    return key.private_bytes(
        serialization.Encoding.PEM, private_format, serialization.NoEncryption()
    )


def write_keypair(directory, name="cosign", sec1=False):
    """Writes a new key pair as NAME.key (private) and NAME.pub in `directory`;
    returns (private key, private key path, public key path)."""
    key = generate_key()
    directory = Path(directory)
    private_path = directory / f"{name}.key"
    public_path = directory / f"{name}.pub"
    private_path.write_bytes(private_pem(key, sec1=sec1))
    private_path.chmod(0o600)
    public_path.write_bytes(public_pem(key))
    return key, private_path, public_path


def load_public_key(key):
    """A public key from a key object (private or public), PEM bytes or a PEM
    file's path."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key
    if isinstance(key, (str, Path)):
        key = Path(key).read_bytes()
    return serialization.load_pem_public_key(key)


def sign(private_key, data):
    """cosign's signature of `data`: base64 of the DER ECDSA-SHA256 signature."""
    der = private_key.sign(data, ec.ECDSA(hashes.SHA256()))
    return base64.b64encode(der).decode()


def verify(public_key, data, signature_b64):
    """Whether `signature_b64` is a valid signature of `data` by `public_key`."""
    try:
        der = base64.b64decode(signature_b64, validate=True)
        load_public_key(public_key).verify(der, data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


# --- cosign's encrypted key files ------------------------------------------
#
# `cosign generate-key-pair` seals the PKCS#8 DER of the key with
# go-securesystemslib's `encrypted` package: scrypt derives a 32-byte key
# from the password and a 32-byte salt, NaCl secretbox (XSalsa20-Poly1305,
# its tag first) seals the DER under a 24-byte nonce, and the PEM
# (`ENCRYPTED SIGSTORE PRIVATE KEY`, cosign 1.x: `ENCRYPTED COSIGN PRIVATE
# KEY`) holds the JSON {"kdf": {"name": "scrypt", "params": {"N", "r", "p"},
# "salt"}, "cipher": {"name": "nacl/secretbox", "nonce"}, "ciphertext"},
# every byte string standard base64. Written here with `cryptography`'s
# scrypt and PyNaCl's secretbox, independently of toolcage.

SIGSTORE_KEY_LABEL = "ENCRYPTED SIGSTORE PRIVATE KEY"
COSIGN_KEY_LABEL = "ENCRYPTED COSIGN PRIVATE KEY"


def _scrypt_key(password, salt, n, r, p):
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(password)


def encrypted_pem(key, password, label=SIGSTORE_KEY_LABEL, n=32768, r=8, p=1, kdf="scrypt"):
    """`key` sealed as cosign seals it, with `password` (bytes)."""
    import os

    import nacl.secret

    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    salt = os.urandom(32)
    nonce = os.urandom(24)
    box = nacl.secret.SecretBox(_scrypt_key(password, salt, n, r, p))
    ciphertext = box.encrypt(der, nonce).ciphertext
    envelope = {
        "kdf": {
            "name": kdf,
            "params": {"N": n, "r": r, "p": p},
            "salt": base64.b64encode(salt).decode(),
        },
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(ciphertext).decode(),
    }
    body = base64.b64encode(json.dumps(envelope).encode()).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return ("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]) + "\n").encode()


def decrypt_pem(pem, password):
    """The private key in cosign's encrypted PEM `pem`, opened with
    `password` (bytes)."""
    import nacl.secret

    text = pem.decode() if isinstance(pem, bytes) else pem
    lines = text.strip().splitlines()
    assert lines[0] in (f"-----BEGIN {SIGSTORE_KEY_LABEL}-----", f"-----BEGIN {COSIGN_KEY_LABEL}-----"), lines[0]
    envelope = json.loads(base64.b64decode("".join(lines[1:-1])))
    assert envelope["kdf"]["name"] == "scrypt" and envelope["cipher"]["name"] == "nacl/secretbox"
    params = envelope["kdf"]["params"]
    key = _scrypt_key(
        password, base64.b64decode(envelope["kdf"]["salt"]), params["N"], params["r"], params["p"]
    )
    der = nacl.secret.SecretBox(key).decrypt(
        base64.b64decode(envelope["ciphertext"]), base64.b64decode(envelope["cipher"]["nonce"])
    )
    return serialization.load_der_private_key(der, password=None), envelope


# --- Registry HTTP ----------------------------------------------------------


class RegistryError(Exception):
    """The registry answered with an unexpected status."""

    def __init__(self, method, path, status, body):
        super().__init__(f"{method} {path}: {status} {body[:300]!r}")
        self.status = status


class Registry:
    """The distribution API of the plain-HTTP registry at `host`
    ("127.0.0.1:PORT"), with basic auth when `user` is given."""

    def __init__(self, host, user=None, password=None):
        self.host = host
        self.headers = {}
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    def request(self, method, path, body=None, headers=None, expect=(200,)):
        """One request; returns (status, headers as a lower-cased dict, body)."""
        connection = http.client.HTTPConnection(self.host, timeout=TIMEOUT_S)
        try:
            connection.request(method, path, body=body, headers={**self.headers, **(headers or {})})
            response = connection.getresponse()
            data = response.read()
            answered = {name.lower(): value for name, value in response.getheaders()}
        finally:
            connection.close()
        if response.status not in expect:
            raise RegistryError(method, path, response.status, data)
        return response.status, answered, data

    def has_blob(self, repo, digest):
        status, _, _ = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", expect=(200, 404))
        return status == 200

    def put_blob(self, repo, data):
        """Uploads `data` (POST then PUT) unless present; returns its digest."""
        digest = digest_of(data)
        if self.has_blob(repo, digest):
            return digest
        _, headers, _ = self.request(
            "POST", f"/v2/{repo}/blobs/uploads/", body=b"", expect=(202,)
        )
        location = urljoin(f"http://{self.host}/v2/{repo}/blobs/uploads/", headers["location"])
        parts = urlsplit(location)
        path = parts.path + "?" + (parts.query + "&" if parts.query else "") + f"digest={digest}"
        self.request(
            "PUT",
            path,
            body=data,
            headers={"Content-Type": "application/octet-stream"},
            expect=(201,),
        )
        return digest

    def get_blob(self, repo, digest):
        return self.request("GET", f"/v2/{repo}/blobs/{digest}")[2]

    def put_manifest(self, repo, reference, data, media_type=OCI_MANIFEST):
        """Puts a manifest under a tag or digest; returns its digest."""
        _, headers, _ = self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            body=data,
            headers={"Content-Type": media_type},
            expect=(201,),
        )
        digest = digest_of(data)
        assert headers.get("docker-content-digest", digest) == digest, headers
        return digest

    def get_manifest(self, repo, reference):
        """(bytes, headers) of a manifest, or (None, None) when there is none."""
        status, headers, data = self.request(
            "GET",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"},
            expect=(200, 404),
        )
        if status == 404:
            return None, None
        return data, headers

    def resolve(self, repo, tag):
        """The digest of the manifest `tag` names, hashed here."""
        data, _ = self.get_manifest(repo, tag)
        assert data is not None, f"no manifest {repo}:{tag}"
        return digest_of(data)


# --- Signatures in the registry ----------------------------------------------


def signature_manifest(payload_bytes, signature_b64, config_digest, config_size, layers=()):
    """The signature image's manifest: the earlier `layers` and one more."""
    layer = {
        "mediaType": SIMPLESIGNING,
        "size": len(payload_bytes),
        "digest": digest_of(payload_bytes),
        "annotations": {SIGNATURE_ANNOTATION: signature_b64},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": config_size, "digest": config_digest},
        "layers": [*layers, layer],
    }
    return json.dumps(manifest, separators=(",", ":")).encode()


def signature_config(layers):
    """An image config over the payload layers, shaped as go-containerregistry
    writes cosign's."""
    config = {
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"} for _ in layers],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
        "config": {},
    }
    return json.dumps(config, separators=(",", ":")).encode()


def push_signature(
    host, repo, manifest_digest, payload_bytes, signature_b64,
    user=None, password=None, append=False,
):
    """Pushes a signature as cosign lays it out, tagged `sha256-<hex>.sig` in
    `repo` beside `manifest_digest` (which the payload need not name: the
    tests push mismatched ones on purpose). With `append`, keeps the
    signatures already there, as cosign does; else replaces them. Returns
    the signature manifest's digest."""
    registry = Registry(host, user, password)
    tag = signature_tag(manifest_digest)
    layers = []
    if append:
        existing, _ = registry.get_manifest(repo, tag)
        if existing is not None:
            layers = json.loads(existing)["layers"]
    registry.put_blob(repo, payload_bytes)
    new_layer = {"digest": digest_of(payload_bytes)}
    config = signature_config([*layers, new_layer])
    config_digest = registry.put_blob(repo, config)
    manifest = signature_manifest(payload_bytes, signature_b64, config_digest, len(config), layers)
    return registry.put_manifest(repo, tag, manifest)


def sign_and_push(host, repo, manifest_digest, private_key, user=None, password=None):
    """Signs `manifest_digest` as cosign does and pushes the signature."""
    data = payload(f"{host}/{repo}", manifest_digest)
    return push_signature(
        host, repo, manifest_digest, data, sign(private_key, data), user, password
    )


def fetch_and_verify(host, repo, manifest_digest, public_key, user=None, password=None):
    """Whether a signature of `manifest_digest` by `public_key`, in cosign's
    layout, is in the registry: the `.sig` manifest's simple-signing layer
    whose payload hashes to its descriptor, is a cosign payload naming
    `manifest_digest`, and whose signature annotation verifies."""
    registry = Registry(host, user, password)
    data, _ = registry.get_manifest(repo, signature_tag(manifest_digest))
    if data is None:
        return False
    manifest = json.loads(data)
    if manifest.get("config", {}).get("mediaType") not in (OCI_CONFIG, None):
        return False
    for layer in manifest.get("layers", []):
        if layer.get("mediaType") != SIMPLESIGNING:
            continue
        signature_b64 = layer.get("annotations", {}).get(SIGNATURE_ANNOTATION)
        if not signature_b64:
            continue
        body = registry.get_blob(repo, layer["digest"])
        if digest_of(body) != layer["digest"] or len(body) != layer["size"]:
            continue
        try:
            critical = json.loads(body)["critical"]
        except (ValueError, KeyError, TypeError):
            continue
        if critical.get("type") != SIGNATURE_TYPE:
            continue
        if critical.get("image", {}).get("docker-manifest-digest") != manifest_digest:
            continue
        if verify(public_key, body, signature_b64):
            return True
    return False
