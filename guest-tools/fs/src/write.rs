//! `write_file`: creates a file or replaces its whole content; and
//! [`replace_file`], the only way the tools change a file.

use crate::{names, paths};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// How many symlinks [`replace_file`] follows to find the file to replace.
const MAX_SYMLINKS: usize = 40;

/// Gives `path` the new `content`. Callers compute everything they report
/// before calling this, so that a call that fails (an error, or running out
/// of fuel in its diff) has not changed the file, and the write is the last
/// thing a successful call does.
///
/// An existing regular file is rewritten in place, so that it keeps its
/// permissions, owner and hard links: WASI cannot set permissions, and a
/// replacement file would get the host's defaults (a `0600` secret made
/// readable by everyone). Only a call stopped during the write itself (its
/// deadline or fuel ending exactly then) can leave it partly written. A new
/// file is written to a fresh temporary file in the same directory, renamed
/// into place, so it appears whole or not at all.
///
/// When `path` is a symlink, the file it leads to is written, not the link.
pub fn replace_file(path: &str, content: &[u8]) -> Result<(), String> {
    let target = follow_symlinks(path)?;
    let existing = fs::metadata(&target).ok();
    if let Some(metadata) = existing.as_ref().filter(|m| !m.is_file()) {
        return Err(not_regular(path, &target, metadata));
    }
    if existing.is_some() {
        return fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&target)
            .and_then(|mut file| file.write_all(content))
            .map_err(|error| paths::io_error("write", path, &error));
    }
    let dir = target.parent().unwrap_or(Path::new("/"));
    let (temp, mut file) =
        create_temp(dir).map_err(|error| paths::io_error("write", path, &error))?;
    let written = file.write_all(content).and_then(|()| {
        drop(file);
        fs::rename(&temp, &target)
    });
    written.map_err(|error| {
        let _ = fs::remove_file(&temp);
        paths::io_error("write", path, &error)
    })
}

/// The refusal to write over `target` (where `path` leads), which exists
/// but is not a regular file: a FIFO, a socket or a device would be
/// replaced by a regular file (a service losing its socket), or answer
/// success where writing fails; so it is left untouched.
pub(crate) fn not_regular(path: &str, target: &Path, metadata: &fs::Metadata) -> String {
    let kind = match metadata.is_dir() {
        true => "a directory",
        false => special_kind(target),
    };
    format!(
        "`{}` is {kind}, not a regular file, so it was not written: write_file and edit_file write only regular files. Choose another path.",
        names::escape(path)
    )
}

/// What a file that is neither a regular file nor a directory is, as far
/// as WASI tells (it names devices; a FIFO and a socket are both unknown).
#[cfg(target_arch = "wasm32")]
fn special_kind(target: &Path) -> &'static str {
    use wasip2::filesystem::types::DescriptorType;
    match crate::walk::wasi::descriptor_type(target) {
        Some(DescriptorType::CharacterDevice) => "a character device",
        Some(DescriptorType::BlockDevice) => "a block device",
        _ => "a special file (a FIFO, a socket or a device)",
    }
}

/// What a file that is neither a regular file nor a directory is.
#[cfg(not(target_arch = "wasm32"))]
fn special_kind(target: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match fs::metadata(target).map(|m| m.file_type()) {
        Ok(kind) if kind.is_char_device() => "a character device",
        Ok(kind) if kind.is_block_device() => "a block device",
        _ => "a special file (a FIFO, a socket or a device)",
    }
}

