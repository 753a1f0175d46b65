//! `glob`: finds paths by name pattern.
//!
//! The pattern is relative to `path` (default `/`, every mount), or absolute.
//! The walk starts at the pattern's literal prefix (`src/**/*.rs` walks only
//! `src`) and goes no deeper than the pattern can match when it has no `**`.
//! Symlinks are not followed, and `.git` directories are skipped.

use crate::walk::{self, Flow, Kind, Problems};
use crate::{names, paths};
use globset::{GlobBuilder, GlobMatcher};
use std::path::Path;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The most paths one call returns.
pub const MAX_MATCHES: usize = 1000;
/// The longest glob pattern accepted, in characters (for `glob`'s pattern
/// and `grep`'s `glob`).
pub const MAX_PATTERN_CHARS: usize = 1024;
/// The deepest nesting of `{…}` alternatives accepted.
pub const MAX_BRACE_DEPTH: usize = 10;

/// The `glob` tool.
pub struct Glob;

#[derive(serde::Deserialize)]
struct Args {
    pattern: String,
    #[serde(default = "root")]
    path: String,
}

fn root() -> String {
    "/".into()
}

/// Refuses a pattern over [`MAX_PATTERN_CHARS`] or nesting `{…}` deeper than
/// [`MAX_BRACE_DEPTH`]: the matcher is compiled recursively, and a huge or
/// deeply nested pattern would exhaust the tool's stack or memory.
pub fn check_size(pattern: &str) -> Result<(), String> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "The glob pattern is {chars} characters long, over the limit of \
             {MAX_PATTERN_CHARS}. Use a shorter pattern: match a common part of the names \
             with * or **, or search in several calls."
        ));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_BRACE_DEPTH {
        return Err(format!(
            "The glob pattern nests {{…}} alternatives {deepest} levels deep, over the limit \
             of {MAX_BRACE_DEPTH}. Flatten the alternatives, e.g. {{a,b,c}} rather than \
             {{a,{{b,{{c}}}}}}, or search in several calls."
        ));
    }
    Ok(())
}

/// Compiles a glob in which `*` and `?` stay within a path component and `**`
/// spans directories, within the limits of [`check_size`].
pub fn compile(pattern: &str) -> Result<GlobMatcher, String> {
    check_size(pattern)?;
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|error| {
            format!(
                "Invalid glob pattern `{}`: {error}. Use * for any characters within a \
                 name, ** for any number of directories, ? for one character, [abc] for one of \
                 a set and {{a,b}} for alternatives.",
                names::escape(pattern)
            )
        })
}

/// A pattern made absolute, and where to walk for it.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// The absolute, normalized pattern every path is matched against.
    pub pattern: String,
    /// The pattern's leading components without wildcards: where to walk.
    pub base: String,
    /// How many levels below `base` a match can be; `None` with `**`.
    pub depth: Option<usize>,
}

/// Plans the search for `pattern` relative to the directory `path`, or for
/// `pattern` alone when it is absolute.
pub fn plan(path: &str, pattern: &str) -> Plan {
    let full = if pattern.starts_with('/') {
        paths::normalize(pattern)
    } else {
        paths::normalize(&format!("{path}/{pattern}"))
    };
    let components: Vec<&str> = full.split('/').filter(|c| !c.is_empty()).collect();
    let is_wild = |c: &&str| c.contains(['*', '?', '[', '{', '\\']);
    let literal = components.iter().take_while(|c| !is_wild(c)).count();
    let rest = &components[literal..];
    Plan {
        base: format!("/{}", components[..literal].join("/")),
        depth: if rest.iter().any(|c| c.contains("**")) {
            None
        } else {
            Some(rest.len())
        },
        pattern: full,
    }
}

/// Paths found by a search, at most a cap.
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    /// Absolute paths, sorted and escaped for output; directories end with `/`.
    pub paths: Vec<String>,
    /// More paths matched than the cap.
    pub truncated: bool,
    /// Entries that could not be read.
    pub problems: Problems,
}

/// Walks `roots` (the plan's base, or the mounts below it) and collects the
/// paths matching `plan`, at most `cap`.
pub fn search(plan: &Plan, roots: &[String], cap: usize) -> Result<Found, String> {
    let matcher = compile(&plan.pattern)?;
    let mut found = Found::default();
    let levels = |path: &str| path.split('/').filter(|c| !c.is_empty()).count();
    for root in roots {
        // A mount below the base is already some levels down.
        let below = levels(root).saturating_sub(levels(&plan.base));
        let max_depth = match plan.depth {
            Some(depth) => match depth.checked_sub(below) {
                Some(depth) => depth,
                None => continue,
            },
            None => usize::MAX,
        };
        let options = walk::Options {
            min_depth: 0,
            max_depth,
            skip_git: true,
        };
        let walked = walk::walk(Path::new(root), options, &mut found.problems, |entry| {
            if !matcher.is_match(&entry.path) {
                return Flow::Continue;
            }
            if found.paths.len() == cap {
                found.truncated = true;
                return Flow::Stop;
            }
            found
                .paths
                .push(display(&entry.path, entry.kind == Kind::Dir));
            Flow::Continue
        });
        match walked {
            Ok(Flow::Stop) => return Ok(found),
            Ok(Flow::Continue) => {}
            // A literal prefix that does not exist just matches nothing.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => found.problems.unreadable += 1,
        }
    }
    Ok(found)
}

