//! `[state]`: how the MCP server seals the state a paused run's client
//! carries, how much of it the server keeps, and where (its memory, or a
//! Redis that replicas share).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::raw::RawState;
use super::secrets::SecretSource;
use super::{ConfigError, Resolve};
use crate::sandbox::secrets::{Secret, SecretError};
use crate::state::seal::{DEFAULT_EXPIRY, DEFAULT_INLINE_BYTES, KeyFileError};
use crate::state::{
    DEFAULT_REDIS_PREFIX, DEFAULT_REDIS_TIMEOUT, DEFAULT_STORE_BYTES, MemoryStore, StateOptions,
    StateStore, StoreError,
};

/// Where the state store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateBackend {
    /// In the server process's memory (`backend = "memory"`, the default).
    Memory,
    /// In Redis (`backend = "redis"`), shared by the replicas given it.
    Redis(RedisConfig),
}

impl StateBackend {
    /// Its name in `backend`.
    pub fn name(&self) -> &'static str {
        match self {
            StateBackend::Memory => "memory",
            StateBackend::Redis(_) => "redis",
        }
    }
}

/// `[state]`'s Redis. Default: no password, keys prefixed `toolcage:`, 1 s
/// per command, required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://host:port/db`, or `rediss://` for TLS.
    pub url: String,
    /// The `[secrets]` entry holding its password.
    pub password_secret: Option<String>,
    /// What every key begins with: one per deployment.
    pub prefix: String,
    /// How long connecting and each command may take.
    pub timeout: Duration,
    /// Whether `serve` stops when Redis cannot be reached at start; when
    /// not, it serves with a store of its own and says so.
    pub required: bool,
}

/// Why `[state]` could not be put to use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The key file.
    #[error(transparent)]
    KeyFile(#[from] KeyFileError),
    /// The Redis password's secret could not be read.
    #[error("the Redis password: {0}")]
    Secret(#[from] SecretError),
    /// Redis could not be reached.
    #[error("{0}; set [state] required = false to serve with a store of this process's own")]
    Store(#[from] StoreError),
}

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
    /// Where the store is.
    pub backend: StateBackend,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            key_file: None,
            expiry: DEFAULT_EXPIRY,
            inline_bytes: DEFAULT_INLINE_BYTES,
            store_bytes: DEFAULT_STORE_BYTES,
            backend: StateBackend::Memory,
        }
    }
}

impl StateConfig {
    /// The sealing options it says over `store` (from [`Self::store`]),
    /// with its key file read.
    pub fn options(&self, store: Arc<dyn StateStore>) -> Result<StateOptions, StateError> {
        let mut options = StateOptions::new()
            .expiry(self.expiry)
            .inline_bytes(self.inline_bytes)
            .store(store);
        if let Some(path) = &self.key_file {
            options = options.key_file(path)?;
        }
        Ok(options)
    }

    /// The store it names, reached (the Redis password read from
    /// `secrets`); and, when Redis could not be reached but is not
    /// required, why the store is this process's own. The store is shared
    /// with other replicas when the backend is Redis and no reason is
    /// given.
    pub async fn store(
        &self,
        secrets: &BTreeMap<String, SecretSource>,
    ) -> Result<(Arc<dyn StateStore>, Option<String>), StateError> {
        let memory = || Arc::new(MemoryStore::new(self.store_bytes)) as Arc<dyn StateStore>;
        let StateBackend::Redis(redis) = &self.backend else {
            return Ok((memory(), None));
        };
        let password = match &redis.password_secret {
            Some(name) => Some(read_secret(name, secrets)?),
            None => None,
        };
        match connect(redis, password).await {
            Ok(store) => Ok((store, None)),
            Err(error) if !redis.required => {
                let why = format!(
                    "{error}: serving with a state store of this process's own, so paused runs and sessions stay on this replica"
                );
                Ok((memory(), Some(why)))
            }
            Err(error) => Err(error.into()),
        }
    }
}

