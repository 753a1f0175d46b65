//! The directory walk `list_dir`, `glob` and `grep` share.
//!
//! Why not `std::fs::read_dir` (or walkdir, built on it): under WASI 0.2 a
//! directory entry's name is a string, so the host reports an entry whose
//! name is not UTF-8 as an `illegal-byte-sequence` error in the entry stream,
//! and std's `ReadDir` ends the whole listing at that error: one planted name
//! would hide its siblings. This walk reads the `wasi:filesystem` entry stream
//! itself, counts such an entry and goes on with the next one. Natively (the
//! unit tests) it reads directories with std, where names are bytes and a name
//! that is not UTF-8 is walked like any other.
//!
//! Entries come in path order (each directory's entries sorted by name bytes,
//! a directory's contents right after it). Symlinks are reported, never
//! followed, except a symlink given as the root.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// What an entry is; symlinks are not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Kind {
    fn of(file_type: std::fs::FileType) -> Kind {
        if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_symlink() {
            Kind::Symlink
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Other
        }
    }
}

/// One entry of a walk.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The path to open it with: the root joined with the names below it.
    pub path: PathBuf,
    /// 0 for the root, 1 for its entries, and so on.
    pub depth: usize,
    pub kind: Kind,
}

impl Entry {
    /// Whether this is a `.git` directory below the root.
    pub fn is_git_dir(&self) -> bool {
        self.depth > 0 && self.kind == Kind::Dir && self.path.file_name() == Some(".git".as_ref())
    }
}

/// Entries a walk could not report.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Problems {
    /// Directories that could not be read, and entries that could not be.
    pub unreadable: usize,
    /// Entries whose names are not UTF-8, which the WASI sandbox cannot hand
    /// to the tool (counted only when running as a component).
    pub bad_names: usize,
}

impl Problems {
    /// The bracketed notes the tools append, empty when nothing went wrong.
    pub fn notes(&self) -> String {
        let mut notes = String::new();
        if self.bad_names > 0 {
            let (n, s) = plural(self.bad_names);
            notes.push_str(&format!(
                "[{n} entr{s} not shown: {} name{} not valid UTF-8, which the sandbox cannot \
                 pass to the tools. The other entries are all listed.]\n",
                if n == 1 { "its" } else { "their" },
                if n == 1 { " is" } else { "s are" },
            ));
        }
        if self.unreadable > 0 {
            let (n, s) = plural(self.unreadable);
            notes.push_str(&format!(
                "[{n} entr{s} could not be read and {} skipped.]\n",
                if n == 1 { "was" } else { "were" }
            ));
        }
        notes
    }
}

fn plural(n: usize) -> (usize, &'static str) {
    (n, if n == 1 { "y" } else { "ies" })
}

/// How deep to walk, and what to leave out.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Entries shallower than this are walked through but not reported.
    pub min_depth: usize,
    /// Entries deeper than this are not read.
    pub max_depth: usize,
    /// Skip `.git` directories below the root, and what they hold.
    pub skip_git: bool,
}

/// Whether the walk goes on after an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Walks `root` under `options`, calling `visit` for each entry until it
/// returns [`Flow::Stop`]. Entries that cannot be read are counted in
/// `problems`; only a root that cannot be read is an error.
pub fn walk(
    root: &Path,
    options: Options,
    problems: &mut Problems,
    mut visit: impl FnMut(&Entry) -> Flow,
) -> io::Result<Flow> {
    // The root is followed when it is a symlink, as `ls dir/` would.
    let root = Entry {
        path: root.to_path_buf(),
        depth: 0,
        kind: Kind::of(std::fs::metadata(root)?.file_type()),
    };
    if options.min_depth == 0 && visit(&root) == Flow::Stop {
        return Ok(Flow::Stop);
    }
    // One pending list per open directory, each sorted backwards so that
    // `pop` takes the entries in order.
    let mut stack: Vec<Vec<Entry>> = Vec::new();
    if root.kind == Kind::Dir && options.max_depth > 0 {
        stack.push(children(&root, problems));
    }
    while let Some(pending) = stack.last_mut() {
        let Some(entry) = pending.pop() else {
            stack.pop();
            continue;
        };
        if options.skip_git && entry.is_git_dir() {
            continue;
        }
        if entry.depth >= options.min_depth && visit(&entry) == Flow::Stop {
            return Ok(Flow::Stop);
        }
        if entry.kind == Kind::Dir && entry.depth < options.max_depth {
            let next = children(&entry, problems);
            stack.push(next);
        }
    }
    Ok(Flow::Continue)
}

