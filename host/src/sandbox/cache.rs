//! The disk cache of compiled components, so that a new process does not
//! compile again what an earlier one compiled.
//!
//! Each entry is a component as `wasmtime` serializes it, uncompressed, in a
//! file named by the BLAKE3 hash of the component's bytes and a hash of the
//! engine's compilation settings (target, flags, tunables, wasmtime's
//! version). A hit maps the file instead of reading it: nothing is
//! decompressed or copied, code and the initial memory images are paged in
//! as they are touched, and processes loading the same tool share those
//! pages. Where mapping is unsafe or refused (a network or FUSE file system,
//! where another host may remove a mapped file; a `noexec` mount), the entry
//! is read into memory instead. An entry that does not load (truncated,
//! damaged) is compiled again and replaced; entries of other engine settings
//! are never read, and age out.
//!
//! Threat model: an entry is native code that toolcage runs as it is,
//! without checking it, so whoever can write to the directory can make
//! toolcage run anything. The directory must be the current user's: one
//! owned by another user is refused, and one that its group or others could
//! write to is made owner-only. An entry is used only if it is a regular
//! file (not a symlink) of the current user that nobody else can write.
//! The directory's parents must not let other users replace it; and no
//! read-write mount may contain it (`RegistryBuilder::build` refuses one),
//! or a tool could write an entry. Entries are written to a temporary file
//! and renamed into place, never changed in place (a mapped file that shrank
//! would crash the process). The cache is kept under its size limit by
//! removing the entries used least recently.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use wasmtime::component::Component;

/// Why a directory cannot be held as the current user's own (the disk
/// cache's, or another that holds what toolcage runs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnedDirError {
    /// It does not exist and cannot be created.
    #[error("cannot create it")]
    Create(#[source] std::io::Error),
    /// It cannot be resolved or inspected.
    #[error(transparent)]
    Inspect(std::io::Error),
    /// Another user owns it, who could change what toolcage runs.
    #[error("owned by user {owner}, not by this user ({user}), who would run the code it holds")]
    ForeignOwner {
        /// Its owner.
        owner: u32,
        /// The current user.
        user: u32,
    },
    /// Its group or others can write to it, and it cannot be made
    /// owner-only.
    #[error("others can write to it (mode {mode:o}) and it cannot be made owner-only")]
    Unprotectable {
        /// Its permission bits.
        mode: u32,
        /// Why it could not be changed.
        #[source]
        source: std::io::Error,
    },
}

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
    /// Canonical: no symlink in it.
    dir: PathBuf,
    max_bytes: u64,
    /// Whether entries are mapped (a local file system) or read.
    map: bool,
    user: u32,
}

/// Opens `dir` as a directory only the current user can write to, creating
/// it (owner-only) if it does not exist: refuses one another user owns (that
/// user could change what toolcage runs), and makes it owner-only if its
/// group or others could write to it. Returns it canonical, and the user.
/// `what` names it in the log.
pub(crate) fn owned_dir(dir: &Path, what: &str) -> Result<(PathBuf, u32), OwnedDirError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(OwnedDirError::Create)?;
    let canonical = dir.canonicalize().map_err(OwnedDirError::Inspect)?;
    let meta = fs::metadata(&canonical).map_err(OwnedDirError::Inspect)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let user = unsafe { libc::geteuid() };
    if meta.uid() != user {
        return Err(OwnedDirError::ForeignOwner {
            owner: meta.uid(),
            user,
        });
    }
    if meta.mode() & 0o022 != 0 {
        fs::set_permissions(&canonical, fs::Permissions::from_mode(0o700)).map_err(|source| {
            OwnedDirError::Unprotectable {
                mode: meta.mode() & 0o777,
                source,
            }
        })?;
        tracing::info!(dir = %canonical.display(), "{what} was writable by others: made it owner-only");
    }
    Ok((canonical, user))
}

