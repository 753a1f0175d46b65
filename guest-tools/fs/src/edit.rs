//! `edit_file`: replaces an exact passage of a text file and shows the diff.
//!
//! `old_text` must occur exactly once, unless `replace_all` is set, so that an
//! edit never lands somewhere the model did not look. One forgiveness: when
//! the file uses `\r\n` line endings and `old_text` uses `\n` (as `read_file`
//! shows them), the edit is applied with `\r\n` in both texts.

use crate::{paths, text};
use similar::TextDiff;
use std::path::Path;
use std::time::Duration;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// Diffs longer than this are cut, in the output and in the details.
pub const MAX_DIFF_BYTES: usize = 64 * 1024;
/// How many match locations an ambiguity error lists.
const LISTED_MATCHES: usize = 10;

/// The `edit_file` tool.
pub struct EditFile;

#[derive(serde::Deserialize)]
struct Args {
    path: String,
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

/// A successful replacement.
#[derive(Debug, PartialEq)]
pub struct Edit {
    /// The file's new text.
    pub text: String,
    /// How many occurrences were replaced.
    pub replacements: usize,
}

/// Why an edit could not be applied.
#[derive(Debug, PartialEq)]
pub enum Mismatch {
    /// `old_text` is empty.
    Empty,
    /// `old_text` and `new_text` are the same.
    Unchanged,
    /// `old_text` does not occur.
    NotFound,
    /// `old_text` occurs `count` times (first ones on `lines`) without `replace_all`.
    Ambiguous { count: usize, lines: Vec<usize> },
}

impl Mismatch {
    /// What went wrong with the edit of `path`, and what to do instead.
    pub fn message(&self, path: &str) -> String {
        let path = crate::names::escape(path);
        match self {
            Mismatch::Empty => "old_text is empty. Pass the exact text to replace, copied from \
                                read_file; to replace a whole file, use write_file."
                .into(),
            Mismatch::Unchanged => {
                "old_text and new_text are identical, so there is nothing to change.".into()
            }
            Mismatch::NotFound => format!(
                "old_text was not found in `{path}` (0 matches). It must match the file \
                 exactly, including whitespace, indentation and line breaks: read the file \
                 again with read_file and copy the passage from it."
            ),
            Mismatch::Ambiguous { count, lines } => {
                let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                let more = if *count > LISTED_MATCHES { ", …" } else { "" };
                format!(
                    "old_text was found {count} times in `{path}` (at lines {}{more}). Include \
                     more surrounding lines in old_text so that it matches exactly once, or \
                     set replace_all=true to replace all {count} occurrences.",
                    lines.join(", ")
                )
            }
        }
    }
}

/// Replaces `old` with `new` in `text`: the single occurrence, or every one
/// with `replace_all`.
pub fn apply(text: &str, old: &str, new: &str, replace_all: bool) -> Result<Edit, Mismatch> {
    if old.is_empty() {
        return Err(Mismatch::Empty);
    }
    if old == new {
        return Err(Mismatch::Unchanged);
    }
    match replace(text, old, new, replace_all) {
        Err(Mismatch::NotFound)
            if text.contains("\r\n") && old.contains('\n') && !old.contains('\r') =>
        {
            let crlf = |s: &str| s.replace('\n', "\r\n");
            replace(text, &crlf(old), &crlf(new), replace_all)
        }
        result => result,
    }
}

fn replace(text: &str, old: &str, new: &str, replace_all: bool) -> Result<Edit, Mismatch> {
    let count = text.matches(old).count();
    match count {
        0 => Err(Mismatch::NotFound),
        1 => Ok(Edit {
            text: text.replacen(old, new, 1),
            replacements: 1,
        }),
        _ if replace_all => Ok(Edit {
            text: text.replace(old, new),
            replacements: count,
        }),
        _ => {
            let bytes = text.as_bytes();
            let (mut line, mut counted) = (1, 0);
            let mut lines: Vec<usize> = text
                .match_indices(old)
                .take(LISTED_MATCHES)
                .map(|(at, _)| {
                    line += memchr::memchr_iter(b'\n', &bytes[counted..at]).count();
                    counted = at;
                    line
                })
                .collect();
            lines.dedup(); // several matches on one line
            Err(Mismatch::Ambiguous { count, lines })
        }
    }
}

/// A unified diff (3 lines of context) from `old` to `new`, headed with
/// `path`, cut after [`MAX_DIFF_BYTES`].
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    // The timeout bounds the diff of large, heavily changed files: past it the
    // diff is still correct, just less minimal.
    let diff = TextDiff::configure()
        .timeout(Duration::from_secs(2))
        .diff_lines(old, new);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(path, path)
        .to_string();
    if text.len() > MAX_DIFF_BYTES {
        // Cut after a newline, which is always a character boundary.
        let cut = memchr::memrchr(b'\n', &text.as_bytes()[..MAX_DIFF_BYTES]).map_or(0, |at| at + 1);
        let rest = text::count_lines(&text.as_bytes()[cut..]);
        text.truncate(cut);
        text.push_str(&format!("[… diff cut: {rest} more lines]\n"));
    }
    text
}

