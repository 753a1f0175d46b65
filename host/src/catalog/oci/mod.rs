//! Tools from OCI registries, pinned by digest, checked against cosign's
//! keyed signatures, and served offline from a lock.
//!
//! A reference `oci://REGISTRY/REPO:TAG` or `oci://REGISTRY/REPO@sha256:…`
//! stands wherever a tools directory can. Only `toolcage pull` (the
//! [`Client`], behind the `oci` feature) talks to a registry: it resolves the
//! tag, checks every digest it receives, checks the signature the trust
//! policy asks for, keeps the bytes in a content-addressed [`Store`] and
//! records what it resolved in the [`Lockfile`]. Loading ([`Pulled`]) reads
//! the lock and the store only, and checks everything again offline: the
//! manifest's and the component's digests, the artifact's layout, and the
//! signature against the key the policy names now.
//!
//! Threat model: the registry, the network between, and whoever published
//! under a tag are not trusted; the operator's config, trust keys and lock
//! are. So:
//! - nothing is taken on the registry's word: a manifest is hashed and must
//!   equal the pin (the reference's digest, or the lock's) and, when the
//!   registry sends one, its `Docker-Content-Digest`; the component must
//!   equal its descriptor's digest and size;
//! - a tag is run only through the digest the lock recorded for it, so a
//!   tag moved in the registry changes nothing until `toolcage pull
//!   --update`;
//! - where a trust key covers a reference, its signature must verify with
//!   that key over cosign's simple-signing payload, and the payload must name
//!   the very digest being run; a signature for another digest, by another
//!   key, or malformed, is refused, and so is a missing one when the key
//!   requires it;
//! - the store is checked as the compile cache is (the current user's own,
//!   nobody else can write to it), and every blob is hashed again when read,
//!   so a file changed on disk is refused rather than run.
//!
//! Not done yet: keyless signatures (Fulcio certificates checked against a
//! trusted root, and Rekor inclusion), which cosign makes by default.

#[cfg(feature = "oci")]
mod client;
mod keyfile;
mod layout;
mod lock;
mod pulled;
#[cfg(feature = "oci")]
mod read;
mod reference;
mod signature;
mod store;
mod trust;

#[cfg(feature = "oci")]
pub use client::{Client, ClientOptions, Progress};
pub use keyfile::{
    COSIGN_SCRYPT_LOG_N, KeyFileError, KeyProblem, MAX_SCRYPT_MEMORY, PasswordSource,
};
pub use layout::{
    ANNOTATION_TOOLS, ANNOTATION_WIT, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, WIT_VERSION,
};
pub use lock::{LOCK_FILE_NAME, LockEntry, Lockfile};
pub use pulled::{Pulled, Verified};
#[cfg(feature = "oci")]
pub use read::{Credentials, MAX_ERROR_BYTES, MAX_MANIFEST_BYTES, MAX_TOKEN_BYTES};
pub use reference::{Digest, DigestError, Reference};
pub use signature::{
    COSIGN_KEY_LABEL, KeyDecodeError, PemError, PublicKey, SIGSTORE_KEY_LABEL, SigningKey,
    payload as simple_signing_payload,
};
pub use store::Store;
pub use trust::{TrustKey, TrustPolicy};

use std::path::PathBuf;

/// Why a reference could not be pulled, pushed, signed or loaded. Each
/// message says which check failed and on what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OciError {
    /// The text is not an `oci://` reference toolcage accepts.
    #[error("invalid reference `{reference}`: {reason}")]
    Reference {
        /// The text.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The lock has no entry for the reference.
    #[error("{reference} is not in {}: run `toolcage pull` to fetch it", lock.display())]
    NotLocked {
        /// The reference.
        reference: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock names content the store does not hold.
    #[error("{reference}: its {what} {digest} is not in the store {}: run `toolcage pull` to fetch it", store.display())]
    NotStored {
        /// The reference.
        reference: String,
        /// The manifest, the component, or the signature.
        what: &'static str,
        /// The missing content's digest.
        digest: String,
        /// The store.
        store: PathBuf,
    },
    /// Content does not hash to the digest that names it.
    #[error("{reference}: the {what}'s content hashes to {actual}, not to its digest {expected}")]
    Digest {
        /// The reference.
        reference: String,
        /// The manifest, the component, the signature payload, …
        what: &'static str,
        /// The digest it should have.
        expected: String,
        /// The digest it has.
        actual: String,
    },
    /// The manifest is not the one the reference or the lock pins.
    #[error("{reference}: the registry's manifest is {actual}, not the pinned digest {pinned}")]
    Pinned {
        /// The reference.
        reference: String,
        /// The digest pinned.
        pinned: String,
        /// The digest received.
        actual: String,
    },
    /// The registry's `Docker-Content-Digest` header does not name the
    /// content it sent.
    #[error(
        "{reference}: the registry's Docker-Content-Digest header says {header}, but the {what} it sent hashes to {actual}; refusing a registry that misreports digests"
    )]
    HeaderDigest {
        /// The reference.
        reference: String,
        /// The manifest, the component layer, …
        what: &'static str,
        /// What the header said.
        header: String,
        /// What the content hashes to.
        actual: String,
    },
    /// The artifact is not a Wasm component in the CNCF layout.
    #[error("{reference}: not a Wasm component artifact: {reason}")]
    Layout {
        /// The reference.
        reference: String,
        /// What was found instead.
        reason: String,
    },
    /// A signature check failed.
    #[error("{reference}: {reason}")]
    Signature {
        /// The reference.
        reference: String,
        /// Which check failed: no signature, another digest, another key,
        /// a malformed signature.
        reason: String,
    },
    /// A trust key cannot be read.
    #[error("cannot use the key {}: {reason}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The lock file cannot be read or written.
    #[error("cannot use the lock file {}: {reason}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The content store cannot be used.
    #[error("cannot use the content store {}: {reason}", path.display())]
    Store {
        /// The store directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The registry sent more than toolcage reads of a manifest, a token
    /// answer or a blob; no more of it was read.
    #[error(
        "{reference}: the registry's {what} is larger than the {limit} bytes toolcage reads{}; refused without reading more",
        announced.map(|n| format!(" (it announced {n} bytes)")).unwrap_or_default()
    )]
    TooLarge {
        /// The reference.
        reference: String,
        /// The manifest, the token answer, the component layer, …
        what: &'static str,
        /// The ceiling, in bytes.
        limit: u64,
        /// The size the registry's `Content-Length` announced, when it
        /// announced one past the ceiling.
        announced: Option<u64>,
    },
    /// The registry could not be reached, refused, or answered with an
    /// error.
    #[error("{reference}: {reason}")]
    Registry {
        /// The reference.
        reference: String,
        /// What the registry said, or why it could not be asked.
        reason: String,
    },
}