impl DiskCache {
    /// Opens `dir`, creating it (owner-only) if it does not exist. Refuses
    /// a directory that is not the current user's own, and makes it
    /// owner-only if its group or others could write to it.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, OwnedDirError> {
        let (canonical, user) = owned_dir(dir, "the compile cache")?;
        Ok(DiskCache {
            map: maps_safely(&canonical),
            dir: canonical,
            max_bytes,
            user,
        })
    }

    /// The directory, canonical.
    pub fn dir(&self) -> &Path {
        &self.dir
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
        let meta = fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.uid() != self.user || meta.mode() & 0o022 != 0 {
            tracing::warn!(entry = %path.display(), "not a file of this user's own: compiling again");
            return None;
        }
        let read = || {
            let bytes = fs::read(&path)?;
            // SAFETY: as below.
            #[allow(unsafe_code)]
            unsafe {
                Component::deserialize(engine, bytes)
            }
        };
        // SAFETY: entries are written only by `store`, complete before they
        // are renamed into place and never changed after, in a directory
        // only this user can write to (checked in `open` and above).
        #[allow(unsafe_code)]
        let loaded = match self.map {
            true => unsafe { Component::deserialize_file(engine, &path) }.or_else(|mapping| {
                // A `noexec` mount refuses executable mappings: read the
                // entry instead, rather than compile each time.
                read().map_err(|_| mapping)
            }),
            false => read(),
        };
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
            Ok(true) => {
                self.evict(&self.entry(hash, engine_key));
                self.load(engine, engine_key, hash).unwrap_or(component)
            }
            Ok(false) => component,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "cannot cache a compiled component: {e}");
                component
            }
        }
    }

    /// Writes the entry; `false` when it is larger than the whole cache.
    fn write(&self, engine_key: &str, hash: &str, component: &Component) -> Result<bool, String> {
        let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
        if bytes.len() as u64 > self.max_bytes {
            return Ok(false);
        }
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
        written.map(|()| true).map_err(|e| {
            let _ = fs::remove_file(&temporary);
            e.to_string()
        })
    }

    /// Removes the entries used least recently, except `kept` (the one just
    /// written), until the cache is within its limit, and temporary files
    /// abandoned by a process that died.
    fn evict(&self, kept: &Path) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        let mut total = 0;
        for entry in dir.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let used = meta.modified().unwrap_or(now);
            if path.extension().is_some_and(|e| e == "tmp") {
                if now.duration_since(used).unwrap_or_default() > ABANDONED_AFTER {
                    let _ = fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == EXTENSION) && meta.is_file() {
                total += meta.len();
                if path != kept {
                    entries.push((used, meta.len(), path));
                }
            }
        }
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

/// Whether files under `dir` can be mapped safely: on a network or FUSE
/// file system another host (or the file system's process) can remove a
/// file that is mapped here, and touching its pages then kills the process
/// (SIGBUS). Decided by the file system type of the mount holding `dir`, in
/// `/proc/self/mountinfo`; unknown counts as local.
fn maps_safely(dir: &Path) -> bool {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let mut best: Option<(usize, &str)> = None;
    for line in mountinfo.lines() {
        // `id parent major:minor root mount-point options... - type source super-options`
        let Some((fields, rest)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(point), Some(kind)) = (fields.split(' ').nth(4), rest.split(' ').next()) else {
            continue;
        };
        let point = unescape_mount_path(point);
        if dir.starts_with(&point) && best.is_none_or(|(len, _)| point.len() >= len) {
            best = Some((point.len(), kind));
        }
    }
    let Some((_, kind)) = best else { return true };
    let remote = [
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "afs",
        "virtiofs",
    ];
    !(remote.contains(&kind) || kind.starts_with("fuse"))
}

/// A path of `/proc/self/mountinfo`, where space, tab, newline and
/// backslash are written as octal escapes (`\040`).
fn unescape_mount_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let digits = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(digits, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_and_local_directories_are_mapped() {
        assert_eq!(unescape_mount_path(r"/a\040b\134c\9"), r"/a b\c\9");
        let dir = tempfile::tempdir().expect("a temporary directory");
        assert!(maps_safely(&dir.path().canonicalize().unwrap()));
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = DiskCache::open(dir.path(), 250).unwrap();
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
        cache.evict(&cache.entry("new", "k"));
        assert!(!cache.entry("old", "k").exists());
        assert!(cache.entry("middle", "k").exists());
        assert!(cache.entry("new", "k").exists());
        assert!(!abandoned.exists());
    }
}
