//! An opt-in, bounded LRU cache of successful results of read-only,
//! idempotent tools.
//!
//! Threat model: a cache hit returns a result without running the tool, so a
//! stale or foreign entry would feed the model wrong data. Only tools whose
//! descriptors claim both `read_only` and `idempotent` are cached, and only
//! their successful results; the key binds the tool name, the arguments in
//! canonical form, the BLAKE3 hash of the component's bytes and the hash of
//! what the operator granted it (limits and mounts), so a changed component,
//! or the same one under other grants, never serves an old entry. What the
//! key cannot bind is the world the tool reads: the files under its mounts may
//! change between calls. That is why caching is off unless the embedder turns
//! it on. Size is bounded by entries and by bytes, so a model cannot grow
//! it without limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::CallResult;
use crate::catalog::table::ToolInfo;

/// A cache key: BLAKE3 of tool name, component hash and canonical arguments.
pub(crate) type Key = [u8; 32];

/// A shared LRU cache of call results. Cloning shares the cache, which can
/// serve any number of calls and [`Runner`](crate::agent::Runner)s.
#[derive(Clone)]
pub struct ResultCache {
    inner: Arc<Mutex<Lru>>,
}

struct Lru {
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    tick: u64,
    entries: HashMap<Key, Cached>,
    /// Keys by last use, oldest first.
    order: BTreeMap<u64, Key>,
}

struct Cached {
    result: CallResult,
    size: usize,
    used: u64,
}

impl ResultCache {
    /// The default number of entries: 256.
    pub const DEFAULT_CAPACITY: usize = 256;
    /// The default byte budget: 64 MiB of outputs, details and logs.
    pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

    /// A cache of at most `capacity` results (0 caches nothing) and
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES) bytes.
    pub fn new(capacity: usize) -> Self {
        ResultCache {
            inner: Arc::new(Mutex::new(Lru {
                capacity,
                max_bytes: Self::DEFAULT_MAX_BYTES,
                bytes: 0,
                tick: 0,
                entries: HashMap::new(),
                order: BTreeMap::new(),
            })),
        }
    }

    /// Bounds the bytes of the cached results' outputs, details and logs:
    /// the least recently used entries are evicted past it, and a result
    /// larger than it is not cached. Default:
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES).
    pub fn max_bytes(self, max_bytes: usize) -> Self {
        {
            let mut lru = self.lock();
            lru.max_bytes = max_bytes;
            lru.evict();
        }
        self
    }

    /// The most entries it holds.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry, for example after the files under the mounts
    /// changed.
    pub fn clear(&self) {
        let mut lru = self.lock();
        lru.entries.clear();
        lru.order.clear();
        lru.bytes = 0;
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cached result for `key`, which becomes the most recently used.
    pub(crate) fn get(&self, key: &Key) -> Option<CallResult> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let entry = lru.entries.get_mut(key)?;
        let previous = std::mem::replace(&mut entry.used, tick);
        let result = entry.result.clone();
        lru.order.remove(&previous);
        lru.order.insert(tick, *key);
        Some(result)
    }

    /// Caches `result` under `key`, evicting the least recently used entries
    /// past the bounds.
    pub(crate) fn insert(&self, key: Key, result: CallResult) {
        let size = result.output.len()
            + result.details.as_ref().map_or(0, |d| d.to_string().len())
            + result.logs.stdout.len()
            + result.logs.stderr.len();
        let mut lru = self.lock();
        if lru.capacity == 0 || size > lru.max_bytes {
            return;
        }
        lru.tick += 1;
        let used = lru.tick;
        if let Some(old) = lru.entries.insert(key, Cached { result, size, used }) {
            lru.order.remove(&old.used);
            lru.bytes -= old.size;
        }
        lru.order.insert(used, key);
        lru.bytes += size;
        lru.evict();
    }
}

impl Lru {
    fn evict(&mut self) {
        while self.entries.len() > self.capacity || self.bytes > self.max_bytes {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(entry) = self.entries.remove(&key) {
                self.bytes -= entry.size;
            }
        }
    }
}

