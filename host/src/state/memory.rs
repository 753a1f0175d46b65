//! The state store in the process's memory: the default, for one server.
//!
//! Threat model: clients decide how many runs pause and how large their
//! states are. The store holds at most its bound in bytes (keys and values);
//! a value that does not fit evicts the values nearest their expiry first,
//! so a flood of pauses costs the oldest states, never the host's memory.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{StateStore, StoreError, StoreFuture};

/// What a [`MemoryStore`] holds by default: 64 MiB.
pub const DEFAULT_STORE_BYTES: usize = 64 << 20;

/// A [`StateStore`] in this process's memory, bounded in bytes; what it
/// holds is lost with the process.
pub struct MemoryStore {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, (Vec<u8>, Instant)>,
    /// The keys by expiry: the first is the first to go.
    by_expiry: BTreeSet<(Instant, String)>,
    bytes: usize,
}

impl Default for MemoryStore {
    /// A store of [`DEFAULT_STORE_BYTES`].
    fn default() -> Self {
        MemoryStore::new(DEFAULT_STORE_BYTES)
    }
}

impl MemoryStore {
    /// A store holding at most `limit` bytes of keys and values.
    pub fn new(limit: usize) -> Self {
        MemoryStore {
            limit,
            inner: Mutex::default(),
        }
    }

    /// The bytes of keys and values it holds now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put_now(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<(), StoreError> {
        let size = key.len() + value.len();
        if size > self.limit {
            let limit = self.limit;
            return Err(StoreError::TooLarge { bytes: size, limit });
        }
        let mut inner = self.lock();
        inner.remove(key);
        while inner.bytes + size > self.limit {
            let Some((_, oldest)) = inner.by_expiry.first().cloned() else {
                break;
            };
            inner.remove(&oldest);
        }
        let expires = Instant::now() + ttl;
        inner.by_expiry.insert((expires, key.to_string()));
        inner.entries.insert(key.to_string(), (value, expires));
        inner.bytes += size;
        Ok(())
    }

    fn take_now(&self, key: &str) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        inner.expire(Instant::now());
        inner.remove(key)
    }

    fn get_now(&self, key: &str) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        inner.expire(Instant::now());
        inner.entries.get(key).map(|(value, _)| value.clone())
    }
}

impl Inner {
    fn remove(&mut self, key: &str) -> Option<Vec<u8>> {
        let (value, expires) = self.entries.remove(key)?;
        self.by_expiry.remove(&(expires, key.to_string()));
        self.bytes -= key.len() + value.len();
        Some(value)
    }

    /// Drops what expired by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some((expires, key)) = self.by_expiry.first().cloned() {
            if expires > now {
                break;
            }
            self.remove(&key);
        }
    }
}

impl StateStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(std::future::ready(Ok(self.get_now(key))))
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.put_now(key, value, ttl)))
    }

    fn take<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(std::future::ready(Ok(self.take_now(key))))
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.lock().remove(key);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_value_is_got_until_taken_and_taken_once() {
        let store = MemoryStore::new(1 << 10);
        store.put("k", b"v".to_vec(), MINUTE).await.unwrap();
        assert_eq!(store.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(store.take("k").await.unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(store.take("k").await.unwrap(), None);
        assert_eq!(store.get("k").await.unwrap(), None);
        assert_eq!(store.bytes(), 0);
        store.put("k", b"v".to_vec(), MINUTE).await.unwrap();
        store.delete("k").await.unwrap();
        assert_eq!(store.get("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_value_is_gone_at_its_expiry() {
        let store = MemoryStore::new(1 << 10);
        store
            .put("k", b"v".to_vec(), Duration::from_millis(20))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(store.take("k").await.unwrap(), None);
        assert_eq!(store.bytes(), 0);
    }

    #[tokio::test]
    async fn the_bound_is_kept_by_evicting_what_expires_first() {
        // Three values of 1 + 30 bytes fill 93 of 100.
        let store = MemoryStore::new(100);
        for (key, ttl) in [("a", 3), ("b", 1), ("c", 2)] {
            let ttl = MINUTE * ttl;
            store.put(key, vec![0; 30], ttl).await.unwrap();
        }
        assert_eq!(store.bytes(), 93);
        store.put("d", vec![0; 30], MINUTE * 4).await.unwrap();
        assert_eq!(store.get("b").await.unwrap(), None, "b expired first");
        assert!(store.get("a").await.unwrap().is_some());
        assert!(store.get("c").await.unwrap().is_some());
        assert_eq!(store.bytes(), 93);
        // Replacing a value counts it once.
        store.put("d", vec![0; 10], MINUTE).await.unwrap();
        assert_eq!(store.bytes(), 73);
        // A value larger than the whole store is refused, saying so.
        let refused = store.put("e", vec![0; 100], MINUTE).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "101 bytes are more than the state store holds (100 bytes)"
        );
        assert_eq!(store.bytes(), 73, "and nothing was evicted for it");
    }
}
