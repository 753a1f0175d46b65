//! The trust policy: which keys must have signed which references.

use std::path::PathBuf;

use super::{PublicKey, Reference};

/// Which references must be signed, by which key. Default: no keys, so
/// nothing needs a signature, and `require_digest` on.
#[derive(Debug, Clone)]
pub struct TrustPolicy {
    require_digest: bool,
    keys: Vec<TrustKey>,
}

impl Default for TrustPolicy {
    fn default() -> Self {
        TrustPolicy {
            require_digest: true,
            keys: Vec::new(),
        }
    }
}

/// A key trusted for the references that start with a prefix.
#[derive(Debug, Clone)]
pub struct TrustKey {
    prefix: String,
    key: PublicKey,
    /// The key file as configured, for the lock and messages.
    source: String,
    require_signature: bool,
}

impl TrustKey {
    /// `key` (read from `source`) for references starting with `prefix`
    /// (`oci://registry.example.com/team/`); a signature by it is required.
    /// The prefix's registry is compared without case, as references'
    /// are.
    pub fn new(prefix: impl Into<String>, key: PublicKey, source: impl Into<String>) -> TrustKey {
        let mut prefix: String = prefix.into();
        if let Some(rest) = prefix.strip_prefix(super::Reference::SCHEME) {
            let end = rest.find('/').unwrap_or(rest.len());
            let registry = rest[..end].to_ascii_lowercase();
            prefix = format!("{}{registry}{}", super::Reference::SCHEME, &rest[end..]);
        }
        TrustKey {
            prefix,
            key,
            source: source.into(),
            require_signature: true,
        }
    }

    /// Reads the key from `path` (PEM).
    pub fn from_file(
        prefix: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> Result<TrustKey, super::OciError> {
        let path = path.into();
        let key = PublicKey::from_file(&path)?;
        Ok(TrustKey::new(prefix, key, path.display().to_string()))
    }

    /// Whether a reference it covers must be signed by it. Default: yes.
    /// Without, a signature is checked when there is one, and a reference
    /// without one is loaded.
    pub fn require_signature(mut self, required: bool) -> TrustKey {
        self.require_signature = required;
        self
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// Where the key came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether a signature is required.
    pub fn requires_signature(&self) -> bool {
        self.require_signature
    }

    /// Whether it covers `reference`: the reference starts with the prefix,
    /// at a boundary (`oci://r/team` covers `oci://r/team/x:1` and
    /// `oci://r/team:1`, not `oci://r/teammate:1`).
    fn covers(&self, reference: &str) -> bool {
        let Some(rest) = reference.strip_prefix(&self.prefix) else {
            return false;
        };
        self.prefix.ends_with(['/', ':', '@'])
            || rest.is_empty()
            || rest.starts_with(['/', ':', '@'])
    }
}

impl TrustPolicy {
    /// The default policy: no keys, `require_digest` on.
    pub fn new() -> TrustPolicy {
        TrustPolicy::default()
    }

    /// Whether a tag is used only through the digest the lock recorded for
    /// it (`toolcage pull` resolves it once, and again only with
    /// `--update`). Off, every pull resolves tags again. Default: on.
    pub fn require_digest(mut self, required: bool) -> TrustPolicy {
        self.require_digest = required;
        self
    }

    /// Adds a key. Where several cover a reference, the longest prefix
    /// decides.
    pub fn key(mut self, key: TrustKey) -> TrustPolicy {
        self.keys.push(key);
        self
    }

    /// Whether tags are used only through the lock.
    pub fn requires_digest(&self) -> bool {
        self.require_digest
    }

    /// The keys.
    pub fn keys(&self) -> &[TrustKey] {
        &self.keys
    }

    /// The key that covers `reference`, if any: the longest prefix.
    pub fn key_for(&self, reference: &Reference) -> Option<&TrustKey> {
        let text = reference.to_string();
        self.keys
            .iter()
            .filter(|key| key.covers(&text))
            .max_by_key(|key| key.prefix.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_boundaries() {
        let pem = super::super::SigningKey::from_pem(
            &p256::SecretKey::from_slice(&[9; 32])
                .unwrap()
                .to_sec1_pem(p256::pkcs8::LineEnding::LF)
                .unwrap(),
        )
        .unwrap()
        .public();
        let policy = TrustPolicy::new()
            .key(TrustKey::new("oci://r.example/team", pem.clone(), "a.pub"))
            .key(TrustKey::new("oci://r.example/team/core/", pem, "b.pub"));
        let source = |r: &str| {
            policy
                .key_for(&r.parse().unwrap())
                .map(|k| k.source().to_string())
        };
        assert_eq!(source("oci://r.example/team/x:1").as_deref(), Some("a.pub"));
        assert_eq!(source("oci://r.example/team:1").as_deref(), Some("a.pub"));
        assert_eq!(
            source("oci://r.example/team/core/x:1").as_deref(),
            Some("b.pub")
        );
        assert_eq!(source("oci://r.example/teammate:1"), None);
        assert_eq!(source("oci://R.Example/team/x:1").as_deref(), Some("a.pub"));
    }
}
