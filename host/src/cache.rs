//! The disk cache of compiled components, so that a new process does not
//! compile again what an earlier one compiled.
//!
//! Each entry is a component as `wasmtime` serializes it, uncompressed, in a
//! file named by the BLAKE3 hash of the component's bytes and a hash of the
//! engine's compilation settings (target, flags, wasmtime's version). A hit
//! maps the file instead of reading it: nothing is decompressed or copied,
//! code and the initial memory images are paged in as they are touched, and
//! processes loading the same tool share those pages. A file that does not
//! load (truncated, another wasmtime) is compiled again and replaced.
//!
//! Threat model: an entry is native code that toolcage maps and runs as it
//! is, without checking it, so whoever can write to the directory can make
//! toolcage run anything. The directory is created readable by its owner
//! only, and a directory owned by another user, or that its group or others
//! can write to, is refused. Entries are written to a temporary file and
//! renamed into place, never changed in place (a mapped file that shrank
//! would crash the process): a reader sees a whole entry or none. The cache
//! is kept under its size limit by removing the entries used least recently.

use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use wasmtime::component::Component;

use crate::Error;

/// How much the cache holds by default before it removes the entries used
/// least recently.
pub const DEFAULT_DISK_CACHE_BYTES: u64 = 2 << 30;

/// An entry's modification time is its last use, refreshed at most this
/// often so that loading does not write each time.
const TOUCH_AFTER: Duration = Duration::from_secs(3600);

/// A temporary file this old was left by a process that died writing it.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

const EXTENSION: &str = "cwasm";

/// A directory of compiled components.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl DiskCache {
    /// Opens `dir`, creating it (owner-only) if it does not exist. Refuses
    /// a directory that is not the current user's own, or that its group or
    /// others can write to.
    pub fn open(dir: PathBuf, max_bytes: u64) -> Result<Self, Error> {
        let refused = |reason: String| Error::DiskCache {
            path: dir.clone(),
            reason,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| refused(format!("cannot create it: {e}")))?;
        let meta = fs::metadata(&dir).map_err(|e| refused(e.to_string()))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let user = unsafe { libc::geteuid() };
        if meta.uid() != user {
            return Err(refused(format!(
                "owned by user {}, not by this user ({user}), who would run the code it holds",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refused(format!(
                "its group or others can write to it (mode {:o}), and so change the code it holds",
                meta.mode() & 0o777
            )));
        }
        Ok(DiskCache { dir, max_bytes })
    }

    /// The key of the engine's compiled code: its compilation settings.
    pub fn engine_key(engine: &wasmtime::Engine) -> String {
        let mut hasher = Blake3Hasher(blake3::Hasher::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.finalize().to_hex()[..16].to_string()
    }

    fn entry(&self, hash: &str, engine_key: &str) -> PathBuf {
        self.dir.join(format!("{hash}-{engine_key}.{EXTENSION}"))
    }

    /// The component whose bytes hash to `hash`, compiled by an engine with
    /// `engine_key`, when the cache holds it.
    pub fn load(
        &self,
        engine: &wasmtime::Engine,
        engine_key: &str,
        hash: &str,
    ) -> Option<Component> {
        let path = self.entry(hash, engine_key);
        if !path.is_file() {
            return None;
        }
        // SAFETY: entries are written only by `store`, complete before they
        // are renamed into place and never changed after, in a directory
        // only this user can write to (checked in `open`).
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, &path) }.or_else(|mapping| {
            // A directory mounted `noexec` cannot be mapped executable: read
            // the entry into memory instead, rather than compile each time.
            let bytes = fs::read(&path).map_err(|_| mapping)?;
            // SAFETY: as above.
            unsafe { Component::deserialize(engine, bytes) }
        });
        match loaded {
            Ok(component) => {
                touch(&path);
                Some(component)
            }
            Err(e) => {
                tracing::debug!(entry = %path.display(), "compiling again: {e:#}");
                None
            }
        }
    }

    /// Stores `component` under `hash`, and returns it loaded back from the
    /// cache (so its code is shared with other processes) when that works.
    pub fn store(
        &self,
        engine: &wasmtime::Engine,
        engine_key: &str,
        hash: &str,
        component: Component,
    ) -> Component {
        match self.write(engine_key, hash, &component) {
            Ok(()) => {
                self.evict();
                self.load(engine, engine_key, hash).unwrap_or(component)
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "cannot cache a compiled component: {e}");
                component
            }
        }
    }

    fn write(&self, engine_key: &str, hash: &str, component: &Component) -> Result<(), String> {
        let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let temporary = self.dir.join(format!(
            ".{hash}-{engine_key}.{}-{}.tmp",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_data()))
            .and_then(|()| fs::rename(&temporary, self.entry(hash, engine_key)));
        written.map_err(|e| {
            let _ = fs::remove_file(&temporary);
            e.to_string()
        })
    }

    /// Removes the entries used least recently until the cache is within
    /// its limit, and temporary files abandoned by a process that died.
    fn evict(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        for entry in dir.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let used = meta.modified().unwrap_or(now);
            if path.extension().is_some_and(|e| e == "tmp") {
                if now.duration_since(used).unwrap_or_default() > ABANDONED_AFTER {
                    let _ = fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == EXTENSION) && meta.is_file() {
                entries.push((used, meta.len(), path));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                tracing::debug!(entry = %path.display(), "removed from the compile cache");
                total -= len;
            }
        }
    }
}

/// Marks an entry as just used, when its last mark is old.
fn touch(path: &Path) {
    let now = SystemTime::now();
    let stale = fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|used| now.duration_since(used).unwrap_or_default() > TOUCH_AFTER);
    if stale && let Ok(file) = File::open(path) {
        let _ = file.set_modified(now);
    }
}

/// `std::hash::Hasher` over BLAKE3: the same input gives the same key in
/// every process (the standard library's hashers promise no such thing).
struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let hash = self.0.finalize();
        u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = DiskCache::open(dir.path().to_path_buf(), 250).unwrap();
        let now = SystemTime::now();
        for (name, age) in [("old", 30), ("middle", 20), ("new", 10)] {
            let path = cache.entry(name, "k");
            fs::write(&path, [0u8; 100]).unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(now - Duration::from_secs(age))
                .unwrap();
        }
        let abandoned = dir.path().join(".x.tmp");
        fs::write(&abandoned, b"half").unwrap();
        File::options()
            .write(true)
            .open(&abandoned)
            .unwrap()
            .set_modified(now - 2 * ABANDONED_AFTER)
            .unwrap();
        cache.evict();
        assert!(!cache.entry("old", "k").exists());
        assert!(cache.entry("middle", "k").exists());
        assert!(cache.entry("new", "k").exists());
        assert!(!abandoned.exists());
    }
}
