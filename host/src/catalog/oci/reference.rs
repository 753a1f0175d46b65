//! `oci://` references and SHA-256 digests.

use std::fmt;
use std::str::FromStr;

use sha2::Digest as _;

use super::OciError;

/// A SHA-256 content digest, `sha256:` and 64 lower-case hex digits: the
/// only algorithm toolcage accepts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(format!("sha256:{:x}", sha2::Sha256::digest(bytes)))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// `sha256:…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tag cosign keeps this manifest's signatures under:
    /// `sha256-<hex>.sig`.
    pub fn signature_tag(&self) -> String {
        format!("sha256-{}.sig", self.hex())
    }
}

/// Why a text is not a [`Digest`]; each variant holds the text refused
/// (or its algorithm).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// No `algorithm:` before the hex digits.
    #[error("`{0}` is not a digest (sha256:<64 hex digits>)")]
    NoAlgorithm(String),
    /// An algorithm other than sha256.
    #[error("the digest algorithm `{0}` is not supported; use sha256")]
    Algorithm(String),
    /// Not 64 lower-case hex digits after `sha256:`.
    #[error("`{0}` is not a digest (sha256: and 64 lower-case hex digits)")]
    Hex(String),
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(text: &str) -> Result<Self, DigestError> {
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(DigestError::NoAlgorithm(text.to_string()));
        };
        if algorithm != "sha256" {
            return Err(DigestError::Algorithm(algorithm.to_string()));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(DigestError::Hex(text.to_string()));
        }
        Ok(Digest(text.to_string()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A component in an OCI registry: `oci://REGISTRY/REPOSITORY:TAG`,
/// `oci://REGISTRY/REPOSITORY@sha256:…`, or both (the digest pins it). The
/// registry is always named; nothing defaults to Docker Hub or to `latest`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

/// The prefix of every reference.
pub(crate) const SCHEME: &str = "oci://";

impl Reference {
    /// The prefix of every reference.
    pub const SCHEME: &'static str = SCHEME;

    /// Whether `text` is meant as a reference (starts with `oci://`), valid
    /// or not.
    pub fn is_reference(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// The registry: `host[:port]`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository, such as `team/grep`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest that pins it, if any.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same repository at `digest` (the tag kept, for display).
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// The same repository at `digest`, without a tag.
    pub fn at_digest(&self, digest: Digest) -> Reference {
        Reference {
            tag: None,
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// The same repository at `tag`, without a digest.
    pub fn at_tag(&self, tag: impl Into<String>) -> Reference {
        Reference {
            tag: Some(tag.into()),
            digest: None,
            ..self.clone()
        }
    }

    /// The name its component gets: the repository's last segment.
    pub fn component_name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// `REGISTRY/REPOSITORY`: what cosign's payload names as the
    /// `docker-reference`.
    pub fn docker_reference(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The reference in oci-client's form.
    #[cfg(feature = "oci")]
    pub(crate) fn to_client(&self) -> oci_client::Reference {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.to_string(),
            ),
            (None, Some(tag)) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone(),
            ),
            (None, None) => unreachable!("a reference has a tag or a digest"),
        }
    }
}

impl FromStr for Reference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, OciError> {
        let refuse = |reason: &str| OciError::Reference {
            reference: text.to_string(),
            reason: reason.to_string(),
        };
        let Some(rest) = text.strip_prefix(SCHEME) else {
            return Err(refuse("it does not start with oci://"));
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(refuse(
                "name the registry and the repository: oci://REGISTRY/REPOSITORY:TAG",
            ));
        };
        let registry_ok = !registry.is_empty()
            && registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !registry_ok {
            return Err(refuse(&format!(
                "`{registry}` is not a registry host[:port]"
            )));
        }
        let (name, digest) = match path.split_once('@') {
            Some((name, digest)) => (
                name,
                Some(
                    digest
                        .parse::<Digest>()
                        .map_err(|e| refuse(&e.to_string()))?,
                ),
            ),
            None => (path, None),
        };
        let (repository, tag) = match name.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
            _ => (name, None),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
                && c.as_bytes()[0].is_ascii_alphanumeric()
                && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
        };
        if repository.len() > 255 || !repository.split('/').all(component_ok) {
            return Err(refuse(&format!(
                "`{repository}` is not a repository: lower-case letters, digits and `._-` between slashes"
            )));
        }
        if let Some(tag) = tag {
            let tag_ok = tag.len() <= 128
                && tag.bytes().enumerate().all(|(i, b)| {
                    b.is_ascii_alphanumeric() || b == b'_' || (i > 0 && (b == b'.' || b == b'-'))
                });
            if !tag_ok {
                return Err(refuse(&format!(
                    "`{tag}` is not a tag: up to 128 of letters, digits and `_.-`, not starting with `.` or `-`"
                )));
            }
        }
        if tag.is_none() && digest.is_none() {
            return Err(refuse(
                "give a tag (`:1.0`) or a digest (`@sha256:…`); none is assumed",
            ));
        }
        Ok(Reference {
            // Host names are case-insensitive: one spelling, so that trust
            // prefixes and the lock see one reference.
            registry: registry.to_ascii_lowercase(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl serde::Serialize for Reference {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Reference {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags_digests_and_both() {
        let hex = "a".repeat(64);
        let r: Reference = "oci://127.0.0.1:5000/tools/echo:1.0".parse().unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("127.0.0.1:5000", "tools/echo", Some("1.0"))
        );
        assert_eq!(r.component_name(), "echo");
        let upper: Reference = "oci://GHCR.io/team/grep:1".parse().unwrap();
        assert_eq!(upper.to_string(), "oci://ghcr.io/team/grep:1");
        let pinned: Reference = format!("oci://ghcr.io/team/grep:2@sha256:{hex}")
            .parse()
            .unwrap();
        assert_eq!(pinned.digest().unwrap().hex(), hex);
        assert_eq!(
            pinned.to_string(),
            format!("oci://ghcr.io/team/grep:2@sha256:{hex}")
        );
        for bad in [
            "ghcr.io/team/grep:1",
            "oci://ghcr.io/team/grep",
            "oci://ghcr.io",
            "oci://ghcr.io/Team/grep:1",
            "oci://ghcr.io/team//grep:1",
            "oci://ghcr.io/team/grep:-1",
            "oci://ghcr.io/team/grep@sha512:abcd",
            "oci://ghcr.io/team/grep@sha256:ABCD",
            "oci://gh cr.io/team/grep:1",
        ] {
            assert!(bad.parse::<Reference>().is_err(), "{bad}");
        }
    }
}