/// The entries of the directory `parent`, sorted by name backwards.
fn children(parent: &Entry, problems: &mut Problems) -> Vec<Entry> {
    let mut names = read_names(&parent.path, problems);
    names.sort_unstable_by(|(a, _), (b, _)| b.as_encoded_bytes().cmp(a.as_encoded_bytes()));
    names
        .into_iter()
        .map(|(name, kind)| Entry {
            path: parent.path.join(name),
            depth: parent.depth + 1,
            kind,
        })
        .collect()
}

/// The names and kinds in the directory `dir`, in no particular order.
#[cfg(not(target_arch = "wasm32"))]
fn read_names(dir: &Path, problems: &mut Problems) -> Vec<(OsString, Kind)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        problems.unreadable += 1;
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry.and_then(|entry| Ok((entry.file_name(), Kind::of(entry.file_type()?)))) {
            Ok(named) => names.push(named),
            Err(_) => problems.unreadable += 1,
        }
    }
    names
}

/// The names and kinds in the directory `dir`, read from its
/// `wasi:filesystem` entry stream: an entry the host cannot name (a name that
/// is not UTF-8) is counted, and the stream goes on.
#[cfg(target_arch = "wasm32")]
fn read_names(dir: &Path, problems: &mut Problems) -> Vec<(OsString, Kind)> {
    use wasip2::filesystem::types::{DescriptorType, ErrorCode};

    /// A stream that fails this many times in a row is given up on: a host
    /// that does not move past a failed entry would otherwise loop.
    const MAX_ERRORS_IN_A_ROW: usize = 100_000;

    let stream = match wasi::open_dir(dir).and_then(|d| d.read_directory().map_err(Some)) {
        Ok(stream) => stream,
        Err(_) => {
            problems.unreadable += 1;
            return Vec::new();
        }
    };
    let mut names = Vec::new();
    let mut errors_in_a_row = 0;
    loop {
        match stream.read_directory_entry() {
            Ok(Some(entry)) => {
                errors_in_a_row = 0;
                let kind = match entry.type_ {
                    DescriptorType::Directory => Kind::Dir,
                    DescriptorType::RegularFile => Kind::File,
                    DescriptorType::SymbolicLink => Kind::Symlink,
                    _ => Kind::Other,
                };
                names.push((OsString::from(entry.name), kind));
            }
            Ok(None) => break,
            Err(code) => {
                if code == ErrorCode::IllegalByteSequence {
                    problems.bad_names += 1;
                } else {
                    problems.unreadable += 1;
                }
                errors_in_a_row += 1;
                if errors_in_a_row == MAX_ERRORS_IN_A_ROW {
                    break;
                }
            }
        }
    }
    names
}

#[cfg(target_arch = "wasm32")]
pub(crate) mod wasi {
    use std::path::Path;
    use wasip2::filesystem::types::{Descriptor, DescriptorFlags, ErrorCode, OpenFlags, PathFlags};

    thread_local! {
        /// The mounts' descriptors with their normalized guest paths.
        static PREOPENS: Vec<(String, Descriptor)> =
            wasip2::filesystem::preopens::get_directories()
                .into_iter()
                .map(|(descriptor, name)| (crate::paths::normalize(&format!("/{name}")), descriptor))
                .collect();
    }

