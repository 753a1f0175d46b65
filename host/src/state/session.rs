//! Code mode's sessions: a script's globals kept from one `run_code` to the
//! next under a name the model chooses, in the [`StateStore`].
//!
//! Threat model: the model names sessions, and a caller may be hostile to
//! the others. A session is kept for its caller alone (the key is a digest
//! of the caller, the tool and the name, so no name reaches another's), and
//! is written only by the host, from what the code component saved at the
//! end of a run that was not paused: a client never sends one. Each is
//! bounded in bytes, a caller keeps a bounded number (past which the one
//! idle longest goes), and each expires when idle, so no caller fills the
//! store with sessions. A session is read back only inside the code
//! component's sandbox, so a corrupt one costs its run, never the host.
//!
//! Two runs of one session at once each start from what was saved before
//! them, and the last to end is kept.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{StateStore, StoreError};

/// The largest session kept by default: 4 MiB.
pub const DEFAULT_SESSION_BYTES: usize = 4 << 20;
/// The sessions a caller keeps by default.
pub const DEFAULT_SESSIONS_PER_CALLER: usize = 16;
/// How long an unused session lasts by default: 30 minutes.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// The bounds of code mode's sessions. Default: 4 MiB each, 16 per caller,
/// gone after 30 minutes unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// The largest session kept, in bytes.
    pub bytes: usize,
    /// The most sessions one caller keeps: saving one more drops the one
    /// idle longest.
    pub per_caller: usize,
    /// How long a session lasts after its last save.
    pub idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            bytes: DEFAULT_SESSION_BYTES,
            per_caller: DEFAULT_SESSIONS_PER_CALLER,
            idle: DEFAULT_SESSION_IDLE,
        }
    }
}

/// Code mode's sessions, in a store, under limits.
pub struct ScriptSessions {
    store: Arc<dyn StateStore>,
    limits: SessionLimits,
}

/// Why a session was not saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotSaved {
    /// It is larger than sessions may be.
    #[error("its state is {bytes} bytes, more than a session keeps ({limit} bytes)")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ScriptSessions {
    /// Sessions kept in `store` under `limits`.
    pub fn new(store: Arc<dyn StateStore>, limits: SessionLimits) -> Self {
        ScriptSessions { store, limits }
    }

    /// Its limits.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// The sessions of `caller` (an opaque name: callers with one name
    /// share their sessions).
    pub fn of(self: &Arc<Self>, caller: impl Into<String>) -> SessionScope {
        SessionScope {
            sessions: self.clone(),
            caller: caller.into(),
        }
    }
}

/// One caller's sessions.
#[derive(Clone)]
pub struct SessionScope {
    sessions: Arc<ScriptSessions>,
    caller: String,
}

/// A session as its caller's index lists it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Listed {
    name: String,
    saved_ms: u64,
}

impl SessionScope {
    /// What `tool` last saved under `name`, unless there is none or it
    /// expired.
    pub async fn load(&self, tool: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.sessions.store.get(&self.key(tool, name)).await
    }

    /// Saves `state` for `tool` under `name`, replacing what was there; one
    /// more session than the caller may keep drops the one idle longest.
    pub async fn save(&self, tool: &str, name: &str, state: Vec<u8>) -> Result<(), NotSaved> {
        let limits = self.sessions.limits;
        if state.len() > limits.bytes {
            let (bytes, limit) = (state.len(), limits.bytes);
            return Err(NotSaved::TooLarge { bytes, limit });
        }
        let store = &self.sessions.store;
        store.put(&self.key(tool, name), state, limits.idle).await?;
        let index = self.index_key(tool);
        let mut listed = self.listed(&index).await?;
        let now = now_ms();
        let idle = limits.idle.as_millis() as u64;
        listed.retain(|s| s.name != name && s.saved_ms.saturating_add(idle) > now);
        listed.push(Listed {
            name: name.to_string(),
            saved_ms: now,
        });
        listed.sort_by_key(|s| s.saved_ms);
        let over = listed.len().saturating_sub(limits.per_caller.max(1));
        for dropped in listed.drain(..over) {
            store.delete(&self.key(tool, &dropped.name)).await?;
        }
        let text = serde_json::to_vec(&listed).unwrap_or_default();
        store.put(&index, text, limits.idle).await?;
        Ok(())
    }

