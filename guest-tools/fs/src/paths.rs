//! The path policy every file tool follows.
//!
//! - Paths are guest paths and must be **absolute**. A relative path is an
//!   error that lists the mounted directories: the sandbox's working directory
//!   is `/`, which is usually not mounted, so resolving against it would only
//!   produce confusing "not found" errors.
//! - `.` and `..` are resolved lexically (`/workspace/src/../README.md` is
//!   `/workspace/README.md`), because the sandbox refuses a `..` that passes
//!   through a mount's root, even to come back.
//! - A path must lie inside a mounted directory, and the error says which
//!   directories are mounted. `/` itself is accepted by the tools that walk
//!   trees (`list_dir`, `glob`, `grep`), which read it as "every mount".
//! - Walks never follow symlinks, and the sandbox refuses any symlink that
//!   leads outside its mount.

use std::io;

/// The mounted directories as sorted, normalized absolute paths, or `None`
/// when not running as a component (native tests), where every absolute path
/// exists as usual.
pub fn mounts() -> Option<&'static [String]> {
    #[cfg(target_arch = "wasm32")]
    {
        use std::sync::OnceLock;
        static MOUNTS: OnceLock<Vec<String>> = OnceLock::new();
        let mounts = MOUNTS.get_or_init(|| {
            // The descriptors are fresh handles, closed when dropped here;
            // std keeps its own for the actual file access.
            let mut mounts: Vec<String> = wasip2::filesystem::preopens::get_directories()
                .into_iter()
                .map(|(_descriptor, name)| normalize(&format!("/{name}")))
                .collect();
            mounts.sort();
            mounts.dedup();
            mounts
        });
        Some(mounts.as_slice())
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        None
    }
}

/// Checks and normalizes a path argument under the policy above.
pub fn resolve(path: &str) -> Result<String, String> {
    resolve_in(path, mounts())
}

/// [`resolve`] against an explicit list of mounts (`None`: no restriction).
pub fn resolve_in(path: &str, mounts: Option<&[String]>) -> Result<String, String> {
    if path.is_empty() {
        return Err(format!(
            "The path is empty. Pass an absolute path inside a mounted directory. {}",
            describe_mounts(mounts)
        ));
    }
    if !path.starts_with('/') {
        // `workspace/src` most likely means `/workspace/src` when that is
        // mounted; otherwise suggest the path under the first mount.
        let rooted = normalize(&format!("/{path}"));
        let shown = crate::names::escape(path);
        let example = match mounts {
            Some(mounts) if mounts.iter().any(|m| is_within(&rooted, m)) => rooted,
            Some([mount, ..]) => normalize(&format!("{mount}/{path}")),
            _ => format!("/workspace/{path}"),
        };
        return Err(format!(
            "`{shown}` is a relative path, but paths must be absolute, such as `{}`. {}",
            crate::names::escape(&example),
            describe_mounts(mounts)
        ));
    }
    let normalized = normalize(path);
    match mounts {
        Some(mounts) if normalized != "/" && !mounts.iter().any(|m| is_within(&normalized, m)) => {
            Err(format!(
                "`{}` is outside the mounted directories, so it does not exist in this \
                 sandbox. {}",
                crate::names::escape(&normalized),
                describe_mounts(Some(mounts))
            ))
        }
        _ => Ok(normalized),
    }
}

/// [`resolve`] for a path that must name a file: refuses the sandbox root,
/// which exists only as the list of mounts.
pub fn resolve_file(path: &str) -> Result<String, String> {
    let resolved = resolve(path)?;
    match mounts() {
        Some(mounts) if resolved == "/" && !mounts.iter().any(|m| m == "/") => Err(format!(
            "`/` is the sandbox root, not a file. Use list_dir with path / to see the mounted \
             directories. {}",
            describe_mounts(Some(mounts))
        )),
        _ => Ok(resolved),
    }
}

/// Resolves `.`, `..` and repeated or trailing slashes of an absolute path,
/// without touching the filesystem. `..` at the root stays at the root.
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether `path` is `dir` or lies below it (both normalized).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The directories to walk for `path`: the mounts when `path` is `/` and `/`
/// is not itself mounted, else `path` alone.
pub fn walk_roots(path: &str) -> Vec<String> {
    walk_roots_in(path, mounts())
}

/// [`walk_roots`] against an explicit list of mounts.
pub fn walk_roots_in(path: &str, mounts: Option<&[String]>) -> Vec<String> {
    match mounts {
        Some(mounts) if path == "/" && !mounts.iter().any(|m| m == "/") => mounts.to_vec(),
        _ => vec![path.to_string()],
    }
}

