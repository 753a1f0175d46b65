//! The content store: every manifest, component and signature `toolcage
//! pull` fetched, in files named by their SHA-256 digest
//! (`blobs/sha256/<hex>`), written once (to a temporary file, then renamed)
//! and hashed again whenever read.
//!
//! Threat model: as for the compile cache, whoever can write to the store
//! could change what is loaded next, so the directory must be the current
//! user's and nobody else's to write; a blob is read only if it is a regular
//! file of this user that nobody else can write, and only if it still
//! hashes to its name.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Digest, OciError};
use crate::sandbox::content::MAX_COMPONENT_BYTES;

/// A content-addressed directory of pulled blobs.
#[derive(Debug, Clone)]
pub struct Store {
    /// Canonical.
    dir: PathBuf,
    user: u32,
}

impl Store {
    /// Opens the store at `dir`, creating it owner-only if it does not
    /// exist. Refuses a directory another user owns; makes one its group or
    /// others could write to owner-only.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Store, OciError> {
        let dir = dir.into();
        let (canonical, user) = crate::sandbox::cache::owned_dir(&dir, "the content store")
            .map_err(|reason| OciError::Store {
                path: dir.clone(),
                reason: crate::sandbox::text::with_causes(&reason),
            })?;
        Ok(Store {
            dir: canonical,
            user,
        })
    }

    /// The directory, canonical.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob `digest` is kept.
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join("blobs").join("sha256").join(digest.hex())
    }

    /// The blob `digest`, if the store holds it intact. `Ok(None)` when it
    /// is absent; an error when it is there but is not this user's own
    /// file, or no longer hashes to its digest.
    pub fn read(&self, digest: &Digest) -> Result<Option<Vec<u8>>, String> {
        let path = self.path(digest);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        if !meta.is_file() || meta.uid() != self.user || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is not a file of this user's own that only this user can write",
                path.display()
            ));
        }
        if meta.len() > MAX_COMPONENT_BYTES {
            return Err(format!("{} is larger than any component", path.display()));
        }
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let actual = Digest::of(&bytes);
        if &actual != digest {
            return Err(format!(
                "{} changed on disk: it hashes to {actual}, not to {digest}",
                path.display()
            ));
        }
        Ok(Some(bytes))
    }

    /// Whether the store holds `digest` intact.
    pub fn holds(&self, digest: &Digest) -> bool {
        matches!(self.read(digest), Ok(Some(_)))
    }

    /// Stores `bytes`, which must hash to `digest`.
    pub fn write(&self, digest: &Digest, bytes: &[u8]) -> Result<(), OciError> {
        let refuse = |reason: String| OciError::Store {
            path: self.dir.clone(),
            reason,
        };
        let actual = Digest::of(bytes);
        if &actual != digest {
            return Err(refuse(format!(
                "refusing to store content hashing to {actual} as {digest}"
            )));
        }
        if self.holds(digest) {
            return Ok(());
        }
        let path = self.path(digest);
        let parent = path.parent().expect("a blob path has a parent");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| refuse(format!("cannot create {}: {e}", parent.display())))?;
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let temporary = parent.join(format!(
            ".{}.{}-{}.tmp",
            digest.hex(),
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temporary)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&temporary, &path)
        })();
        written.map_err(|e| {
            fs::remove_file(&temporary).ok();
            refuse(format!("cannot write {}: {e}", path.display()))
        })
    }
}
