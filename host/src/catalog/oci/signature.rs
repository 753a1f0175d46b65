//! cosign's keyed signatures: ECDSA P-256 with SHA-256 over the
//! simple-signing payload, kept as an OCI image whose layers are the
//! payloads (media type `application/vnd.dev.cosign.simplesigning.v1+json`),
//! each signature in its layer's `dev.cosignproject.cosign/signature`
//! annotation (base64 of the DER signature), tagged `sha256-<hex>.sig` in
//! the signed image's repository. This is what `cosign sign --key` writes
//! and `cosign verify --key` reads.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _};

use super::layout::{BlobDescriptor, MANIFEST_MEDIA_TYPE, Manifest};
use super::{Digest, OciError, Reference};

/// The PEM label cosign 2.x writes.
pub const SIGSTORE_KEY_LABEL: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
/// The PEM label cosign 1.x wrote.
pub const COSIGN_KEY_LABEL: &str = "ENCRYPTED COSIGN PRIVATE KEY";

/// Whether `pem` is one of cosign's encrypted keys.
pub fn is_encrypted(pem: &str) -> bool {
    [SIGSTORE_KEY_LABEL, COSIGN_KEY_LABEL]
        .iter()
        .any(|label| pem.contains(&format!("-----BEGIN {label}-----")))
}

/// The media type of a simple-signing payload layer.
pub(crate) const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the signature.
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The config media type of a signature image.
const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// A public key that signatures are checked with: a PEM
/// `SubjectPublicKeyInfo` of an ECDSA P-256 key, as `cosign.pub` is.
#[derive(Clone)]
pub struct PublicKey {
    key: p256::ecdsa::VerifyingKey,
    /// SHA-256 of the key's DER, to tell keys apart in messages.
    id: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.id)
    }
}

impl PublicKey {
    /// Parses a PEM public key.
    pub fn from_pem(pem: &str) -> Result<PublicKey, PemError> {
        let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim())
            .map_err(|e| PemError::NotPublicKey(KeyDecodeError(e)))?;
        Ok(PublicKey::from_key(key))
    }

    /// Reads a PEM public key file.
    pub fn from_file(path: &Path) -> Result<PublicKey, OciError> {
        // OciError is `Clone` and `Eq`, which neither cause is: its text is kept.
        let refuse = |reason: String| OciError::Key {
            path: path.to_path_buf(),
            reason,
        };
        let pem = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
        PublicKey::from_pem(&pem).map_err(|e| refuse(e.to_string()))
    }

    fn from_key(key: p256::ecdsa::VerifyingKey) -> PublicKey {
        let der = key
            .to_public_key_der()
            .map(|der| der.as_bytes().to_vec())
            .unwrap_or_default();
        let id = Digest::of(&der).hex()[..16].to_string();
        PublicKey { key, id }
    }

    /// A short fingerprint: the first 16 hex digits of the SHA-256 of the
    /// key's DER.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Checks `signature` (base64 DER, cosign's annotation) over `payload`.
    pub(crate) fn verify(&self, payload: &[u8], signature: &str) -> Result<(), String> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .map_err(|e| format!("a malformed signature (not base64: {e})"))?;
        let signature = p256::ecdsa::Signature::from_der(&der).map_err(|_| {
            format!(
                "a malformed signature ({} bytes that are not a DER ECDSA signature: truncated or damaged)",
                der.len()
            )
        })?;
        // ECDSA accepts s and n - s alike; Go's and OpenSSL's signers make
        // either.
        let signature = signature.normalize_s().unwrap_or(signature);
        self.key
            .verify(payload, &signature)
            .map_err(|_| format!("the signature does not verify with the key {}", self.id))
    }
}

/// Why a PEM text is not a key toolcage reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PemError {
    /// Not an ECDSA P-256 `SubjectPublicKeyInfo` (cosign.pub's format).
    #[error("not a PEM ECDSA P-256 public key (cosign.pub's format): {0}")]
    NotPublicKey(#[source] KeyDecodeError),
    /// Not an unencrypted PKCS#8 or SEC1 ECDSA P-256 private key.
    #[error("not a PEM PKCS#8 or SEC1 ECDSA P-256 private key")]
    NotPrivateKey,
    /// cosign's encrypted key, given where its password cannot be asked
    /// ([`SigningKey::open`] asks for it).
    #[error("an encrypted cosign key: it needs its password")]
    EncryptedCosignKey,
    /// An encrypted PEM key of another format, which toolcage does not read.
    #[error(
        "an encrypted PEM key other than cosign's is not read; give cosign's key, or an unencrypted PKCS#8 or SEC1 PEM P-256 key"
    )]
    EncryptedOther,
}

