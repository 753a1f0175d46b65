//! Loading what `toolcage pull` fetched: the lock and the store, checked
//! again offline, never the registry.

use std::path::{Path, PathBuf};

use super::layout::Manifest;
use super::signature::{check, signature_layers};
use super::{Digest, LockEntry, Lockfile, OciError, Reference, Store, TrustKey, TrustPolicy};

/// The components `toolcage pull` fetched: the lock that records them, the
/// store that holds them, and the trust policy that judges them. Give it to
/// [`RegistryBuilder::pulled`](crate::RegistryBuilder::pulled) to load
/// `oci://` references.
#[derive(Debug, Clone)]
pub struct Pulled {
    lock: PathBuf,
    store: Store,
    trust: TrustPolicy,
}

/// A component read from the store and checked: its bytes hash to the
/// digests the lock records, its manifest is a Wasm component artifact, and
/// its signature (where the policy wants one) verifies.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The manifest's digest.
    pub digest: Digest,
    /// The component's digest.
    pub component: Digest,
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// The trust key that verified its signature, if one did.
    pub signed_by: Option<String>,
}

impl Pulled {
    /// The lock at `lock` (read at each load, so a new pull is seen), the
    /// blobs in `store`, judged by `trust`.
    pub fn new(lock: impl Into<PathBuf>, store: Store, trust: TrustPolicy) -> Pulled {
        Pulled {
            lock: lock.into(),
            store,
            trust,
        }
    }

    /// The lock file.
    pub fn lock_path(&self) -> &Path {
        &self.lock
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The trust policy.
    pub fn trust(&self) -> &TrustPolicy {
        &self.trust
    }

    /// The component `reference` resolves to in the lock, read from the
    /// store and checked.
    pub fn read(&self, reference: &Reference) -> Result<Verified, OciError> {
        self.verify(reference, &self.entry(reference)?)
    }

    /// The lock's entry for `reference`.
    fn entry(&self, reference: &Reference) -> Result<LockEntry, OciError> {
        let lock = Lockfile::read(&self.lock)?;
        lock.get(&reference.to_string())
            .cloned()
            .ok_or_else(|| OciError::NotLocked {
                reference: reference.to_string(),
                lock: self.lock.clone(),
            })
    }

    /// The lock's entry for `reference`, once it is sure the store holds
    /// what it names (without reading it: [`read`](Self::read) checks the
    /// content). The error says to run `toolcage pull`.
    pub fn locate(&self, reference: &Reference) -> Result<LockEntry, OciError> {
        let entry = self.entry(reference)?;
        let wanted = [
            ("manifest", Some(&entry.digest)),
            ("component", Some(&entry.component)),
            ("signature", entry.signature.as_ref()),
        ];
        for (what, digest) in wanted {
            if let Some(digest) = digest
                && !self.store.path(digest).is_file()
            {
                return Err(OciError::NotStored {
                    reference: reference.to_string(),
                    what,
                    digest: digest.to_string(),
                    store: self.store.dir().to_path_buf(),
                });
            }
        }
        Ok(entry)
    }

    /// Reads and checks what `entry` records for `reference`.
    pub fn verify(&self, reference: &Reference, entry: &LockEntry) -> Result<Verified, OciError> {
        if let Some(pinned) = reference.digest()
            && pinned != &entry.digest
        {
            return Err(OciError::Pinned {
                reference: reference.to_string(),
                pinned: pinned.to_string(),
                actual: entry.digest.to_string(),
            });
        }
        let manifest_bytes = self.blob(reference, "manifest", &entry.digest)?;
        let manifest = Manifest::parse(reference, &manifest_bytes)?;
        let layer = manifest.component_layer(reference)?;
        if layer.digest != entry.component.as_str() {
            return Err(OciError::Lock {
                path: self.lock.clone(),
                reason: format!(
                    "{reference}: the lock names the component {}, but its manifest names {}",
                    entry.component, layer.digest
                ),
            });
        }
        let bytes = self.blob(reference, "component", &entry.component)?;
        if bytes.len() as u64 != layer.size || layer.size != entry.size {
            return Err(OciError::Layout {
                reference: reference.to_string(),
                reason: format!(
                    "the component is {} bytes, its descriptor says {} and the lock {}",
                    bytes.len(),
                    layer.size,
                    entry.size
                ),
            });
        }
        let signed_by = match self.trust.key_for(reference) {
            None => None,
            Some(key) => match &entry.signature {
                Some(signature) => {
                    let manifest = self.blob(reference, "signature", signature)?;
                    let manifest = Manifest::parse(reference, &manifest)?;
                    // What pull could not fetch, it left out; the rest must
                    // be intact.
                    let mut layers = Vec::new();
                    for (payload, signature) in signature_layers(&manifest) {
                        match self.blob(reference, "signature payload", &payload) {
                            Ok(bytes) => layers.push((bytes, signature)),
                            Err(OciError::NotStored { .. }) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    verify_signature(reference, key, &entry.digest, &layers)?;
                    Some(key.source().to_string())
                }
                None if key.requires_signature() => {
                    return Err(OciError::Signature {
                        reference: reference.to_string(),
                        reason: format!(
                            "no signature was checked when it was pulled, and the trust key {} for `{}` requires one: sign it, then run `toolcage pull` again",
                            key.source(),
                            key.prefix()
                        ),
                    });
                }
                None => None,
            },
        };
        Ok(Verified {
            digest: entry.digest.clone(),
            component: entry.component.clone(),
            bytes,
            signed_by,
        })
    }

    fn blob(
        &self,
        reference: &Reference,
        what: &'static str,
        digest: &Digest,
    ) -> Result<Vec<u8>, OciError> {
        match self.store.read(digest) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(OciError::NotStored {
                reference: reference.to_string(),
                what,
                digest: digest.to_string(),
                store: self.store.dir().to_path_buf(),
            }),
            Err(reason) => Err(OciError::Store {
                path: self.store.dir().to_path_buf(),
                reason,
            }),
        }
    }
}

/// Checks that one of the signature `layers` (payload, signature) signs
/// `digest` with `key`; the error says why none does.
pub(crate) fn verify_signature(
    reference: &Reference,
    key: &TrustKey,
    digest: &Digest,
    layers: &[(Vec<u8>, Option<String>)],
) -> Result<(), OciError> {
    let mut reasons = Vec::new();
    for (payload, signature) in layers {
        match check(key.key(), reference, digest, payload, signature.as_deref()) {
            Ok(()) => return Ok(()),
            Err(reason) => reasons.push(reason),
        }
    }
    let reason = if reasons.is_empty() {
        format!(
            "no signature: the signature image holds no signature layer (the trust key {} for `{}` requires one)",
            key.source(),
            key.prefix()
        )
    } else {
        format!(
            "refused: {} (trust key {} for `{}`)",
            reasons.join("; "),
            key.source(),
            key.prefix()
        )
    };
    Err(OciError::Signature {
        reference: reference.to_string(),
        reason,
    })
}
