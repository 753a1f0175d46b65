//! The state store in Redis: one store for replicas, so that a paused run's
//! retry, a session's next run and a used state's refusal work on whichever
//! replica a balancer picks.
//!
//! Threat model: Redis is the operator's, reached over the network, and
//! may be slow, gone or restarted empty. Every command has a timeout
//! ([`RedisOptions::timeout`], 1 s by default), so a lost Redis is a
//! [`StoreError`] the call reports, never a call that hangs; the
//! connection is remade with backoff. Every key has an expiry, so nothing
//! stays for ever, and carries the deployment's prefix, so deployments
//! sharing a Redis do not meet. A take is one `GETDEL`: of replicas taking
//! one key at once, one gets it. What Redis holds: paused states (sealed,
//! unreadable without the server's key), sessions (a script's globals,
//! in the clear) and, when the tasks are shared, tasks (their results, in
//! the clear): give Redis a password and, off the machine, TLS
//! (`rediss://`).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{DEFAULT_REDIS_PREFIX, DEFAULT_REDIS_TIMEOUT, StateStore, StoreError, StoreFuture};

/// Where and how to reach Redis. Default: no password, keys prefixed
/// [`DEFAULT_REDIS_PREFIX`], [`DEFAULT_REDIS_TIMEOUT`] for connecting and
/// for each command.
#[derive(Clone)]
pub struct RedisOptions {
    url: String,
    password: Option<String>,
    prefix: String,
    timeout: Duration,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &self.url())
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisOptions {
    /// Redis at `url` (`redis://host:port/db` or `rediss://…` for TLS).
    pub fn new(url: impl Into<String>) -> Self {
        RedisOptions {
            url: url.into(),
            password: None,
            prefix: DEFAULT_REDIS_PREFIX.to_string(),
            timeout: DEFAULT_REDIS_TIMEOUT,
        }
    }

    /// Authenticates with `password` (kept out of the URL and of logs).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Begins every key with `prefix`, one per deployment.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Gives connecting and each command at most `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The URL without any password in it, as errors name it.
    pub fn url(&self) -> String {
        match self.url.split_once("://") {
            Some((scheme, rest)) => match rest.split_once('@') {
                Some((_, host)) => format!("{scheme}://…@{host}"),
                None => self.url.clone(),
            },
            None => self.url.clone(),
        }
    }
}

/// A [`StateStore`] in Redis, shared by every server given the same
/// options.
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: String,
    timeout: Duration,
}

impl RedisStore {
    /// Connects to Redis as `options` say, and checks it answers.
    pub async fn connect(options: &RedisOptions) -> Result<RedisStore, StoreError> {
        let url = options.url();
        let failed = |e: redis::RedisError| StoreError::failed(&format!("Redis at {url}"), e);
        let mut info = redis::IntoConnectionInfo::into_connection_info(options.url.as_str())
            .map_err(failed)?;
        if let Some(password) = &options.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info).map_err(failed)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let connect = ConnectionManager::new_with_config(client, config);
        let connection = tokio::time::timeout(options.timeout, connect)
            .await
            .map_err(|_| StoreError::timeout(&format!("Redis at {url}"), options.timeout))?
            .map_err(failed)?;
        let store = RedisStore {
            connection,
            prefix: options.prefix.clone(),
            timeout: options.timeout,
        };
        let ping = store.run::<String>(redis::cmd("PING")).await;
        ping.map_err(|e| StoreError::failed(&format!("Redis at {url}"), e))?;
        Ok(store)
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Runs `command`, within the timeout.
    async fn run<T: redis::FromRedisValue>(&self, command: redis::Cmd) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        let answer = tokio::time::timeout(self.timeout, command.query_async(&mut connection));
        match answer.await {
            Ok(answer) => answer.map_err(|e| StoreError::failed("Redis", e)),
            Err(_) => Err(StoreError::timeout("Redis", self.timeout)),
        }
    }
}

impl StateStore for RedisStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let mut command = redis::cmd("GET");
            command.arg(self.key(key));
            self.run(command).await
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut command = redis::cmd("SET");
            let ms = ttl.as_millis().clamp(1, u64::MAX as u128) as u64;
            command.arg(self.key(key)).arg(value).arg("PX").arg(ms);
            self.run(command).await
        })
    }

    fn take<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let mut command = redis::cmd("GETDEL");
            command.arg(self.key(key));
            self.run(command).await
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut command = redis::cmd("DEL");
            command.arg(self.key(key));
            self.run::<u64>(command).await.map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_url_is_never_shown() {
        let options = RedisOptions::new("redis://:hunter2@127.0.0.1:6379/0").password("p");
        assert_eq!(options.url(), "redis://…@127.0.0.1:6379/0");
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("\"p\""),
            "{shown}"
        );
    }
}
