//! Where tools come from and who must have signed them: `tools = [...]`,
//! `[oci]` and `[trust]`.

use std::path::PathBuf;

use super::raw::{RawOci, RawTrust};
use super::{ConfigError, Resolve};
use crate::catalog::registry::ToolsSource;

/// The `[oci]` table: how registries are reached, where pulls are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciConfig {
    /// Registries (`host:port`) spoken to over plain HTTP. Default: none
    /// (loopback included).
    pub insecure_registries: Vec<String>,
    /// The content store. Default: none here; the CLI uses
    /// `$XDG_CACHE_HOME/toolcage/oci`.
    pub store: Option<PathBuf>,
}

/// The `[trust]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustConfig {
    /// Whether a tag is used only through the digest the lock recorded.
    /// Default: true.
    pub require_digest: bool,
    /// `[[trust.keys]]`: which key covers which references.
    pub keys: Vec<TrustKeyConfig>,
}

impl Default for TrustConfig {
    fn default() -> Self {
        TrustConfig {
            require_digest: true,
            keys: Vec::new(),
        }
    }
}

/// One `[[trust.keys]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustKeyConfig {
    /// References that start with this (`oci://registry/team/`).
    pub prefix: String,
    /// The cosign public key file (PEM), resolved against the config's
    /// directory.
    pub key: PathBuf,
    /// Whether a signature by it is required. Default: true.
    pub require_signature: bool,
}

/// `tools = [...]`: directories (resolved) and references.
pub(super) fn tools(raw: &[String], resolve: &Resolve) -> Result<Vec<ToolsSource>, ConfigError> {
    raw.iter()
        .enumerate()
        .map(|(i, text)| match ToolsSource::parse(text) {
            Ok(ToolsSource::Dir(dir)) => Ok(ToolsSource::Dir(resolve(&dir))),
            Ok(reference) => Ok(reference),
            Err(e) => Err(ConfigError::invalid(format!("tools[{i}]"), e)),
        })
        .collect()
}

/// The `[oci]` table.
pub(super) fn oci(raw: &RawOci, resolve: &Resolve) -> Result<OciConfig, ConfigError> {
    for (i, registry) in raw.insecure_registries.iter().enumerate() {
        let valid = !registry.is_empty()
            && registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !valid {
            return Err(ConfigError::invalid(
                format!("oci.insecure_registries[{i}]"),
                format!("`{registry}` is not a registry host[:port]"),
            ));
        }
    }
    Ok(OciConfig {
        insecure_registries: raw.insecure_registries.clone(),
        store: raw.store.as_deref().map(resolve),
    })
}

/// The `[trust]` table.
pub(super) fn trust(raw: &RawTrust, resolve: &Resolve) -> Result<TrustConfig, ConfigError> {
    let mut keys = Vec::new();
    for (i, key) in raw.keys.iter().enumerate() {
        if !key
            .prefix
            .starts_with(crate::catalog::oci::Reference::SCHEME)
            || key.prefix.len() <= crate::catalog::oci::Reference::SCHEME.len()
        {
            return Err(ConfigError::invalid(
                format!("trust.keys[{i}].prefix"),
                format!(
                    "`{}` must start with oci:// and name a registry",
                    key.prefix
                ),
            ));
        }
        keys.push(TrustKeyConfig {
            prefix: key.prefix.clone(),
            key: resolve(&key.key),
            require_signature: key.require_signature.unwrap_or(true),
        });
    }
    Ok(TrustConfig {
        require_digest: raw.require_digest.unwrap_or(true),
        keys,
    })
}
