//! `[state]`: how the MCP server seals the state a paused run's client
//! carries, and how much of it the server keeps.

use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawState;
use super::{ConfigError, Resolve};
use crate::state::seal::{DEFAULT_EXPIRY, DEFAULT_INLINE_BYTES, KeyFileError};
use crate::state::{DEFAULT_STORE_BYTES, MemoryStore, StateOptions};

/// `[state]`. Default: no key file (a key of the server process's own),
/// states lasting 10 minutes, up to 64 KiB carried by the client, a store
/// of 64 MiB in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    /// The file holding the sealing key, for replicas to share it.
    pub key_file: Option<PathBuf>,
    /// How long a state lasts.
    pub expiry: Duration,
    /// The largest state a client carries.
    pub inline_bytes: usize,
    /// What the store in memory holds.
    pub store_bytes: usize,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            key_file: None,
            expiry: DEFAULT_EXPIRY,
            inline_bytes: DEFAULT_INLINE_BYTES,
            store_bytes: DEFAULT_STORE_BYTES,
        }
    }
}

impl StateConfig {
    /// The sealing options it says, with its key file read.
    pub fn options(&self) -> Result<StateOptions, KeyFileError> {
        let mut options = StateOptions::new()
            .expiry(self.expiry)
            .inline_bytes(self.inline_bytes)
            .store(std::sync::Arc::new(MemoryStore::new(self.store_bytes)));
        if let Some(path) = &self.key_file {
            options = options.key_file(path)?;
        }
        Ok(options)
    }
}

/// `[state]`, its key file resolved by `resolve`.
pub(super) fn state(raw: &RawState, resolve: &Resolve) -> Result<StateConfig, ConfigError> {
    let mut config = StateConfig {
        key_file: raw.key_file.as_deref().map(resolve),
        ..StateConfig::default()
    };
    if let Some(ms) = raw.expiry_ms {
        if ms == 0 {
            return Err(ConfigError::invalid(
                "state.expiry_ms",
                "must be greater than 0",
            ));
        }
        config.expiry = Duration::from_millis(ms);
    }
    if let Some(kib) = raw.inline_kib {
        config.inline_bytes = usize::try_from(kib.saturating_mul(1024)).unwrap_or(usize::MAX);
    }
    if let Some(mib) = raw.store_mib {
        if mib == 0 {
            return Err(ConfigError::invalid(
                "state.store_mib",
                "must be greater than 0",
            ));
        }
        config.store_bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    }
    Ok(config)
}