/// The path of the file that `path` leads to through symlinks: `path` itself
/// when it is not a symlink (or does not exist).
fn follow_symlinks(path: &str) -> Result<PathBuf, String> {
    let mut current = PathBuf::from(path);
    for _ in 0..MAX_SYMLINKS {
        let is_link = fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok(current);
        }
        let link = fs::read_link(&current)
            .map_err(|error| paths::io_error("follow the symlink", path, &error))?;
        let link = link
            .to_str()
            .filter(|link| !link.starts_with('/'))
            .ok_or_else(|| {
                format!(
                    "`{}` is a symlink to a path outside this directory tree, which the sandbox \
                 does not follow. Write to the file it leads to instead.",
                    names::escape(path)
                )
            })?;
        let parent = current.parent().and_then(Path::to_str).unwrap_or("/");
        current = PathBuf::from(paths::resolve(&format!("{parent}/{link}"))?);
    }
    Err(format!(
        "`{}` leads through more than {MAX_SYMLINKS} symlinks.",
        names::escape(path)
    ))
}

/// Creates a new, empty temporary file in `dir`.
fn create_temp(dir: &Path) -> io::Result<(PathBuf, fs::File)> {
    use std::hash::{BuildHasher, RandomState};
    let mut attempt = 0u64;
    loop {
        // RandomState is seeded from the system's randomness.
        let token = RandomState::new().hash_one(attempt);
        let temp = dir.join(format!(".toolcage-{token:016x}.tmp"));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
        {
            Ok(file) => return Ok((temp, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The `write_file` tool.
pub struct WriteFile;

#[derive(serde::Deserialize)]
struct Args {
    path: String,
    content: String,
    #[serde(default)]
    create_dirs: bool,
}

impl Tool for WriteFile {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "write_file",
            "Writes `content` to a file, creating it or replacing everything it held. Use it \
             for new files or complete rewrites; to change part of an existing file, prefer \
             edit_file. The parent directory must exist unless create_dirs is true. Paths \
             are absolute paths inside the mounted directories, which may be read-only.",
        )
        .title("Write file")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Absolute path of the file, e.g. /workspace/notes.md."
                },
                "content": {
                    "type": "string",
                    "description": "The file's complete new content."
                },
                "create_dirs": {
                    "type": "boolean",
                    "description": "Create missing parent directories. Default false."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The normalized absolute path." },
                "bytes": { "type": "integer", "minimum": 0, "description": "Bytes written." },
                "created": {
                    "type": "boolean",
                    "description": "The file did not exist before."
                }
            },
            "required": ["path", "bytes", "created"],
            "additionalProperties": false
        }))
        .destructive()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve_file(&args.path).map_err(Outcome::text)?;
        let created = match fs::metadata(&path) {
            Ok(metadata) if metadata.is_dir() => {
                return Err(Outcome::text(format!(
                    "`{}` is a directory, so it cannot be written as a file. Choose a file \
                     path inside it.",
                    names::escape(&path)
                )));
            }
            Ok(_) => false,
            Err(_) => true,
        };
        if let Some(parent) = Path::new(&path).parent().filter(|parent| !parent.is_dir()) {
            let parent = parent.to_string_lossy();
            if !args.create_dirs {
                return Err(Outcome::text(format!(
                    "The directory `{}` does not exist. Call write_file again with \
                     create_dirs=true to create it, or check the path with list_dir.",
                    names::escape(&parent)
                )));
            }
            fs::create_dir_all(parent.as_ref()).map_err(|error| {
                Outcome::text(paths::io_error("create the directory", &parent, &error))
            })?;
        }
        let bytes = args.content.len();
        let verb = if created { "Created" } else { "Overwrote" };
        let unit = if bytes == 1 { "byte" } else { "bytes" };
        let shown = names::escape(&path);
        let outcome = Outcome::text(format!("{verb} `{shown}` ({bytes} {unit})."))
            .with_details(json!({ "path": shown, "bytes": bytes, "created": created }));
        // The last step: the file changes only once the result is certain.
        replace_file(&path, args.content.as_bytes()).map_err(Outcome::text)?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    #[test]
    fn creates_then_overwrites() {
        let dir = TestDir::new();
        let path = dir.path("new.txt");
        let outcome = WriteFile::call(json!({ "path": path, "content": "hello\n" })).unwrap();
        assert_eq!(outcome.output, format!("Created `{path}` (6 bytes)."));
        assert_eq!(
            outcome.details,
            Some(json!({ "path": path, "bytes": 6, "created": true }))
        );
        let outcome = WriteFile::call(json!({ "path": path, "content": "" })).unwrap();
        assert_eq!(outcome.details.unwrap()["created"], false);
        assert_eq!(dir.read("new.txt"), "");
    }

    #[test]
    fn creates_parent_directories_only_when_asked() {
        let dir = TestDir::new();
        let path = dir.path("a/b/c.txt");
        let e = WriteFile::call(json!({ "path": path, "content": "x" })).unwrap_err();
        assert!(e.output.contains("create_dirs=true"), "{}", e.output);
        WriteFile::call(json!({ "path": path, "content": "x", "create_dirs": true })).unwrap();
        assert_eq!(dir.read("a/b/c.txt"), "x");
    }

    #[test]
    fn refuses_directories() {
        let dir = TestDir::new();
        let e = WriteFile::call(json!({ "path": dir.path(""), "content": "x" })).unwrap_err();
        assert!(e.output.contains("is a directory"), "{}", e.output);
    }

    fn entries(dir: &TestDir) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir.path(""))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn rewrites_an_existing_file_in_place_keeping_its_mode_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TestDir::new();
        dir.write("run.sh", "old");
        let path = dir.path("run.sh");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o750)).unwrap();
        fs::hard_link(&path, dir.path("alias")).unwrap();
        replace_file(&path, b"new").unwrap();
        assert_eq!(dir.read("run.sh"), "new");
        assert_eq!(dir.read("alias"), "new", "the same file, not a copy");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        assert_eq!(
            entries(&dir),
            ["alias", "run.sh"],
            "no temporary file is left"
        );
    }

    #[test]
    fn replaces_the_file_a_symlink_leads_to() {
        let dir = TestDir::new();
        dir.write("real/f.txt", "old");
        std::os::unix::fs::symlink("real/f.txt", dir.path("link")).unwrap();
        WriteFile::call(json!({ "path": dir.path("link"), "content": "new" })).unwrap();
        assert_eq!(dir.read("real/f.txt"), "new");
        assert!(
            fs::symlink_metadata(dir.path("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_failed_replacement_leaves_everything_as_it_was() {
        let dir = TestDir::new();
        dir.write("d/inside", "x");
        // A directory is refused before anything is written.
        let e = replace_file(&dir.path("d"), b"new").unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        assert_eq!(dir.read("d/inside"), "x");
        // A name too long for the filesystem fails the rename itself.
        let e = replace_file(&dir.path(&"n".repeat(300)), b"new").unwrap_err();
        assert!(e.starts_with("Could not write `"), "{e}");
        assert_eq!(entries(&dir), ["d"], "the temporary file is removed");
    }

    #[test]
    fn refuses_special_files_and_leaves_them() {
        let dir = TestDir::new();
        let socket_path = dir.path("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
        let error = replace_file(&socket_path, b"x").unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
        use std::os::unix::fs::FileTypeExt;
        assert!(
            fs::symlink_metadata(&socket_path)
                .unwrap()
                .file_type()
                .is_socket()
        );
        let error = replace_file("/dev/null", b"x").unwrap_err();
        assert!(error.contains("a character device"), "{error}");
    }

    #[test]
    fn messages_escape_the_path() {
        let dir = TestDir::new();
        let path = dir.path("new\nline\x1b.txt");
        let outcome = WriteFile::call(json!({ "path": path, "content": "x" })).unwrap();
        let shown = format!("{}/new\\x0Aline\\x1B.txt", dir.path(""));
        assert_eq!(outcome.output, format!("Created `{shown}` (1 byte)."));
        assert_eq!(outcome.details.unwrap()["path"], shown);
    }
}