    /// What the file at the absolute guest path `path` is, as the host
    /// says (symlinks followed), through the innermost mount holding it.
    pub(crate) fn descriptor_type(
        path: &Path,
    ) -> Option<wasip2::filesystem::types::DescriptorType> {
        let path = path.to_str()?;
        PREOPENS.with(|preopens| {
            let (mount, descriptor) = preopens
                .iter()
                .filter(|(mount, _)| crate::paths::is_within(path, mount))
                .max_by_key(|(mount, _)| mount.len())?;
            let relative = path[mount.len()..].trim_start_matches('/');
            let relative = if relative.is_empty() { "." } else { relative };
            let stat = descriptor
                .stat_at(PathFlags::SYMLINK_FOLLOW, relative)
                .ok()?;
            Some(stat.type_)
        })
    }

    /// Opens the directory at the absolute guest path `dir` for reading,
    /// through the innermost mount holding it.
    pub(super) fn open_dir(dir: &Path) -> Result<Descriptor, Option<ErrorCode>> {
        let dir = dir.to_str().ok_or(None)?;
        PREOPENS.with(|preopens| {
            let (mount, descriptor) = preopens
                .iter()
                .filter(|(mount, _)| crate::paths::is_within(dir, mount))
                .max_by_key(|(mount, _)| mount.len())
                .ok_or(None)?;
            let relative = dir[mount.len()..].trim_start_matches('/');
            descriptor
                .open_at(
                    PathFlags::SYMLINK_FOLLOW,
                    if relative.is_empty() { "." } else { relative },
                    OpenFlags::DIRECTORY,
                    DescriptorFlags::READ,
                )
                .map_err(Some)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    fn paths(root: &str, options: Options) -> (Vec<String>, Problems) {
        let mut problems = Problems::default();
        let mut seen = Vec::new();
        walk(Path::new(root), options, &mut problems, |entry| {
            let relative = entry.path.strip_prefix(root).unwrap();
            seen.push(crate::names::escape_path(relative).into_owned());
            Flow::Continue
        })
        .unwrap();
        (seen, problems)
    }

    const ALL: Options = Options {
        min_depth: 1,
        max_depth: usize::MAX,
        skip_git: false,
    };

    #[test]
    fn walks_in_path_order() {
        let dir = TestDir::new();
        for file in ["b", "a/z", "a/deep/y", "a-b", ".git/HEAD"] {
            dir.write(file, "");
        }
        let (seen, problems) = paths(&dir.path(""), ALL);
        assert_eq!(
            seen,
            [
                ".git",
                ".git/HEAD",
                "a",
                "a/deep",
                "a/deep/y",
                "a/z",
                "a-b",
                "b"
            ]
        );
        assert_eq!(problems, Problems::default());
        let shallow = Options {
            max_depth: 1,
            skip_git: true,
            ..ALL
        };
        assert_eq!(paths(&dir.path(""), shallow).0, ["a", "a-b", "b"]);
    }

    #[test]
    fn stops_when_asked() {
        let dir = TestDir::new();
        dir.write("a", "");
        dir.write("b", "");
        let mut seen = 0;
        let flow = walk(
            Path::new(&dir.path("")),
            ALL,
            &mut Problems::default(),
            |_| {
                seen += 1;
                Flow::Stop
            },
        );
        assert_eq!((flow.unwrap(), seen), (Flow::Stop, 1));
    }

    #[test]
    fn a_name_that_is_not_utf8_hides_nothing() {
        use std::os::unix::ffi::OsStrExt;
        let dir = TestDir::new();
        dir.write("a.txt", "");
        dir.write("z.txt", "");
        let bad = Path::new(&dir.path("")).join(std::ffi::OsStr::from_bytes(b"bad\xff\n.txt"));
        std::fs::write(bad, "").unwrap();
        let (seen, problems) = paths(&dir.path(""), ALL);
        assert_eq!(seen, ["a.txt", r"bad\xFF\x0A.txt", "z.txt"]);
        assert_eq!(problems, Problems::default());
    }

    #[test]
    fn notes_say_what_was_left_out() {
        assert_eq!(Problems::default().notes(), "");
        let notes = Problems {
            unreadable: 1,
            bad_names: 2,
        }
        .notes();
        assert_eq!(
            notes,
            "[2 entries not shown: their names are not valid UTF-8, which the sandbox cannot \
             pass to the tools. The other entries are all listed.]\n[1 entry could not be read \
             and was skipped.]\n"
        );
    }
}
