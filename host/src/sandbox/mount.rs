//! Directories an operator lends to tools.
//!
//! Threat model: a tool may try to read or write anything it can name. The
//! only filesystem a component sees is the set of mounts its operator granted
//! (through the config file, the command line or the embedding API; never
//! through a tool or a model). Inside the sandbox, WASI resolves every path
//! against these directories with capability-based lookups (cap-std): `..`
//! past a mount's root, absolute paths outside every mount, and symlinks
//! pointing outside all fail. A read-only mount refuses every write, create,
//! rename and delete.
//!
//! A mount lends the directory its host path named when the registry was
//! built: the path is resolved (symlinks followed) once, the directory held
//! open, and every call reaches it through that handle. Nothing on disk
//! changes what later calls see: not a tool renaming the directory and
//! planting a symlink in its place, nor anyone else.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a mount cannot be granted. Each names the mount (but
/// [`Spec`](MountError::Spec), which names what was given) and says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The command-line form is not `HOST:GUEST[:ro|rw]`.
    #[error("invalid mount: `{spec}`: {problem} (expected HOST:GUEST[:ro|rw])")]
    Spec {
        /// What was given.
        spec: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The guest path is not absolute, or has `.` or `..` in it.
    #[error("cannot mount {host} at {guest}: the guest path must be absolute, without `.` or `..`")]
    GuestPath {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
    },
    /// The host path is not a directory.
    #[error("cannot mount {host} at {guest}: not a directory")]
    NotADirectory {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
    },
    /// The host directory cannot be opened, or its handle cannot be lent.
    #[error("cannot mount {host} at {guest}")]
    Open {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The host path passes through a symlink inside another mount that is
    /// read-write: a tool granted that mount could have planted it.
    #[error(
        "cannot mount {host} at {guest}: its host path passes through the symlink {symlink} inside the read-write mount of {writable_host} (at {writable_guest}), which a tool could have planted; name the directory it points to instead"
    )]
    Redirected {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
        /// The symlink on the way.
        symlink: PathBuf,
        /// The read-write mount's host directory.
        writable_host: PathBuf,
        /// The read-write mount's guest path.
        writable_guest: String,
    },
    /// A read-write mount holds the disk cache of compiled components.
    #[error(
        "cannot mount {host} at {guest}: it is read-write and holds the compile cache {cache}, whose native code toolcage runs outside the sandbox; lend a directory that does not contain it, or keep the cache elsewhere (XDG_CACHE_HOME) or turn it off (TOOLCAGE_NO_CACHE=1)"
    )]
    HoldsCache {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
        /// The cache directory.
        cache: PathBuf,
    },
}

/// A host directory made visible to tools at a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    host: PathBuf,
    guest: String,
    writable: bool,
}

impl Mount {
    /// Lends `host` read-only at `guest` (an absolute guest path such as
    /// `/workspace`; repeated and trailing slashes are dropped).
    pub fn read_only(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        Mount {
            host: host.into(),
            guest: normalize(&guest.into()),
            writable: false,
        }
    }

    /// Lends `host` read-write at `guest`.
    pub fn read_write(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        Mount {
            writable: true,
            ..Mount::read_only(host, guest)
        }
    }

    /// Parses the command-line form `HOST:GUEST[:ro|rw]`; read-only unless it
    /// ends in `:rw`.
    pub fn parse(spec: &str) -> Result<Self, MountError> {
        let invalid = |problem| MountError::Spec {
            spec: spec.to_string(),
            problem,
        };
        let (rest, writable) = match spec.rsplit_once(':') {
            Some((rest, "rw")) => (rest, true),
            Some((rest, "ro")) => (rest, false),
            _ => (spec, false),
        };
        let (host, guest) = rest
            .rsplit_once(':')
            .ok_or_else(|| invalid("missing the guest path"))?;
        if host.is_empty() {
            return Err(invalid("empty host directory"));
        }
        let mount = Mount {
            host: host.into(),
            guest: normalize(guest),
            writable,
        };
        mount.check_guest_path()?;
        Ok(mount)
    }

    /// The host directory.
    pub fn host(&self) -> &Path {
        &self.host
    }

    /// Where tools see it.
    pub fn guest(&self) -> &str {
        &self.guest
    }

    /// Whether tools may change it.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Checks the mount can be granted (an absolute guest path and an
    /// existing host directory) and opens its directory, to be held for the
    /// registry's life. Run when a registry is built, so a typo fails at
    /// start-up rather than inside every call.
    pub(crate) fn open(&self) -> Result<HeldDir, MountError> {
        self.check_guest_path()?;
        let not_a_directory = || MountError::NotADirectory {
            host: self.host.clone(),
            guest: self.guest.clone(),
        };
        // O_DIRECTORY: a FIFO or a device is refused by the open itself,
        // which would otherwise wait for a writer (or talk to the device).
        let dir = {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&self.host)
        };
        let dir = dir.map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) => not_a_directory(),
            _ => self.unopenable(e.into()),
        })?;
        match dir.metadata() {
            Ok(meta) if meta.is_dir() => Ok(HeldDir {
                dir: Arc::new(dir),
                host: self.host.clone(),
            }),
            Ok(_) => Err(not_a_directory()),
            Err(e) => Err(self.unopenable(e.into())),
        }
    }

    /// This mount cannot be opened or lent, because of `source`.
    pub(crate) fn unopenable(
        &self,
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> MountError {
        MountError::Open {
            host: self.host.clone(),
            guest: self.guest.clone(),
            source,
        }
    }

    fn check_guest_path(&self) -> Result<(), MountError> {
        let ok = self.guest.starts_with('/')
            && !self
                .guest
                .split('/')
                .any(|part| part == ".." || part == ".");
        if ok {
            Ok(())
        } else {
            Err(MountError::GuestPath {
                host: self.host.clone(),
                guest: self.guest.clone(),
            })
        }
    }
}

