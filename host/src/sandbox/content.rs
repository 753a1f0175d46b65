//! A component's bytes and their hash, read safely from files.
//!
//! Threat model: a tools directory may hold anything. A file is read only if
//! it is a regular file (a FIFO or a device could block or never end), and at
//! most [`MAX_COMPONENT_BYTES`]. Its hash is what the compile cache and a
//! live registry's change detection go by; a file that changes between the
//! hash and the read is refused, so what is compiled is what was hashed.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// The largest component file loaded.
pub const MAX_COMPONENT_BYTES: u64 = 128 << 20;

/// Why a component's bytes cannot be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ContentError {
    /// The file cannot be opened or read.
    #[error(transparent)]
    Read(#[from] std::io::Error),
    /// Not a regular file: a FIFO or a device could block or never end.
    #[error("not a regular file")]
    NotAFile,
    /// Larger than [`MAX_COMPONENT_BYTES`].
    #[error("larger than {MAX_COMPONENT_BYTES} bytes")]
    TooLarge,
    /// The file changed between being hashed and being read.
    #[error("the file changed after it was hashed")]
    Changed,
    /// The thread hashing or reading it failed.
    #[error("the {what} thread failed")]
    Thread {
        /// `hashing` or `reading`.
        what: &'static str,
        /// How.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// A component's content: its BLAKE3 hash (hex), which the compile caches
/// and a live registry's change detection go by, and its bytes, or the file
/// holding them. A file's bytes are read into memory only if they must be
/// compiled: when a compile cache holds the component, the file is only
/// hashed as it streams by. A bundled component also carries the code the
/// build compiled it to.
pub(crate) struct Content {
    pub hash: String,
    bytes: Option<Cow<'static, [u8]>>,
    file: Option<PathBuf>,
    /// Compiled by this binary's build (see `codegen`), if it was.
    pub precompiled: Option<Precompiled>,
}

/// A component's code as the build compiled it: wasmtime's serialized form
/// and the [`engine_key`](super::codegen::engine_key) of the engine that
/// made it.
#[derive(Clone, Copy)]
pub(crate) struct Precompiled {
    pub code: &'static [u8],
    pub engine_key: &'static str,
}

impl Content {
    /// Hashes `bytes`, off the async executor (a big component takes
    /// milliseconds).
    pub async fn of_bytes(bytes: Vec<u8>) -> Result<Self, ContentError> {
        tokio::task::spawn_blocking(move || Content {
            hash: blake3::hash(&bytes).to_hex().to_string(),
            bytes: Some(Cow::Owned(bytes)),
            file: None,
            precompiled: None,
        })
        .await
        .map_err(|source| ContentError::Thread {
            what: "hashing",
            source,
        })
    }

    /// Hashes the component file at `path` (see [`open_component_file`]),
    /// off the async executor.
    pub async fn of_file(path: &Path) -> Result<Self, ContentError> {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let mut file = open_component_file(&path)?;
            let mut hasher = blake3::Hasher::new();
            hasher.update_reader(&mut file)?;
            check_size(file.limit())?;
            Ok(Content {
                hash: hasher.finalize().to_hex().to_string(),
                bytes: None,
                file: Some(path),
                precompiled: None,
            })
        })
        .await
        .map_err(|source| ContentError::Thread {
            what: "reading",
            source,
        })?
    }

    /// A component built into the binary: its bytes, their hash, and its
    /// code when the build compiled it, all from the build (nothing is
    /// copied or hashed at run time).
    #[cfg(feature = "bundled-tools")]
    pub(crate) fn bundled(
        bytes: &'static [u8],
        hash: &'static str,
        precompiled: Option<Precompiled>,
    ) -> Self {
        Content {
            hash: hash.to_string(),
            bytes: Some(Cow::Borrowed(bytes)),
            file: None,
            precompiled,
        }
    }

    /// The bytes. A file is read now (blocking), and refused
    /// ([`ContentError::Changed`]) if it no longer has the content that
    /// was hashed.
    pub fn into_bytes(self) -> Result<Cow<'static, [u8]>, ContentError> {
        use std::io::Read;
        if let Some(bytes) = self.bytes {
            return Ok(bytes);
        }
        let path = self.file.expect("content has bytes or a file");
        let mut file = open_component_file(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        check_size(file.limit())?;
        if blake3::hash(&bytes).to_hex().as_str() != self.hash {
            return Err(ContentError::Changed);
        }
        Ok(Cow::Owned(bytes))
    }
}

/// Opens a component file for reading, at most [`MAX_COMPONENT_BYTES`] and
/// one more byte (see [`check_size`]). Only a regular file is read (a FIFO
/// or a device could block or never end); the check is made on the open
/// file (opened without blocking), so a FIFO swapped in under the name
/// cannot hang the load.
fn open_component_file(path: &Path) -> Result<std::io::Take<std::fs::File>, ContentError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(ContentError::NotAFile);
    }
    if metadata.len() > MAX_COMPONENT_BYTES {
        return Err(ContentError::TooLarge);
    }
    Ok(file.take(MAX_COMPONENT_BYTES + 1))
}

/// Refuses a file read through [`open_component_file`] that had more than
/// [`MAX_COMPONENT_BYTES`]: the read left nothing of its limit.
fn check_size(limit_left: u64) -> Result<(), ContentError> {
    match limit_left {
        0 => Err(ContentError::TooLarge),
        _ => Ok(()),
    }
}