/// Why a public key's PEM does not decode (see [`PemError::NotPublicKey`]).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct KeyDecodeError(p256::pkcs8::spki::Error);

/// A private key that `toolcage sign` signs with, ECDSA P-256: cosign's
/// encrypted `cosign.key` ([`SigningKey::open`]), or PEM PKCS#8 (`PRIVATE
/// KEY`) or SEC1 (`EC PRIVATE KEY`), unencrypted.
pub struct SigningKey {
    pub(super) key: p256::ecdsa::SigningKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public().id)
    }
}

impl SigningKey {
    pub(super) fn from_key(key: p256::ecdsa::SigningKey) -> SigningKey {
        SigningKey { key }
    }

    /// Parses an unencrypted PEM private key (cosign's encrypted ones open
    /// with [`SigningKey::from_encrypted_pem`] or [`SigningKey::open`]).
    pub fn from_pem(pem: &str) -> Result<SigningKey, PemError> {
        let pem = pem.trim();
        if is_encrypted(pem) {
            return Err(PemError::EncryptedCosignKey);
        }
        if pem.contains("ENCRYPTED") {
            return Err(PemError::EncryptedOther);
        }
        if let Ok(key) = p256::ecdsa::SigningKey::from_pkcs8_pem(pem) {
            return Ok(SigningKey { key });
        }
        p256::SecretKey::from_sec1_pem(pem)
            .map(|secret| SigningKey { key: secret.into() })
            .map_err(|_| PemError::NotPrivateKey)
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey::from_key(*self.key.verifying_key())
    }

    /// The public key as PEM (what `cosign.pub` holds).
    pub fn public_pem(&self) -> String {
        self.key
            .verifying_key()
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .expect("a P-256 key encodes")
    }

    /// The base64 DER signature of `payload`: the value of cosign's
    /// `dev.cosignproject.cosign/signature` annotation.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: p256::ecdsa::Signature = self.key.sign(payload);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

/// The simple-signing payload cosign signs for `digest` in `reference`'s
/// repository, byte for byte as cosign writes it.
pub fn payload(reference: &Reference, digest: &Digest) -> Vec<u8> {
    let docker_reference = serde_json::to_string(&reference.docker_reference()).expect("string");
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":{docker_reference}}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"{PAYLOAD_TYPE}"}},"optional":null}}"#
    )
    .into_bytes()
}

/// The digest and the repository (`docker-reference`) a payload names, if
/// it is a simple-signing payload.
fn signed(payload: &[u8]) -> Result<(String, String), String> {
    let value: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("a malformed signature payload (not JSON: {e})"))?;
    let critical = &value["critical"];
    if critical["type"] != PAYLOAD_TYPE {
        return Err(format!(
            "a malformed signature payload (its type is {}, not `{PAYLOAD_TYPE}`)",
            critical["type"]
        ));
    }
    let digest = critical["image"]["docker-manifest-digest"]
        .as_str()
        .ok_or("a malformed signature payload (no docker-manifest-digest)")?;
    let repository = critical["identity"]["docker-reference"]
        .as_str()
        .ok_or("a malformed signature payload (no docker-reference)")?;
    Ok((digest.to_string(), repository.to_string()))
}

/// The payload layers of a signature manifest: each payload's digest and
/// its signature.
pub(crate) fn signature_layers(manifest: &Manifest) -> Vec<(Digest, Option<String>)> {
    manifest
        .layers
        .iter()
        .filter(|layer| layer.media_type == PAYLOAD_MEDIA_TYPE)
        .filter_map(|layer| {
            let digest = layer.digest.parse().ok()?;
            Some((digest, layer.annotations.get(SIGNATURE_ANNOTATION).cloned()))
        })
        .collect()
}

/// Checks one signature layer: `payload` (already checked against its
/// digest) signed as `signature` by `key`, for `digest` in `reference`'s
/// repository. The repository is checked too, unlike cosign (which lets
/// mirrors reuse signatures): toolcage names a component, and grants it,
/// by its repository, so a signed digest must not run under another name.
/// The error says which check failed.
pub(crate) fn check(
    key: &PublicKey,
    reference: &Reference,
    digest: &Digest,
    payload: &[u8],
    signature: Option<&str>,
) -> Result<(), String> {
    let Some(signature) = signature else {
        return Err(format!(
            "a malformed signature (the layer has no {SIGNATURE_ANNOTATION} annotation)"
        ));
    };
    key.verify(payload, signature)?;
    let (signed, repository) = signed(payload)?;
    if signed != digest.as_str() {
        return Err(format!(
            "the signature is for another digest ({signed}), not {digest}"
        ));
    }
    if repository != reference.docker_reference() {
        return Err(format!(
            "the signature is for another repository ({repository}), not {}",
            reference.docker_reference()
        ));
    }
    Ok(())
}

