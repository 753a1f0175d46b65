//! What outlives one call: the state a paused run carries through its
//! client between its attempts ([`seal`]), and code mode's sessions
//! ([`session`]), kept in a [`StateStore`].
//!
//! Threat model: a state is written by the host, but it comes back from
//! the client, which may be the model's or an attacker's. Sealing makes it
//! unreadable and unforgeable by anyone without the server's key, binds it
//! to its call and its caller, ends it at its expiry, and lets it answer
//! one retry. The store holds what the client does not: the states too
//! large to travel, and the record of which states are still unused. It is
//! bounded in bytes, so no client can fill the host's memory with pauses.

mod memory;
#[cfg(feature = "redis")]
pub mod redis;
pub mod seal;
pub mod session;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use memory::{DEFAULT_STORE_BYTES, MemoryStore};
#[cfg(feature = "redis")]
pub use redis::{RedisOptions, RedisStore};
pub use seal::{Sealer, StateOptions};
pub use session::{ScriptSessions, SessionLimits, SessionScope};

/// How long a Redis command may take by default: 1 s.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// What every Redis key begins with by default.
pub const DEFAULT_REDIS_PREFIX: &str = "toolcage:";

/// What a [`StateStore`] answers, later.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where state outlives a call: bytes under a key, each with an expiry.
/// Every operation is atomic on its key, so that replicas sharing a store
/// (the next backend: Redis) agree on who took a value.
pub trait StateStore: Send + Sync {
    /// The value at `key`, unless it is absent or expired.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>>;
    /// Keeps `value` at `key` until `ttl` has passed, replacing any value
    /// there.
    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, ()>;
    /// Takes the value at `key` away: of callers taking one key at once,
    /// one gets the value and the rest `None`.
    fn take<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>>;
    /// Removes the value at `key`, if any.
    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()>;
}

/// Why a [`StateStore`] could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The value is larger than the whole store may hold.
    #[error("{bytes} bytes are more than the state store holds ({limit} bytes)")]
    TooLarge {
        /// The value's size.
        bytes: usize,
        /// What the store holds in all.
        limit: usize,
    },
    /// The store could not be reached or failed.
    #[error("the state store failed: {message}")]
    Failed {
        /// What failed.
        message: String,
        /// Its cause.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl StoreError {
    /// `what` failed with `source`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn failed(
        what: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Failed {
            message: format!("{what}: {source}"),
            source: Some(Box::new(source)),
        }
    }

    /// `what` did not answer within `after`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn timeout(what: &str, after: Duration) -> Self {
        StoreError::Failed {
            message: format!("{what} did not answer within {} ms", after.as_millis()),
            source: None,
        }
    }
}