impl Tool for EditFile {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "edit_file",
            "Replaces an exact passage of a UTF-8 text file and returns a unified diff of the \
             change. old_text must match the file exactly (whitespace and indentation \
             included) and occur exactly once; include a few surrounding lines to make it \
             unique, or set replace_all=true to replace every occurrence. Copy old_text from \
             read_file's output. Use write_file to create a file or rewrite it entirely. \
             Paths are absolute paths inside the mounted directories.",
        )
        .title("Edit file")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Absolute path of the file, e.g. /workspace/src/lib.rs."
                },
                "old_text": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The exact text to replace."
                },
                "new_text": {
                    "type": "string",
                    "description": "The replacement; empty to delete old_text."
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one. \
                                    Default false."
                }
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The normalized absolute path." },
                "replacements": { "type": "integer", "minimum": 1 },
                "diff": {
                    "type": "string",
                    "description": "Unified diff of the change, cut after 64 KiB."
                }
            },
            "required": ["path", "replacements", "diff"],
            "additionalProperties": false
        }))
        .destructive()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve_file(&args.path).map_err(Outcome::text)?;
        // Checked before it is opened: opening a FIFO would wait for a writer.
        if let Ok(metadata) = std::fs::metadata(&path)
            && !metadata.is_file()
        {
            let refusal = crate::write::not_regular(&path, Path::new(&path), &metadata);
            return Err(Outcome::text(refusal));
        }
        let mut bytes = Vec::new();
        text::load(Path::new(&path), &mut bytes)
            .map_err(|error| Outcome::text(error.message(&path)))?;
        let old = text::as_text(&path, &bytes).map_err(Outcome::text)?;
        let edit = apply(old, &args.old_text, &args.new_text, args.replace_all)
            .map_err(|mismatch| Outcome::text(mismatch.message(&path)))?;
        // Everything reported is computed first, the diff included (the
        // costly part on a large file): a call that fails, or runs out of
        // fuel, before the last step leaves the file as it was.
        let shown = crate::names::escape(&path);
        let diff = unified_diff(&shown, old, &edit.text);
        let n = edit.replacements;
        let occurrences = if n == 1 { "occurrence" } else { "occurrences" };
        let outcome = Outcome::text(format!(
            "Replaced {n} {occurrences} in `{shown}`.\n\n{diff}"
        ))
        .with_details(json!({ "path": shown, "replacements": n, "diff": diff }));
        crate::write::replace_file(&path, edit.text.as_bytes()).map_err(Outcome::text)?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    #[test]
    fn replaces_a_unique_match() {
        let edit = apply("a\nb\nc\n", "b\n", "B\nB2\n", false).unwrap();
        assert_eq!(
            edit,
            Edit {
                text: "a\nB\nB2\nc\n".into(),
                replacements: 1
            }
        );
        let edit = apply("keep this", " this", "", false).unwrap();
        assert_eq!(edit.text, "keep");
    }

    #[test]
    fn counts_matches() {
        let text = "x = 1\ny = 2\nx = 1\n\nx = 1\n";
        assert_eq!(
            apply(text, "x = 1", "x = 3", false),
            Err(Mismatch::Ambiguous {
                count: 3,
                lines: vec![1, 3, 5]
            })
        );
        let edit = apply(text, "x = 1", "x = 3", true).unwrap();
        assert_eq!(edit.replacements, 3);
        assert_eq!(edit.text, "x = 3\ny = 2\nx = 3\n\nx = 3\n");
        assert_eq!(apply(text, "z", "w", true), Err(Mismatch::NotFound));
        assert_eq!(apply(text, "", "w", true), Err(Mismatch::Empty));
        assert_eq!(apply(text, "y", "y", false), Err(Mismatch::Unchanged));
        assert_eq!(
            apply("ee\ne", "e", "E", false),
            Err(Mismatch::Ambiguous {
                count: 3,
                lines: vec![1, 2]
            })
        );
        // Matches do not overlap, as with str::replace.
        assert_eq!(apply("aaaa", "aa", "b", true).unwrap().replacements, 2);
    }

    #[test]
    fn ambiguity_lists_the_first_lines() {
        let text = "t\n".repeat(12);
        let Err(mismatch) = apply(&text, "t", "u", false) else {
            panic!("ambiguous")
        };
        let message = mismatch.message("/w/f");
        assert!(
            message.starts_with(
                "old_text was found 12 times in `/w/f` (at lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)"
            ),
            "{message}"
        );
        assert!(message.contains("replace_all=true"), "{message}");
        assert!(Mismatch::NotFound.message("/w/f").contains("(0 matches)"));
    }

    #[test]
    fn tolerates_crlf_files() {
        let edit = apply("one\r\ntwo\r\nthree\r\n", "one\ntwo\n", "1\n2\n", false).unwrap();
        assert_eq!(edit.text, "1\r\n2\r\nthree\r\n");
    }

    #[test]
    fn diffs_the_change() {
        let diff = unified_diff("/w/f.txt", "a\nb\nc\n", "a\nB\nc\n");
        assert_eq!(
            diff,
            "--- /w/f.txt\n+++ /w/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        assert_eq!(unified_diff("/w/f", "same\n", "same\n"), "");
    }

    #[test]
    fn cuts_huge_diffs_at_line_ends() {
        // One huge line of two-byte characters: no newline before the cut.
        let old = "é".repeat(MAX_DIFF_BYTES);
        let diff = unified_diff("/w/f", &old, "x");
        assert!(
            diff.starts_with("--- /w/f\n+++ /w/f\n@@ -1 +1 @@\n[… diff cut: "),
            "{diff}"
        );
    }

    #[test]
    fn cuts_huge_diffs() {
        let old = "old line\n".repeat(20_000);
        let new = "new line\n".repeat(20_000);
        let diff = unified_diff("/w/f", &old, &new);
        assert!(diff.len() <= MAX_DIFF_BYTES + 100);
        assert!(
            diff.ends_with("more lines]\n"),
            "{}",
            &diff[diff.len() - 100..]
        );
    }

    #[test]
    fn edits_through_the_tool() {
        let dir = TestDir::new();
        dir.write("f.rs", "fn main() {\n    println!(\"hi\");\n}\n");
        let path = dir.path("f.rs");
        let outcome = EditFile::call(json!({
            "path": path, "old_text": "\"hi\"", "new_text": "\"hello\""
        }))
        .unwrap();
        assert_eq!(
            dir.read("f.rs"),
            "fn main() {\n    println!(\"hello\");\n}\n"
        );
        assert!(
            outcome
                .output
                .starts_with(&format!("Replaced 1 occurrence in `{path}`.\n\n---"))
        );
        let details = outcome.details.unwrap();
        assert_eq!(details["replacements"], 1);
        assert!(
            details["diff"]
                .as_str()
                .unwrap()
                .contains("+    println!(\"hello\");\n")
        );

        let e = EditFile::call(json!({ "path": path, "old_text": "nope", "new_text": "" }))
            .unwrap_err();
        assert!(e.output.contains("not found"), "{}", e.output);
        assert_eq!(
            dir.read("f.rs"),
            "fn main() {\n    println!(\"hello\");\n}\n"
        );
    }

    #[test]
    fn a_failed_edit_leaves_the_file_as_it_was() {
        let dir = TestDir::new();
        dir.write("f.txt", "a a a\n");
        let e = EditFile::call(json!({
            "path": dir.path("f.txt"), "old_text": "a", "new_text": "b"
        }))
        .unwrap_err();
        assert!(e.output.contains("found 3 times"), "{}", e.output);
        assert_eq!(dir.read("f.txt"), "a a a\n");
        let outcome = EditFile::call(json!({
            "path": dir.path("f.txt"), "old_text": "a", "new_text": "b", "replace_all": true
        }))
        .unwrap();
        assert_eq!(outcome.details.unwrap()["replacements"], 3);
        assert_eq!(dir.read("f.txt"), "b b b\n");
        let names: Vec<_> = std::fs::read_dir(dir.path("")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[test]
    fn messages_escape_the_path() {
        let dir = TestDir::new();
        dir.write("a\x1b]0;x\x07", "one\n");
        let path = dir.path("a\x1b]0;x\x07");
        let outcome =
            EditFile::call(json!({ "path": path, "old_text": "one", "new_text": "two" })).unwrap();
        let shown = format!("{}/a\\x1B]0;x\\x07", dir.path(""));
        assert!(
            outcome.output.starts_with(&format!(
                "Replaced 1 occurrence in `{shown}`.\n\n--- {shown}\n"
            )),
            "{}",
            outcome.output
        );
        let e = EditFile::call(json!({ "path": path, "old_text": "nope", "new_text": "" }))
            .unwrap_err();
        assert!(
            e.output.contains(&format!("in `{shown}` (0 matches)")),
            "{}",
            e.output
        );
    }
}