fn display(path: &Path, is_dir: bool) -> String {
    let mut path = names::escape_path(path).into_owned();
    if is_dir && !path.ends_with('/') {
        path.push('/');
    }
    path
}

impl Tool for Glob {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "glob",
            "Finds files and directories whose paths match a glob pattern, such as **/*.rs or \
             src/*/mod.rs. The pattern is relative to `path` (default /, meaning every mounted \
             directory), or absolute. * and ? match within one path component, ** matches any \
             number of directories, [abc] one of a set, {a,b} alternatives. Returns absolute \
             paths sorted by path, one per line, directories ending with /, at most 1000; in \
             paths, a control character or a byte that is not UTF-8 is shown as \\xNN. \
             Symlinks are not followed and .git directories are skipped. The pattern may be \
             up to 1024 characters, with {} nested up to 10 levels. Use grep to search file \
             contents.",
        )
        .title("Find files by pattern")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_PATTERN_CHARS,
                    "description": "Glob pattern, e.g. **/*.rs. At most 1024 characters and \
                                    10 levels of nested {}."
                },
                "path": {
                    "type": "string",
                    "description": "Absolute directory the pattern is relative to. Default /, \
                                    every mounted directory."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "pattern": { "type": "string", "description": "The absolute pattern matched." },
                "path": { "type": "string", "description": "The directory searched." },
                "matches": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Absolute paths, sorted; directories end with /."
                },
                "truncated": {
                    "type": "boolean",
                    "description": "More than 1000 paths matched; only the first are listed."
                }
            },
            "required": ["pattern", "path", "matches", "truncated"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve(&args.path).map_err(Outcome::text)?;
        if paths::walk_roots(&path) == [path.as_str()] {
            let hint = "Pass a directory as path, or use read_file to read the file.";
            paths::require_dir(&path, "search", hint).map_err(Outcome::text)?;
        }
        let plan = plan(&path, &args.pattern);
        // An absolute pattern may point outside the mounts.
        let base = paths::resolve(&plan.base).map_err(Outcome::text)?;
        let roots = paths::walk_roots(&base);
        let found = search(&plan, &roots, MAX_MATCHES).map_err(Outcome::text)?;
        let mut output = String::new();
        for path in &found.paths {
            output.push_str(path);
            output.push('\n');
        }
        if found.paths.is_empty() {
            output.push_str(&format!(
                "No paths match `{}`.",
                names::escape(&plan.pattern)
            ));
            if roots == [base.as_str()] && !Path::new(&base).exists() {
                output.push_str(&format!(" (`{}` does not exist.)", names::escape(&base)));
            }
            output.push('\n');
        }
        if found.truncated {
            output.push_str(&format!(
                "[Showing the first {MAX_MATCHES} matches. Use a more specific pattern or path \
                 to see the rest.]\n"
            ));
        }
        output.push_str(&found.problems.notes());
        let details = json!({
            "pattern": names::escape(&plan.pattern),
            "path": names::escape(&path),
            "matches": found.paths,
            "truncated": found.truncated,
        });
        Ok(Outcome::text(output).with_details(details))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    #[test]
    fn plans_from_the_literal_prefix() {
        assert_eq!(
            plan("/workspace", "src/**/*.rs"),
            Plan {
                pattern: "/workspace/src/**/*.rs".into(),
                base: "/workspace/src".into(),
                depth: None
            }
        );
        assert_eq!(
            plan("/", "*/Cargo.toml"),
            Plan {
                pattern: "/*/Cargo.toml".into(),
                base: "/".into(),
                depth: Some(2)
            }
        );
        let absolute = plan("/ignored", "/data/./x/../*.csv");
        assert_eq!(absolute.pattern, "/data/*.csv");
        assert_eq!((absolute.base.as_str(), absolute.depth), ("/data", Some(1)));
        let literal = plan("/w", "Cargo.toml");
        assert_eq!(
            (literal.base.as_str(), literal.depth),
            ("/w/Cargo.toml", Some(0))
        );
    }

    fn tree() -> TestDir {
        let dir = TestDir::new();
        dir.write("Cargo.toml", "");
        dir.write("src/lib.rs", "");
        dir.write("src/a/mod.rs", "");
        dir.write("src/a/b/deep.rs", "");
        dir.write("src/notes.md", "");
        dir.write(".git/objects/x.rs", "");
        dir
    }

    fn find(dir: &TestDir, pattern: &str, cap: usize) -> Found {
        let plan = plan(&dir.path(""), pattern);
        search(&plan, std::slice::from_ref(&plan.base), cap).unwrap()
    }

    fn relative(dir: &TestDir, found: &Found) -> Vec<String> {
        let root = dir.path("");
        found
            .paths
            .iter()
            .map(|p| p[root.len() + 1..].to_string())
            .collect()
    }

    #[test]
    fn matches_sorted_paths() {
        let dir = tree();
        let all_rs = find(&dir, "**/*.rs", 100);
        assert_eq!(
            relative(&dir, &all_rs),
            ["src/a/b/deep.rs", "src/a/mod.rs", "src/lib.rs"]
        );
        let one_level = find(&dir, "src/*.rs", 100);
        assert_eq!(relative(&dir, &one_level), ["src/lib.rs"]);
        let dirs = find(&dir, "src/*", 100);
        assert_eq!(
            relative(&dir, &dirs),
            ["src/a/", "src/lib.rs", "src/notes.md"]
        );
        let alternatives = find(&dir, "src/*.{md,rs}", 100);
        assert_eq!(alternatives.paths.len(), 2);
        let exact = find(&dir, "Cargo.toml", 100);
        assert_eq!(relative(&dir, &exact), ["Cargo.toml"]);
        assert_eq!(find(&dir, "nope/*.rs", 100), Found::default());
    }

    #[test]
    fn caps_matches() {
        let dir = tree();
        let found = find(&dir, "**/*.rs", 2);
        assert_eq!(found.paths.len(), 2);
        assert!(found.truncated);
        assert!(!find(&dir, "**/*.rs", 3).truncated);
    }

    #[test]
    fn walks_mounts_below_the_base() {
        let dir = tree();
        let root = dir.path("");
        let plan = plan(&root, "*/*.rs");
        let mounts = vec![dir.path("src")];
        let found = search(&plan, &mounts, 100).unwrap();
        assert_eq!(relative(&dir, &found), ["src/lib.rs"]);
    }

    #[test]
    fn reports_bad_patterns() {
        let e = compile("src/[").unwrap_err();
        assert!(e.starts_with("Invalid glob pattern `src/[`"), "{e}");
    }

    #[test]
    fn globs_through_the_tool() {
        let dir = tree();
        let outcome =
            Glob::call(json!({ "pattern": "src/**/mod.rs", "path": dir.path("") })).unwrap();
        assert_eq!(outcome.output, format!("{}\n", dir.path("src/a/mod.rs")));
        let details = outcome.details.unwrap();
        assert_eq!(details["matches"], json!([dir.path("src/a/mod.rs")]));
        assert_eq!(details["truncated"], false);
        let none = Glob::call(json!({ "pattern": "*.py", "path": dir.path("") })).unwrap();
        assert!(none.output.starts_with("No paths match"), "{}", none.output);
        let e = Glob::call(json!({ "pattern": "*", "path": dir.path("nope") })).unwrap_err();
        assert!(e.output.contains("does not exist"), "{}", e.output);
    }

    #[test]
    fn refuses_patterns_over_the_limits() {
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        let e = compile(&long).unwrap_err();
        assert!(
            e.starts_with("The glob pattern is 1025 characters long, over the limit of 1024."),
            "{e}"
        );
        let huge = "*".repeat(1 << 20);
        assert!(compile(&huge).unwrap_err().contains("limit of 1024"));
        assert!(compile(&"a".repeat(MAX_PATTERN_CHARS)).is_ok());

        let nested = format!("{}a{}", "{".repeat(5000), "}".repeat(5000));
        let e = compile(&nested).unwrap_err();
        assert!(e.contains("over the limit of 1024"), "{e}");
        let nested = format!("{}a{}", "{".repeat(11), "}".repeat(11));
        let e = compile(&nested).unwrap_err();
        assert!(
            e.starts_with(
                "The glob pattern nests {…} alternatives 11 levels deep, over the limit of 10."
            ),
            "{e}"
        );
        let ten = format!("{}a,b{}", "{x,".repeat(10), "}".repeat(10));
        assert!(compile(&ten).is_ok());
        // Escaped braces do not nest.
        assert!(compile(&format!("{}a", "\\{".repeat(50))).is_ok());

        let e = Glob::call(json!({ "pattern": nested, "path": "/" })).unwrap_err();
        assert!(e.output.contains("levels deep"), "{}", e.output);
    }

    #[test]
    fn lists_every_name_escaped() {
        use std::os::unix::ffi::OsStrExt;
        let dir = TestDir::new();
        dir.write("a.txt", "");
        dir.write("z.txt", "");
        let root = std::path::PathBuf::from(dir.path(""));
        for name in [
            &b"bad\xff.txt"[..],
            b"two\nlines.txt",
            b"\x1b]0;owned\x07.txt",
        ] {
            std::fs::write(root.join(std::ffi::OsStr::from_bytes(name)), "").unwrap();
        }
        let outcome = Glob::call(json!({ "pattern": "*.txt", "path": dir.path("") })).unwrap();
        let root = dir.path("");
        let expected: Vec<String> = [
            r"\x1B]0;owned\x07.txt",
            "a.txt",
            r"bad\xFF.txt",
            r"two\x0Alines.txt",
            "z.txt",
        ]
        .iter()
        .map(|name| format!("{root}/{name}"))
        .collect();
        assert_eq!(outcome.output, format!("{}\n", expected.join("\n")));
        assert_eq!(outcome.details.unwrap()["matches"], json!(expected));
    }
}