impl Default for ResultCache {
    /// A cache of [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) entries and
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES) bytes.
    fn default() -> Self {
        ResultCache::new(Self::DEFAULT_CAPACITY)
    }
}

impl std::fmt::Debug for ResultCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lru = self.lock();
        f.debug_struct("ResultCache")
            .field("len", &lru.entries.len())
            .field("capacity", &lru.capacity)
            .field("bytes", &lru.bytes)
            .field("max_bytes", &lru.max_bytes)
            .finish()
    }
}

/// Whether calls of `tool` may be cached: it claims to be read-only and
/// idempotent.
pub(crate) fn cacheable(tool: &ToolInfo) -> bool {
    tool.descriptor.hints.read_only && tool.descriptor.hints.idempotent
}

/// The key of a call of `tool` with `arguments`.
pub(crate) fn key(tool: &ToolInfo, arguments: &Value) -> Key {
    let mut hasher = blake3::Hasher::new();
    // Tool names and hex hashes hold no NUL, so the fields cannot run together.
    hasher.update(tool.descriptor.name.as_bytes());
    hasher.update(b"\0");
    hasher.update(tool.component_hash.as_bytes());
    hasher.update(b"\0");
    hasher.update(tool.grants_hash.as_bytes());
    hasher.update(b"\0");
    let mut canonical = String::new();
    write_canonical(arguments, &mut canonical);
    hasher.update(canonical.as_bytes());
    *hasher.finalize().as_bytes()
}

/// `value` as compact JSON with every object's keys sorted (by bytes), so
/// that `{"a":1,"b":2}` and `{"b":2,"a":1}` are one key. The workspace
/// enables serde_json's `preserve_order`, so this is done explicitly.
/// Numbers keep their text: `1` and `1.0` are different keys (a miss, never
/// a wrong hit).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(value: &Value) -> String {
        let mut out = String::new();
        write_canonical(value, &mut out);
        out
    }

    fn result(output: &str) -> CallResult {
        CallResult {
            tool: "t".into(),
            call_id: "c".into(),
            is_error: false,
            error_kind: None,
            output: output.into(),
            details: None,
            duration: std::time::Duration::ZERO,
            fuel_used: 0,
            peak_memory_bytes: 0,
            slot_wait: std::time::Duration::ZERO,
            net: crate::sandbox::net::NetUsage::default(),
            logs: crate::sandbox::outcome::Logs::default(),
            nested: Vec::new(),
            nested_usage: None,
        }
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a = json!({ "b": [ { "y": 1, "x": "\"q\"" } ], "a": null });
        let b = json!({ "a": null, "b": [ { "x": "\"q\"", "y": 1 } ] });
        assert_eq!(canonical(&a), r#"{"a":null,"b":[{"x":"\"q\"","y":1}]}"#);
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&json!([1, 2])), canonical(&json!([2, 1])));
    }

    #[test]
    fn least_recently_used_goes_first() {
        let cache = ResultCache::new(2);
        cache.insert([1; 32], result("one"));
        cache.insert([2; 32], result("two"));
        assert_eq!(cache.get(&[1; 32]).unwrap().output, "one");
        cache.insert([3; 32], result("three"));
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get(&[2; 32]).is_none(),
            "2 was the least recently used"
        );
        assert!(cache.get(&[1; 32]).is_some());
        assert!(cache.get(&[3; 32]).is_some());
        cache.insert([3; 32], result("three again"));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&[3; 32]).unwrap().output, "three again");
        cache.clear();
        assert!(cache.is_empty());
    }

    #[test]
    fn the_byte_budget_bounds_the_cache() {
        let cache = ResultCache::new(10).max_bytes(10);
        cache.insert([1; 32], result("12345"));
        cache.insert([2; 32], result("12345"));
        assert_eq!(cache.len(), 2);
        cache.insert([3; 32], result("1"));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&[1; 32]).is_none());
        cache.insert([4; 32], result("this is more than ten bytes"));
        assert!(cache.get(&[4; 32]).is_none(), "too large to cache");
        assert_eq!(ResultCache::new(0).capacity(), 0);
        let empty = ResultCache::new(0);
        empty.insert([1; 32], result("x"));
        assert!(empty.is_empty());
    }
}