/// The signature image: `existing` (another signer's, if any) with a layer
/// for `payload` signed as `signature`; and its config.
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) fn signature_manifest(
    existing: Option<Manifest>,
    payload: &[u8],
    signature: &str,
) -> (Vec<u8>, Vec<u8>) {
    let mut layer = BlobDescriptor::of(PAYLOAD_MEDIA_TYPE, payload);
    layer
        .annotations
        .insert(SIGNATURE_ANNOTATION.into(), signature.into());
    // Other signers sign the same payload: only this very signature is
    // replaced, never theirs.
    let mut layers: Vec<BlobDescriptor> = existing
        .map(|m| m.layers)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.digest != layer.digest || l.annotations != layer.annotations)
        .collect();
    layers.push(layer);
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {},
    });
    let config = serde_json::to_vec(&config).expect("JSON serializes");
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        artifact_type: None,
        config: Some(BlobDescriptor::of(SIGNATURE_CONFIG_MEDIA_TYPE, &config)),
        layers,
        manifests: None,
        annotations: BTreeMap::new(),
    };
    (manifest.to_bytes(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRGIFZjEKFjz2PgTx
0cQn1yKbfOwZcrnm8oul8qOhTwWhRANCAATxh72I3wi6dexua3l2x7j/tybuUx0W
pvI5wx+L0gDr7bRDNxTH+y/UIQqjqs6GeQ1t8MG0vy8dOi8BY60i90OM
-----END PRIVATE KEY-----";

    #[test]
    fn signs_and_checks_every_way_it_can_fail() {
        let key = SigningKey::from_pem(KEY).unwrap();
        let public = PublicKey::from_pem(&key.public_pem()).unwrap();
        let reference: Reference = "oci://r.example/team/a:1".parse().unwrap();
        let digest = Digest::of(b"manifest");
        let payload = payload(&reference, &digest);
        let signature = key.sign(&payload);
        assert_eq!(
            check(&public, &reference, &digest, &payload, Some(&signature)),
            Ok(())
        );

        let other = Digest::of(b"another manifest");
        let error = check(&public, &reference, &other, &payload, Some(&signature)).unwrap_err();
        assert!(error.contains("another digest"), "{error}");
        let elsewhere: Reference = "oci://r.example/team/b:1".parse().unwrap();
        let error = check(&public, &elsewhere, &digest, &payload, Some(&signature)).unwrap_err();
        assert!(error.contains("another repository"), "{error}");

        let stranger = SigningKey::from_pem(
            &p256::SecretKey::from_slice(&[7; 32])
                .unwrap()
                .to_sec1_pem(p256::pkcs8::LineEnding::LF)
                .unwrap(),
        )
        .unwrap();
        let error = check(
            &stranger.public(),
            &reference,
            &digest,
            &payload,
            Some(&signature),
        )
        .unwrap_err();
        assert!(error.contains("does not verify"), "{error}");

        let der = base64::engine::general_purpose::STANDARD
            .decode(&signature)
            .unwrap();
        let cut = base64::engine::general_purpose::STANDARD.encode(&der[..der.len() - 5]);
        let error = check(&public, &reference, &digest, &payload, Some(&cut)).unwrap_err();
        assert!(error.contains("malformed"), "{error}");
        let error = check(&public, &reference, &digest, &payload, None).unwrap_err();
        assert!(error.contains("malformed"), "{error}");

        // A second signer's signature joins the first's; signing again with
        // the same key changes nothing.
        let (first, _) = signature_manifest(None, &payload, &signature);
        let first = Manifest::parse(&reference, &first).unwrap();
        let (both, _) = signature_manifest(Some(first), &payload, &stranger.sign(&payload));
        let both = Manifest::parse(&reference, &both).unwrap();
        assert_eq!(signature_layers(&both).len(), 2);
        let (again, _) = signature_manifest(Some(both.clone()), &payload, &signature);
        let again = Manifest::parse(&reference, &again).unwrap();
        assert_eq!(signature_layers(&again).len(), 2);
    }

    #[test]
    fn writes_the_payload_as_cosign_does() {
        let reference: Reference = "oci://r.example/team/a:1".parse().unwrap();
        let digest: Digest = format!("sha256:{}", "b".repeat(64)).parse().unwrap();
        assert_eq!(
            String::from_utf8(payload(&reference, &digest)).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"r.example/team/a"}},"image":{{"docker-manifest-digest":"sha256:{}"}},"type":"cosign container image signature"}},"optional":null}}"#,
                "b".repeat(64)
            )
        );
    }
}
