//! `list_dir`: the entries of a directory, optionally several levels deep.
//!
//! Entries are sorted by path (component by component, so a directory's
//! contents follow it), symlinks are listed but not followed, and `/` lists the
//! mounted directories.

use crate::walk::{self, Flow, Kind, Problems};
use crate::{names, paths};
use std::path::Path;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The deepest listing allowed.
pub const MAX_DEPTH: usize = 10;
/// The most entries one call returns.
pub const MAX_ENTRIES: usize = 1000;

/// The `list_dir` tool.
pub struct ListDir;

#[derive(serde::Deserialize)]
struct Args {
    path: String,
    #[serde(default = "one")]
    depth: usize,
}

fn one() -> usize {
    1
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    /// The path relative to the listed directory, escaped as [`names`] says.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: &'static str,
    /// The size in bytes, for files.
    pub size: Option<u64>,
}

/// The entries found, at most `cap`.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// More entries existed than the cap.
    pub truncated: bool,
    /// Entries that could not be read (permissions, races, names that are
    /// not UTF-8 under WASI).
    pub problems: Problems,
}

/// Lists `dir` (a normalized absolute path) down to `depth` levels, at most
/// `cap` entries. The walk starts from `roots`: `dir` itself, or the mounts
/// when `dir` is `/` (see [`paths::walk_roots`]).
pub fn list(dir: &str, roots: &[String], depth: usize, cap: usize) -> Listing {
    let mut listing = Listing::default();
    for root in roots {
        // A mount below `dir` is an entry itself, one level down.
        let (min_depth, max_depth) = if root == dir {
            (1, depth)
        } else {
            (0, depth.saturating_sub(1))
        };
        let options = walk::Options {
            min_depth,
            max_depth,
            skip_git: false,
        };
        let walked = walk::walk(Path::new(root), options, &mut listing.problems, |entry| {
            if listing.entries.len() == cap {
                listing.truncated = true;
                return Flow::Stop;
            }
            let (kind, size) = match entry.kind {
                Kind::Dir => ("dir", None),
                Kind::Symlink => ("symlink", None),
                Kind::File => (
                    "file",
                    std::fs::symlink_metadata(&entry.path)
                        .ok()
                        .map(|metadata| metadata.len()),
                ),
                Kind::Other => ("other", None),
            };
            listing.entries.push(Entry {
                path: relative(&entry.path, dir),
                kind,
                size,
            });
            Flow::Continue
        });
        match walked {
            Ok(Flow::Stop) => return listing,
            Ok(Flow::Continue) => {}
            Err(_) => listing.problems.unreadable += 1,
        }
    }
    listing
}

/// `path` relative to `dir`, escaped for output.
fn relative(path: &Path, dir: &str) -> String {
    names::escape_path(path.strip_prefix(dir).unwrap_or(path)).into_owned()
}

/// One line per entry: `dir  src/`, `file 1234 src/main.rs`, `link src/x`.
pub fn render(dir: &str, listing: &Listing) -> String {
    let mut out = String::new();
    for entry in &listing.entries {
        let line = match (entry.kind, entry.size) {
            ("dir", _) => format!("dir  {}/", entry.path),
            ("file", Some(size)) => format!("file {size} {}", entry.path),
            ("file", None) => format!("file ? {}", entry.path),
            ("symlink", _) => format!("link {}", entry.path),
            (_, _) => format!("other {}", entry.path),
        };
        out.push_str(&line);
        out.push('\n');
    }
    if listing.entries.is_empty() {
        out.push_str(&format!("`{}` is empty.\n", names::escape(dir)));
    }
    if listing.truncated {
        out.push_str(&format!(
            "[Showing the first {} entries. List a subdirectory or use a smaller depth to see \
             the rest.]\n",
            listing.entries.len()
        ));
    }
    out.push_str(&listing.problems.notes());
    out
}

