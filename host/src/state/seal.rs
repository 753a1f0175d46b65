//! Sealed state: what a paused run hands its client to bring back.
//!
//! Threat model: the client holds the state between a run's attempts, and
//! the client may be hostile, or another caller that saw it. A state is
//! XChaCha20-Poly1305 under the server's key (a fresh random nonce each),
//! so it can be neither read nor altered nor forged without the key. Inside
//! it names its call (a digest of the tool and its arguments), its caller
//! (a bearer token's hash over HTTP, the server process over stdio) and its
//! expiry, each checked before anything runs. It answers one retry: the
//! store keeps a mark for each unused state (or, for a state too large to
//! travel, its body, the client holding only a handle), which opening it
//! takes away. A stolen state therefore lets its thief do nothing its
//! owner's retry could not, and only as that owner, once, before expiry.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::{MemoryStore, StateStore, StoreError};

/// How long a state lasts by default: 10 minutes.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(600);
/// The largest state a client carries by default: 64 KiB.
pub const DEFAULT_INLINE_BYTES: usize = 64 << 10;

/// What a sealed state starts with.
const PREFIX: &str = "tc1.";
/// The associated data every state is sealed with.
const AAD: &[u8] = b"toolcage state 1";
const NONCE_BYTES: usize = 24;

/// How states are sealed. Default: a key generated for this process (a
/// state is good only on the server that made it, until it restarts), an
/// expiry of [`DEFAULT_EXPIRY`], states up to [`DEFAULT_INLINE_BYTES`]
/// carried by the client and larger ones held in a [`MemoryStore`] of its
/// default size, which also keeps the marks of unused states.
#[derive(Clone, Default)]
pub struct StateOptions {
    key: Option<[u8; 32]>,
    expiry: Option<Duration>,
    inline_bytes: Option<usize>,
    store: Option<Arc<dyn StateStore>>,
}

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// It could not be read.
    #[error("the state key file {path} could not be read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It holds something other than a key.
    #[error(
        "the state key file {path} holds no key: write 32 random bytes, or 64 hex digits (`openssl rand -hex 32`)"
    )]
    NotAKey {
        /// The file.
        path: PathBuf,
    },
}

impl StateOptions {
    /// Options with every default.
    pub fn new() -> Self {
        StateOptions::default()
    }

    /// Seals under `key`: servers given the same key (replicas) open each
    /// other's states.
    pub fn key(mut self, key: [u8; 32]) -> Self {
        self.key = Some(key);
        self
    }

    /// Seals under the key in the file at `path`: 32 bytes, or 64 hex
    /// digits (with any whitespace around them).
    pub fn key_file(self, path: &Path) -> Result<Self, KeyFileError> {
        let bytes = std::fs::read(path).map_err(|source| KeyFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let not_a_key = || KeyFileError::NotAKey {
            path: path.to_path_buf(),
        };
        let key = match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(key) => key,
            Err(_) => hex_key(std::str::from_utf8(&bytes).map_err(|_| not_a_key())?.trim())
                .ok_or_else(not_a_key)?,
        };
        Ok(self.key(key))
    }

    /// How long a state lasts after it is sealed.
    pub fn expiry(mut self, expiry: Duration) -> Self {
        self.expiry = Some(expiry);
        self
    }

    /// The largest state the client carries; a larger one is held in the
    /// store, the client carrying a handle.
    pub fn inline_bytes(mut self, bytes: usize) -> Self {
        self.inline_bytes = Some(bytes);
        self
    }

    /// Keeps large states and the marks of unused ones in `store` (one
    /// that replicas share, for them to take each other's states).
    pub fn store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The sealer.
    pub fn build(self) -> Sealer {
        let key = self.key.unwrap_or_else(random);
        Sealer {
            cipher: XChaCha20Poly1305::new(&key.into()),
            expiry: self.expiry.unwrap_or(DEFAULT_EXPIRY),
            inline_bytes: self.inline_bytes.unwrap_or(DEFAULT_INLINE_BYTES),
            store: self
                .store
                .unwrap_or_else(|| Arc::new(MemoryStore::default())),
            process: hex(&random::<16>()),
        }
    }
}

