//! The `[secrets.NAME]` tables: where each secret's value is read from,
//! never the value itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::raw::RawSecret;
use super::{ConfigError, Resolve};

/// Where a secret's value is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of toolcage's (`env = "VAR"`).
    Env(String),
    /// A file, its whole content less one trailing line break (`file =
    /// "path"`).
    File(PathBuf),
}

/// `[secrets.NAME]`: where each value is.
pub(super) fn secrets(
    raw: &BTreeMap<String, RawSecret>,
    resolve: &Resolve,
) -> Result<BTreeMap<String, SecretSource>, ConfigError> {
    let mut secrets = BTreeMap::new();
    for (name, secret) in raw {
        let key = format!("secrets.{name}");
        crate::sandbox::secrets::check_name(name)
            .map_err(|e| ConfigError::invalid(key.clone(), e))?;
        let source = match (&secret.env, &secret.file) {
            (Some(var), None) if !var.is_empty() => SecretSource::Env(var.clone()),
            (None, Some(file)) => SecretSource::File(resolve(file)),
            _ => {
                return Err(ConfigError::invalid(
                    key,
                    "set exactly one of env = \"VARIABLE\" or file = \"path\"",
                ));
            }
        };
        secrets.insert(name.clone(), source);
    }
    Ok(secrets)
}