    /// The caller's sessions of the index at `key`, oldest first.
    async fn listed(&self, key: &str) -> Result<Vec<Listed>, StoreError> {
        let text = self.sessions.store.get(key).await?;
        Ok(text
            .and_then(|text| serde_json::from_slice(&text).ok())
            .unwrap_or_default())
    }

    fn key(&self, tool: &str, name: &str) -> String {
        format!("session:{}", digest(&[&self.caller, tool, name]))
    }

    fn index_key(&self, tool: &str) -> String {
        format!("sessions:{}", digest(&[&self.caller, tool]))
    }
}

/// A digest of `parts`, each length-prefixed so no two lists meet.
fn digest(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStore;

    fn sessions(limits: SessionLimits) -> Arc<ScriptSessions> {
        let store = Arc::new(MemoryStore::new(1 << 20));
        Arc::new(ScriptSessions::new(store, limits))
    }

    fn block<T>(future: impl Future<Output = T>) -> T {
        futures::executor::block_on(future)
    }

    #[test]
    fn a_session_is_its_callers_and_its_tools() {
        let sessions = sessions(SessionLimits::default());
        let (alice, bob) = (sessions.of("token:a"), sessions.of("token:b"));
        block(alice.save("run_code", "s", b"one".to_vec())).unwrap();
        assert_eq!(
            block(alice.load("run_code", "s")).unwrap().as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(block(bob.load("run_code", "s")).unwrap(), None);
        assert_eq!(block(alice.load("other", "s")).unwrap(), None);
        assert_eq!(block(alice.load("run_code", "t")).unwrap(), None);
    }

    #[test]
    fn a_session_over_its_bound_is_not_saved_and_the_one_before_stays() {
        let limits = SessionLimits {
            bytes: 8,
            ..SessionLimits::default()
        };
        let scope = sessions(limits).of("stdio:1");
        block(scope.save("run_code", "s", b"12345678".to_vec())).unwrap();
        let refused = block(scope.save("run_code", "s", b"123456789".to_vec()));
        assert!(
            matches!(refused, Err(NotSaved::TooLarge { bytes: 9, limit: 8 })),
            "{refused:?}"
        );
        let kept = block(scope.load("run_code", "s")).unwrap();
        assert_eq!(kept.as_deref(), Some(&b"12345678"[..]));
    }

    #[test]
    fn past_its_count_a_caller_loses_the_session_idle_longest() {
        let limits = SessionLimits {
            per_caller: 2,
            ..SessionLimits::default()
        };
        let scope = sessions(limits).of("stdio:1");
        for name in ["a", "b"] {
            block(scope.save("run_code", name, name.as_bytes().to_vec())).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        // `a` is saved again: `b` is now idle longest.
        block(scope.save("run_code", "a", b"a2".to_vec())).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        block(scope.save("run_code", "c", b"c".to_vec())).unwrap();
        let load = |name| block(scope.load("run_code", name)).unwrap();
        assert_eq!(load("a").as_deref(), Some(&b"a2"[..]));
        assert_eq!(load("b"), None, "the one idle longest went");
        assert_eq!(load("c").as_deref(), Some(&b"c"[..]));
    }

    #[test]
    fn an_idle_session_expires() {
        let limits = SessionLimits {
            idle: Duration::from_millis(30),
            ..SessionLimits::default()
        };
        let scope = sessions(limits).of("stdio:1");
        block(scope.save("run_code", "s", b"x".to_vec())).unwrap();
        assert!(block(scope.load("run_code", "s")).unwrap().is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(block(scope.load("run_code", "s")).unwrap(), None);
    }
}