/// Refuses a mount whose host path is, or passes through, a symlink inside
/// the tree of another mount that is read-write: a tool granted that mount
/// could have planted the symlink to redirect this one anywhere. Run before
/// the mounts are opened, when no tool of this registry has run yet.
pub(crate) fn refuse_redirections(mounts: &[&Mount]) -> Result<(), MountError> {
    let writable: Vec<(PathBuf, &Mount)> = mounts
        .iter()
        .filter(|m| m.writable)
        .filter_map(|m| Some((m.host.canonicalize().ok()?, *m)))
        .collect();
    for mount in mounts {
        let Ok(absolute) = std::path::absolute(&mount.host) else {
            continue;
        };
        let mut prefix = PathBuf::new();
        for part in absolute.components() {
            prefix.push(part);
            if !prefix.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
                continue;
            }
            let Some(dir) = prefix.parent().and_then(|p| p.canonicalize().ok()) else {
                continue;
            };
            let planted_in = writable
                .iter()
                .find(|(root, other)| dir.starts_with(root) && *other != *mount);
            if let Some((_, other)) = planted_in {
                return Err(MountError::Redirected {
                    host: mount.host.clone(),
                    guest: mount.guest.clone(),
                    symlink: prefix,
                    writable_host: other.host.clone(),
                    writable_guest: other.guest.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Refuses a read-write mount whose host directory contains `cache`, the
/// disk cache of compiled components: a tool could write an entry there,
/// native code that toolcage would run outside the sandbox.
pub(crate) fn refuse_writable_cache(mounts: &[&Mount], cache: &Path) -> Result<(), MountError> {
    for mount in mounts.iter().filter(|m| m.writable) {
        if mount
            .host
            .canonicalize()
            .is_ok_and(|root| cache.starts_with(root))
        {
            return Err(MountError::HoldsCache {
                host: mount.host.clone(),
                guest: mount.guest.clone(),
                cache: cache.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// A mount's directory, opened once.
#[derive(Debug, Clone)]
pub(crate) struct HeldDir {
    dir: Arc<std::fs::File>,
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    host: PathBuf,
}

impl HeldDir {
    /// A path that opens this very directory, whatever has happened to its
    /// host path since: on Linux the process's own handle to it, elsewhere
    /// the host path.
    pub fn path(&self) -> PathBuf {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.host.clone()
        }
    }

    /// Whether the directory was removed from the host (it has no name left
    /// in any directory).
    pub fn is_removed(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.dir.metadata().is_ok_and(|meta| meta.nlink() == 0)
    }
}

/// `//a//b/` → `/a/b`, so that two spellings of a guest path are one path.
fn normalize(guest: &str) -> String {
    let parts: Vec<&str> = guest.split('/').filter(|part| !part.is_empty()).collect();
    let joined = parts.join("/");
    if guest.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_paths_are_normalized() {
        assert_eq!(Mount::read_only("/a", "/workspace/").guest(), "/workspace");
        assert_eq!(Mount::parse("/a://w//x/:rw").unwrap().guest(), "/w/x");
        assert_eq!(Mount::read_only("/a", "/").guest(), "/");
    }

    #[test]
    fn parses_modes() {
        assert_eq!(Mount::parse("/a:/b").unwrap(), Mount::read_only("/a", "/b"));
        assert_eq!(
            Mount::parse("/a:/b:ro").unwrap(),
            Mount::read_only("/a", "/b")
        );
        assert_eq!(
            Mount::parse("/a:/b:rw").unwrap(),
            Mount::read_write("/a", "/b")
        );
        assert_eq!(
            Mount::parse("./src:/workspace").unwrap(),
            Mount::read_only("./src", "/workspace")
        );
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(Mount::parse("/a").is_err());
        assert!(Mount::parse(":/b").is_err());
        assert!(Mount::parse("/a:relative").is_err());
        assert!(Mount::parse("/a:/b/../c").is_err());
    }

    #[test]
    fn open_requires_a_directory() {
        assert!(
            Mount::read_only("/definitely/not/here", "/x")
                .open()
                .is_err()
        );
        assert!(
            Mount::read_only(env!("CARGO_MANIFEST_DIR"), "/x")
                .open()
                .is_ok()
        );
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert!(Mount::read_only(file, "/x").open().is_err());
    }

    #[test]
    fn a_fifo_is_refused_at_once_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo failed");
        // Without a writer, an open for reading would block for ever.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            sender
                .send(Mount::read_only(&fifo, "/m").open().map(|_| ()))
                .ok();
        });
        let opened = receiver
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("opening a FIFO mount returned at once");
        let error = opened.unwrap_err().to_string();
        assert!(error.contains("not a directory"), "{error}");
    }
}