impl Tool for ListDir {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "list_dir",
            "Lists a directory: one line per entry, `dir  name/`, `file <bytes> name` or \
             `link name` (symlinks are not followed), with paths relative to `path` and sorted. \
             depth 1 (the default) lists direct children; up to 10 lists subdirectories \
             recursively. At most 1000 entries are returned. `/` lists the mounted \
             directories, which is a good first call to see what is available. Use glob to \
             find files by name pattern across a tree. In names, a control character or a \
             byte that is not UTF-8 is shown as \\xNN.",
        )
        .title("List directory")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Absolute path of the directory, e.g. /workspace, or / for \
                                    the mounted directories."
                },
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_DEPTH,
                    "description": "How many levels to list. Default 1."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The normalized absolute path." },
                "entries": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": { "type": "string", "description": "Relative to path." },
                            "kind": { "enum": ["file", "dir", "symlink", "other"] },
                            "size": {
                                "type": ["integer", "null"],
                                "minimum": 0,
                                "description": "Size in bytes for files, else null."
                            }
                        },
                        "required": ["path", "kind", "size"],
                        "additionalProperties": false
                    }
                },
                "truncated": {
                    "type": "boolean",
                    "description": "More than 1000 entries existed; only the first are listed."
                }
            },
            "required": ["path", "entries", "truncated"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve(&args.path).map_err(Outcome::text)?;
        let roots = paths::walk_roots(&path);
        if roots.contains(&path) {
            paths::require_dir(&path, "list", "Use read_file to read it.")
                .map_err(Outcome::text)?;
        }
        let depth = args.depth.clamp(1, MAX_DEPTH);
        let listing = list(&path, &roots, depth, MAX_ENTRIES);
        let details = json!({
            "path": names::escape(&path),
            "entries": listing.entries,
            "truncated": listing.truncated,
        });
        Ok(Outcome::text(render(&path, &listing)).with_details(details))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    fn tree() -> TestDir {
        let dir = TestDir::new();
        dir.write("b.txt", "bb");
        dir.write("a/x.rs", "x");
        dir.write("a/deep/y.rs", "yy");
        dir.write("a-b", "");
        dir
    }

    #[test]
    fn lists_one_level_sorted() {
        let dir = tree();
        let root = dir.path("");
        let listing = list(&root, std::slice::from_ref(&root), 1, 100);
        let paths: Vec<&str> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "a-b", "b.txt"]);
        assert_eq!(
            render(&root, &listing),
            "dir  a/\nfile 0 a-b\nfile 2 b.txt\n"
        );
    }

    #[test]
    fn lists_deeper_in_tree_order() {
        let dir = tree();
        let root = dir.path("");
        let listing = list(&root, std::slice::from_ref(&root), 3, 100);
        let paths: Vec<&str> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["a", "a/deep", "a/deep/y.rs", "a/x.rs", "a-b", "b.txt"]
        );
        let listing = list(&root, std::slice::from_ref(&root), 2, 100);
        assert_eq!(listing.entries.len(), 5);
    }

    #[test]
    fn caps_entries() {
        let dir = tree();
        let root = dir.path("");
        let listing = list(&root, std::slice::from_ref(&root), 3, 2);
        assert_eq!(listing.entries.len(), 2);
        assert!(listing.truncated);
        assert!(render(&root, &listing).ends_with("[Showing the first 2 entries. List a subdirectory or use a smaller depth to see the rest.]\n"));
        let exact = list(&root, std::slice::from_ref(&root), 1, 3);
        assert!(!exact.truncated);
    }

    #[test]
    fn lists_mounts_as_entries_of_the_root() {
        let dir = tree();
        let mounts = vec![dir.path("a"), dir.path("b.txt")];
        let listing = list(&dir.path(""), &mounts, 2, 100);
        let paths: Vec<&str> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "a/deep", "a/x.rs", "b.txt"]);
    }

    #[test]
    fn lists_through_the_tool() {
        let dir = tree();
        let outcome = ListDir::call(json!({ "path": dir.path("a") })).unwrap();
        assert_eq!(outcome.output, "dir  deep/\nfile 1 x.rs\n");
        assert_eq!(
            outcome.details.unwrap()["entries"],
            json!([
                { "path": "deep", "kind": "dir", "size": null },
                { "path": "x.rs", "kind": "file", "size": 1 }
            ])
        );
        let e = ListDir::call(json!({ "path": dir.path("b.txt") })).unwrap_err();
        assert!(e.output.contains("is a file"), "{}", e.output);
        let e = ListDir::call(json!({ "path": dir.path("nope") })).unwrap_err();
        assert!(e.output.contains("does not exist"), "{}", e.output);
        std::fs::create_dir(dir.path("empty")).unwrap();
        let outcome = ListDir::call(json!({ "path": dir.path("empty") })).unwrap();
        assert!(outcome.output.ends_with("` is empty.\n"));
    }

    #[test]
    fn lists_every_name_escaped_one_per_line() {
        use std::os::unix::ffi::OsStrExt;
        let dir = TestDir::new();
        dir.write("a.txt", "a");
        dir.write("z.txt", "z");
        let root = std::path::PathBuf::from(dir.path(""));
        for name in [&b"bad\xff"[..], b"two\nfile 9 forged", b"\x1b]0;owned\x07"] {
            std::fs::write(root.join(std::ffi::OsStr::from_bytes(name)), "").unwrap();
        }
        let outcome = ListDir::call(json!({ "path": dir.path("") })).unwrap();
        assert_eq!(
            outcome.output,
            "file 0 \\x1B]0;owned\\x07\nfile 1 a.txt\nfile 0 bad\\xFF\n\
             file 0 two\\x0Afile 9 forged\nfile 1 z.txt\n"
        );
        assert_eq!(outcome.details.unwrap()["entries"][2]["path"], r"bad\xFF");
    }
}