/// "Mounted directories: /data, /workspace." for error messages.
pub fn describe_mounts(mounts: Option<&[String]>) -> String {
    match mounts {
        None => String::new(),
        Some([]) => "No directories are mounted in this sandbox, so there are no files.".into(),
        Some(mounts) => format!("Mounted directories: {}.", mounts.join(", ")),
    }
}

/// Checks that `path` is a directory before a tool would `action` it; for a
/// file, the error says what to do instead (`hint`).
pub fn require_dir(path: &str, action: &str, hint: &str) -> Result<(), String> {
    let metadata = std::fs::metadata(path).map_err(|error| io_error(action, path, &error))?;
    if metadata.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "`{}` is a file, not a directory. {hint}",
            crate::names::escape(path)
        ))
    }
}

/// Explains a failed filesystem operation: what went wrong with `path` while
/// trying to `action` it, and what to do about it.
pub fn io_error(action: &str, path: &str, error: &io::Error) -> String {
    let why = match error.kind() {
        io::ErrorKind::NotFound => {
            "it does not exist. Check the path with list_dir or glob".to_string()
        }
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            "permission denied. The directory may be mounted read-only, or the path is a \
             symlink leading outside the mounted directories"
                .to_string()
        }
        io::ErrorKind::IsADirectory => {
            "it is a directory. Use list_dir to see what it contains".to_string()
        }
        io::ErrorKind::NotADirectory => {
            "part of the path is a file, not a directory. Check the path with list_dir".to_string()
        }
        _ => error.to_string(),
    };
    format!(
        "Could not {action} `{}`: {why}.",
        crate::names::escape(path)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts() -> Vec<String> {
        vec!["/data".to_string(), "/workspace".to_string()]
    }

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("/workspace/"), "/workspace");
        assert_eq!(
            normalize("//workspace//src/./lib.rs"),
            "/workspace/src/lib.rs"
        );
        assert_eq!(
            normalize("/workspace/src/../README.md"),
            "/workspace/README.md"
        );
        assert_eq!(normalize("/workspace/../../etc"), "/etc");
        assert_eq!(normalize("/.."), "/");
    }

    #[test]
    fn requires_absolute_paths_inside_mounts() {
        let m = mounts();
        let m = Some(m.as_slice());
        assert_eq!(
            resolve_in("/workspace/a/../b", m),
            Ok("/workspace/b".into())
        );
        assert_eq!(resolve_in("/workspace", m), Ok("/workspace".into()));
        assert_eq!(resolve_in("/", m), Ok("/".into()));

        let e = resolve_in("src/lib.rs", m).unwrap_err();
        assert!(e.contains("relative path"), "{e}");
        assert!(e.contains("`/data/src/lib.rs`"), "{e}");
        let e = resolve_in("workspace/./src", m).unwrap_err();
        assert!(e.contains("such as `/workspace/src`"), "{e}");
        assert!(e.contains("Mounted directories: /data, /workspace."), "{e}");

        let e = resolve_in("/workspace/../etc/passwd", m).unwrap_err();
        assert!(
            e.starts_with("`/etc/passwd` is outside the mounted directories"),
            "{e}"
        );
        let e = resolve_in("/workspacefoo", m).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        assert!(resolve_in("", m).unwrap_err().contains("empty"));

        let none: Option<&[String]> = Some(&[]);
        assert!(
            resolve_in("/x", none)
                .unwrap_err()
                .contains("No directories are mounted")
        );
        assert_eq!(resolve_in("/etc", None), Ok("/etc".into()));
    }

    #[test]
    fn root_walks_every_mount() {
        let m = mounts();
        assert_eq!(walk_roots_in("/", Some(&m)), m);
        assert_eq!(walk_roots_in("/data", Some(&m)), vec!["/data".to_string()]);
        assert_eq!(walk_roots_in("/", None), vec!["/".to_string()]);
        let root = vec!["/".to_string()];
        assert_eq!(walk_roots_in("/", Some(&root)), root);
    }

    #[test]
    fn io_errors_say_what_to_do() {
        let e = io_error("read", "/w/x", &io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(
            e,
            "Could not read `/w/x`: it does not exist. Check the path with list_dir or glob."
        );
        let e = io_error(
            "write",
            "/w/x",
            &io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(e.contains("read-only"), "{e}");
    }
}