fn read_secret(
    name: &str,
    secrets: &BTreeMap<String, SecretSource>,
) -> Result<String, SecretError> {
    let secret = match secrets.get(name) {
        Some(SecretSource::Env(var)) => Secret::from_env(name, var)?,
        Some(SecretSource::File(path)) => Secret::from_file(name, path)?,
        None => unreachable!("the parser checks password_secret names a secret"),
    };
    Ok(secret.value().to_string())
}

#[cfg(feature = "redis")]
async fn connect(
    redis: &RedisConfig,
    password: Option<String>,
) -> Result<Arc<dyn StateStore>, StoreError> {
    let mut options = crate::state::RedisOptions::new(&redis.url)
        .prefix(&redis.prefix)
        .timeout(redis.timeout);
    if let Some(password) = password {
        options = options.password(password);
    }
    let store = crate::state::RedisStore::connect(&options).await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redis"))]
async fn connect(_: &RedisConfig, _: Option<String>) -> Result<Arc<dyn StateStore>, StoreError> {
    Err(StoreError::Failed {
        message: "this build of toolcage has no Redis (the `redis` feature)".to_string(),
        source: None,
    })
}

/// `[state]`, its key file resolved by `resolve`, its Redis password's
/// secret one of `secrets`.
pub(super) fn state(
    raw: &RawState,
    resolve: &Resolve,
    secrets: &BTreeMap<String, SecretSource>,
) -> Result<StateConfig, ConfigError> {
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
    config.backend = backend(raw, secrets)?;
    Ok(config)
}

/// `[state] backend` and the keys of its Redis.
fn backend(
    raw: &RawState,
    secrets: &BTreeMap<String, SecretSource>,
) -> Result<StateBackend, ConfigError> {
    match raw.backend.as_deref().unwrap_or("memory") {
        "memory" => {
            let redis_key = [
                ("url", raw.url.is_some()),
                ("prefix", raw.prefix.is_some()),
                ("timeout_ms", raw.timeout_ms.is_some()),
                ("password_secret", raw.password_secret.is_some()),
                ("required", raw.required.is_some()),
            ]
            .into_iter()
            .find(|(_, set)| *set);
            match redis_key {
                Some((key, _)) => Err(ConfigError::invalid(
                    format!("state.{key}"),
                    "is Redis's: set backend = \"redis\" too",
                )),
                None => Ok(StateBackend::Memory),
            }
        }
        "redis" => redis(raw, secrets).map(StateBackend::Redis),
        other => Err(ConfigError::invalid(
            "state.backend",
            format!("`{other}` is not a backend: \"memory\" or \"redis\""),
        )),
    }
}

fn redis(
    raw: &RawState,
    secrets: &BTreeMap<String, SecretSource>,
) -> Result<RedisConfig, ConfigError> {
    let url = match raw.url.as_deref() {
        Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => url,
        Some(_) => {
            return Err(ConfigError::invalid(
                "state.url",
                "must begin with redis:// or rediss://",
            ));
        }
        None => {
            return Err(ConfigError::invalid(
                "state.url",
                "is needed with backend = \"redis\"",
            ));
        }
    };
    if let Some(name) = &raw.password_secret
        && !secrets.contains_key(name)
    {
        return Err(ConfigError::invalid(
            "state.password_secret",
            format!("names no secret: add [secrets.{name}]"),
        ));
    }
    let timeout = match raw.timeout_ms {
        Some(0) => {
            return Err(ConfigError::invalid(
                "state.timeout_ms",
                "must be greater than 0",
            ));
        }
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_REDIS_TIMEOUT,
    };
    Ok(RedisConfig {
        url: url.to_string(),
        password_secret: raw.password_secret.clone(),
        prefix: raw
            .prefix
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_string()),
        timeout,
        required: raw.required.unwrap_or(true),
    })
}