/// 64 hex digits as a key.
fn hex_key(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut key = [0; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Random bytes from the operating system.
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    getrandom::fill(&mut bytes).expect("the operating system gives random bytes");
    bytes
}

/// Seals and opens states (see the module's threat model).
pub struct Sealer {
    cipher: XChaCha20Poly1305,
    expiry: Duration,
    inline_bytes: usize,
    store: Arc<dyn StateStore>,
    /// This process, as a caller over stdio.
    process: String,
}

impl Default for Sealer {
    fn default() -> Self {
        StateOptions::new().build()
    }
}

/// What a state is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The call: a digest of its tool and arguments.
    pub call: &'a str,
    /// Who made it.
    pub caller: &'a str,
}

/// Why a state brought back was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// Not a sealed state at all.
    #[error("it is not a state this server made")]
    Malformed,
    /// Its seal does not hold.
    #[error(
        "it was altered, or sealed under another key (another server's, or this one's before it restarted)"
    )]
    Altered,
    /// Another caller's.
    #[error("it belongs to another caller")]
    OtherCaller,
    /// Another call's.
    #[error("it is for another call (another tool, or other arguments)")]
    OtherCall,
    /// Past its expiry.
    #[error("it expired: a state lasts {0} s")]
    Expired(u64),
    /// Brought back before.
    #[error("it was used already: a state answers one retry")]
    Used,
    /// A handle the store does not have.
    #[error(
        "the server no longer holds it: its handle is unknown to the state store (used already, expired, or lost when the server restarted)"
    )]
    UnknownHandle,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What is sealed.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    call: String,
    caller: String,
    /// Unix time, in milliseconds.
    expires_ms: u64,
    /// The state, when the client carries it; else the store holds it.
    #[serde(default)]
    body: Option<String>,
}

fn now_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |since| since.as_millis() as u64)
}

impl Sealer {
    /// This server process, as the caller of a request over stdio.
    pub fn process(&self) -> &str {
        &self.process
    }

