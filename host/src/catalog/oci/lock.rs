//! `toolcage.lock`: what `toolcage pull` resolved each reference to, next to
//! the config. Loading reads it and never the registry.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Digest, OciError};

/// The lock file's name, next to the config file.
pub const LOCK_FILE_NAME: &str = "toolcage.lock";

/// The lock file's version.
const VERSION: u32 = 1;

const HEADER: &str = "\
# toolcage.lock: what `toolcage pull` resolved each oci:// reference to.
# `toolcage serve`, `call` and `list` load these digests from the content
# store and never ask a registry. Commit it; change it with `toolcage pull`.
";

/// The references `toolcage pull` resolved, each to the digests it checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    version: u32,
    /// One entry per reference, sorted by reference.
    #[serde(default, rename = "component")]
    pub entries: Vec<LockEntry>,
}

/// What one reference resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    /// The reference as the config or the command line gave it.
    pub reference: String,
    /// The manifest's digest.
    pub digest: Digest,
    /// The component's digest (the manifest's one layer).
    pub component: Digest,
    /// The component's size in bytes.
    pub size: u64,
    /// The digest of the signature manifest that was checked, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Digest>,
    /// The key it was checked with (the trust key's file, as configured),
    /// if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// When it was pulled (RFC 3339, UTC).
    pub pulled: String,
}

impl Lockfile {
    /// An empty lock.
    pub fn new() -> Lockfile {
        Lockfile {
            version: VERSION,
            entries: Vec::new(),
        }
    }

    /// Reads the lock at `path`; a missing file is an empty lock.
    pub fn read(path: &Path) -> Result<Lockfile, OciError> {
        let refuse = |reason: String| OciError::Lock {
            path: path.to_path_buf(),
            reason,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lockfile::new()),
            Err(e) => return Err(refuse(e.to_string())),
        };
        let lock: Lockfile = toml::from_str(&text).map_err(|e| refuse(e.to_string()))?;
        if lock.version != VERSION {
            return Err(refuse(format!(
                "version {} is not one this toolcage reads ({VERSION})",
                lock.version
            )));
        }
        Ok(lock)
    }

    /// The entry for `reference`, if any.
    pub fn get(&self, reference: &str) -> Option<&LockEntry> {
        self.entries.iter().find(|e| e.reference == reference)
    }

    /// Adds or replaces the entry for its reference.
    pub fn set(&mut self, entry: LockEntry) {
        self.entries.retain(|e| e.reference != entry.reference);
        self.entries.push(entry);
        self.entries.sort_by(|a, b| a.reference.cmp(&b.reference));
    }

    /// Whether `other` resolves every reference as this one does (times
    /// aside).
    pub fn same_resolution(&self, other: &Lockfile) -> bool {
        let key = |lock: &Lockfile| {
            lock.entries
                .iter()
                .map(|e| {
                    (
                        e.reference.clone(),
                        e.digest.clone(),
                        e.component.clone(),
                        e.signature.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        key(self) == key(other)
    }

    /// The lock as text.
    pub fn to_text(&self) -> String {
        format!(
            "{HEADER}\n{}",
            toml::to_string(self).expect("a lock serializes")
        )
    }

    /// Writes the lock to `path` at once (a temporary file renamed over it),
    /// so that a watcher never reads half of it.
    pub fn write(&self, path: &Path) -> Result<(), OciError> {
        let refuse = |reason: String| OciError::Lock {
            path: path.to_path_buf(),
            reason,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map_or("toolcage.lock".into(), |n| n.to_string_lossy());
        let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        std::fs::write(&temporary, self.to_text())
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| {
                std::fs::remove_file(&temporary).ok();
                refuse(e.to_string())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_unknown_keys() {
        let mut lock = Lockfile::new();
        lock.set(LockEntry {
            reference: "oci://r.example/a:1".into(),
            digest: Digest::of(b"m"),
            component: Digest::of(b"c"),
            size: 1,
            signature: None,
            signed_by: None,
            pulled: "2026-11-24T00:00:00Z".into(),
        });
        let text = lock.to_text();
        assert!(text.contains("[[component]]"), "{text}");
        assert_eq!(toml::from_str::<Lockfile>(&text).unwrap(), lock);
        assert!(toml::from_str::<Lockfile>(&format!("{text}extra = 1\n")).is_err());
    }
}