    /// How long a state lasts.
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    /// The store it keeps large states and used nonces in.
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// `body` sealed for `binding`: carried whole up to the inline bound,
    /// else held in the store under the state's nonce.
    pub async fn seal(&self, binding: Binding<'_>, body: &str) -> Result<String, StoreError> {
        let nonce = random::<NONCE_BYTES>();
        let name = hex(&nonce);
        let inline = body.len() <= self.inline_bytes;
        let (key, kept) = match inline {
            true => (format!("unused:{name}"), Vec::new()),
            false => (format!("held:{name}"), body.as_bytes().to_vec()),
        };
        self.store.put(&key, kept, self.expiry).await?;
        let envelope = Envelope {
            call: binding.call.to_string(),
            caller: binding.caller.to_string(),
            expires_ms: now_ms() + self.expiry.as_millis() as u64,
            body: inline.then(|| body.to_string()),
        };
        let plain = serde_json::to_vec(&envelope).expect("an envelope serializes");
        let payload = Payload {
            msg: &plain,
            aad: AAD,
        };
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), payload)
            .expect("XChaCha20-Poly1305 seals any length a state has");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Ok(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The state `sealed` holds, when it is this server's, for `binding`,
    /// unexpired and unused; it is used from then on.
    pub async fn open(&self, binding: Binding<'_>, sealed: &str) -> Result<String, Refused> {
        let bytes = sealed
            .strip_prefix(PREFIX)
            .and_then(|text| URL_SAFE_NO_PAD.decode(text).ok())
            .filter(|bytes| bytes.len() > NONCE_BYTES)
            .ok_or(Refused::Malformed)?;
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let payload = Payload {
            msg: sealed,
            aad: AAD,
        };
        let plain = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .map_err(|_| Refused::Altered)?;
        let envelope: Envelope = serde_json::from_slice(&plain).map_err(|_| Refused::Altered)?;
        if envelope.caller != binding.caller {
            return Err(Refused::OtherCaller);
        }
        if envelope.call != binding.call {
            return Err(Refused::OtherCall);
        }
        if envelope.expires_ms <= now_ms() {
            return Err(Refused::Expired(self.expiry.as_secs()));
        }
        let name = hex(nonce);
        match envelope.body {
            Some(body) => match self.store.take(&format!("unused:{name}")).await? {
                Some(_) => Ok(body),
                None => Err(Refused::Used),
            },
            None => {
                let held = self.store.take(&format!("held:{name}")).await?;
                let held = held.ok_or(Refused::UnknownHandle)?;
                String::from_utf8(held).map_err(|_| Refused::Altered)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: Binding<'static> = Binding {
        call: "call",
        caller: "me",
    };

    fn flipped(sealed: &str, at: usize) -> String {
        let mut bytes = URL_SAFE_NO_PAD
            .decode(sealed.strip_prefix(PREFIX).unwrap())
            .unwrap();
        bytes[at] ^= 1;
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    #[tokio::test]
    async fn a_state_opens_once_for_its_call_and_caller() {
        let sealer = Sealer::default();
        let sealed = sealer.seal(HERE, "the state").await.unwrap();
        assert!(!sealed.contains("the state"), "it is not readable");
        assert_eq!(sealer.open(HERE, &sealed).await.unwrap(), "the state");
        assert!(matches!(
            sealer.open(HERE, &sealed).await,
            Err(Refused::Used)
        ));
    }

    #[tokio::test]
    async fn an_altered_forged_or_foreign_state_is_refused_saying_why() {
        let sealer = Sealer::default();
        let sealed = sealer.seal(HERE, "s").await.unwrap();
        for at in [0, NONCE_BYTES, NONCE_BYTES + 5] {
            let refused = sealer.open(HERE, &flipped(&sealed, at)).await.unwrap_err();
            assert!(matches!(refused, Refused::Altered), "{at}: {refused}");
        }
        for forged in ["", "tc1.", "tc1.!!", "{\"call\":\"call\"}", "tc1.AAAA"] {
            let refused = sealer.open(HERE, forged).await.unwrap_err();
            assert!(matches!(refused, Refused::Malformed), "{forged}: {refused}");
        }
        // Another server's key.
        let other = Sealer::default();
        assert!(matches!(
            other.open(HERE, &sealed).await,
            Err(Refused::Altered)
        ));
        let them = Binding {
            caller: "them",
            ..HERE
        };
        assert!(matches!(
            sealer.open(them, &sealed).await,
            Err(Refused::OtherCaller)
        ));
        let elsewhere = Binding {
            call: "other",
            ..HERE
        };
        assert!(matches!(
            sealer.open(elsewhere, &sealed).await,
            Err(Refused::OtherCall)
        ));
        // The refusals did not use it up.
        assert_eq!(sealer.open(HERE, &sealed).await.unwrap(), "s");
    }

    #[tokio::test]
    async fn a_state_is_refused_past_its_expiry() {
        let sealer = StateOptions::new()
            .expiry(Duration::from_millis(30))
            .build();
        let sealed = sealer.seal(HERE, "s").await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let refused = sealer.open(HERE, &sealed).await.unwrap_err();
        assert!(matches!(refused, Refused::Expired(0)), "{refused}");
    }

    #[tokio::test]
    async fn a_large_state_is_held_by_the_store_and_its_handle_opens_it_once() {
        let store = Arc::new(MemoryStore::new(1 << 20));
        let sealer = StateOptions::new()
            .inline_bytes(100)
            .store(store.clone())
            .build();
        let body = "x".repeat(1000);
        let sealed = sealer.seal(HERE, &body).await.unwrap();
        assert!(sealed.len() < 300, "a handle: {} bytes", sealed.len());
        assert!(store.bytes() > 1000);
        assert_eq!(sealer.open(HERE, &sealed).await.unwrap(), body);
        assert_eq!(store.bytes(), 0, "taken");
        let refused = sealer.open(HERE, &sealed).await.unwrap_err();
        assert!(matches!(refused, Refused::UnknownHandle), "{refused}");
        // Replicas that share the key and the store open each other's.
        let replica = |store: Arc<MemoryStore>| {
            StateOptions::new()
                .key([7; 32])
                .inline_bytes(100)
                .store(store)
                .build()
        };
        let sealed = replica(store.clone()).seal(HERE, &body).await.unwrap();
        assert_eq!(replica(store).open(HERE, &sealed).await.unwrap(), body);
    }

    #[test]
    fn a_key_file_holds_32_bytes_or_64_hex_digits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, [9u8; 32]).unwrap();
        assert_eq!(
            StateOptions::new().key_file(&path).unwrap().key,
            Some([9; 32])
        );
        std::fs::write(&path, format!("{}\n", "0a".repeat(32))).unwrap();
        assert_eq!(
            StateOptions::new().key_file(&path).unwrap().key,
            Some([10; 32])
        );
        for wrong in ["short", &"zz".repeat(32), &"0a".repeat(33)] {
            std::fs::write(&path, wrong).unwrap();
            let refused = StateOptions::new().key_file(&path).err().unwrap();
            assert!(refused.to_string().contains("holds no key"), "{refused}");
        }
        let missing = StateOptions::new().key_file(&dir.path().join("none"));
        assert!(
            missing
                .err()
                .unwrap()
                .to_string()
                .contains("could not be read")
        );
    }
}
