//! `read_file`: a page of lines from a UTF-8 text file.
//!
//! The output is the file's text exactly as stored (without line-number
//! prefixes, and with `\r\n` shown as `\n`), so that a model can copy a
//! passage into `edit_file`'s `old_text`. A page holds at most
//! [`DEFAULT_LIMIT`] lines and [`MAX_OUTPUT_BYTES`]; lines longer than
//! [`MAX_LINE_CHARS`] are cut with a marker. When the page stops before the
//! end of the file, a final bracketed note gives the `offset` to continue.

use crate::{paths, text};
use std::path::Path;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The most lines one call returns, and the default `limit`.
pub const DEFAULT_LIMIT: usize = 2000;
/// Lines longer than this many characters are cut.
pub const MAX_LINE_CHARS: usize = 2000;
/// The most bytes of file text one call returns.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// The `read_file` tool.
pub struct ReadFile;

#[derive(serde::Deserialize)]
struct Args {
    path: String,
    #[serde(default = "first_line")]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn first_line() -> usize {
    1
}

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// One page of a file.
#[derive(Debug, PartialEq)]
pub struct Page {
    /// The lines, each ending with `\n`.
    pub text: String,
    /// The 1-based number of the first line shown, or 0 when none is.
    pub first_line: usize,
    /// The number of the last line shown, or 0 when none is.
    pub last_line: usize,
    /// The number of lines in the whole file.
    pub total_lines: usize,
}

impl Page {
    /// Whether lines after `last_line` were left out.
    pub fn truncated(&self) -> bool {
        self.last_line < self.total_lines
    }
}

/// Takes at most `limit` lines of `text` from the 1-based line `offset`,
/// within [`MAX_OUTPUT_BYTES`] (but always at least one line), cutting lines
/// longer than [`MAX_LINE_CHARS`].
pub fn page(text: &str, offset: usize, limit: usize) -> Result<Page, String> {
    // One scan over the newlines counts the lines and finds where `offset` starts.
    let bytes = text.as_bytes();
    let (mut newlines, mut start) = (0, 0);
    for newline in memchr::memchr_iter(b'\n', bytes) {
        newlines += 1;
        if newlines + 1 == offset {
            start = newline + 1;
        }
    }
    let total_lines = newlines + usize::from(bytes.last().is_some_and(|&b| b != b'\n'));
    if total_lines == 0 {
        return if offset <= 1 {
            Ok(Page {
                text: String::new(),
                first_line: 0,
                last_line: 0,
                total_lines,
            })
        } else {
            Err("The file is empty; read it without an offset.".into())
        };
    }
    if offset == 0 || offset > total_lines {
        return Err(format!(
            "offset {offset} is outside the file, which has {total_lines} lines. Use an offset \
             from 1 to {total_lines}."
        ));
    }
    let mut out = String::new();
    let mut last_line = offset - 1;
    let lines = text[start..].split_inclusive('\n');
    for line in lines.take(limit.clamp(1, DEFAULT_LIMIT)) {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let shown = match text::cut_line(line, MAX_LINE_CHARS) {
            Some(start) => format!(
                "{start} … [line cut: it has {} characters]",
                line.chars().count()
            ),
            None => line.to_string(),
        };
        if last_line >= offset && out.len() + shown.len() + 1 > MAX_OUTPUT_BYTES {
            break;
        }
        out.push_str(&shown);
        out.push('\n');
        last_line += 1;
    }
    Ok(Page {
        text: out,
        first_line: offset,
        last_line,
        total_lines,
    })
}

/// The model-facing text of a page of `path`: the lines, then a note on how to
/// continue when the page stops early.
pub fn render(path: &str, page: Page) -> String {
    if page.total_lines == 0 {
        return format!("[`{}` is empty.]", crate::names::escape(path));
    }
    let mut output = page.text;
    if page.last_line < page.total_lines {
        output.push_str(&format!(
            "\n[Showing lines {}-{} of {}. Call read_file with offset={} to read more.]",
            page.first_line,
            page.last_line,
            page.total_lines,
            page.last_line + 1
        ));
    }
    output
}

impl Tool for ReadFile {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "read_file",
            "Reads a UTF-8 text file and returns its lines exactly as stored (no line-number \
             prefixes), so a passage can be copied into edit_file's old_text. Returns at most \
             2000 lines (and 256 KiB) per call, starting at the 1-based line `offset`; when \
             there is more, the output ends with a bracketed note giving the offset to \
             continue from. Lines longer than 2000 characters are cut. Binary and non-UTF-8 \
             files are refused. Paths are absolute paths inside the mounted directories. Use \
             glob or grep first to find files, and offset/limit to read large files in parts.",
        )
        .title("Read file")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Absolute path of the file, e.g. /workspace/src/main.rs."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "1-based line to start from. Default 1."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": DEFAULT_LIMIT,
                    "description": "The most lines to return. Default and maximum 2000."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The normalized absolute path." },
                "size": { "type": "integer", "minimum": 0, "description": "File size in bytes." },
                "total_lines": { "type": "integer", "minimum": 0 },
                "first_line": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "1-based number of the first line returned; 0 for an empty file."
                },
                "last_line": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Number of the last line returned; 0 for an empty file."
                },
                "truncated": {
                    "type": "boolean",
                    "description": "Lines after last_line exist but were not returned."
                }
            },
            "required": ["path", "size", "total_lines", "first_line", "last_line", "truncated"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve_file(&args.path).map_err(Outcome::text)?;
        let mut bytes = Vec::new();
        text::load(Path::new(&path), &mut bytes)
            .map_err(|error| Outcome::text(error.message(&path)))?;
        let text = text::as_text(&path, &bytes).map_err(Outcome::text)?;
        let page = page(text, args.offset, args.limit).map_err(|error| {
            let shown = crate::names::escape(&path);
            Outcome::text(format!("Cannot read `{shown}`: {error}"))
        })?;
        let details = json!({
            "path": crate::names::escape(&path),
            "size": bytes.len(),
            "total_lines": page.total_lines,
            "first_line": page.first_line,
            "last_line": page.last_line,
            "truncated": page.truncated(),
        });
        Ok(Outcome::text(render(&path, page)).with_details(details))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    fn numbered(lines: usize) -> String {
        (1..=lines).map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn pages_from_an_offset() {
        let text = numbered(10);
        let page = page(&text, 3, 2).unwrap();
        assert_eq!(page.text, "line 3\nline 4\n");
        assert_eq!(
            (page.first_line, page.last_line, page.total_lines),
            (3, 4, 10)
        );
        assert!(page.truncated());
        let output = render("/w/f", page);
        assert!(output.ends_with(
            "line 4\n\n[Showing lines 3-4 of 10. Call read_file with offset=5 to read more.]"
        ));

        let page = super::page(&text, 9, 100).unwrap();
        assert_eq!(page.text, "line 9\nline 10\n");
        assert!(!page.truncated());
        assert_eq!(render("/w/f", page), "line 9\nline 10\n");
    }

    #[test]
    fn caps_lines_by_default() {
        let text = numbered(DEFAULT_LIMIT + 5);
        let page = page(&text, 1, DEFAULT_LIMIT).unwrap();
        assert_eq!(page.last_line, DEFAULT_LIMIT);
        assert!(render("/w/f", page).ends_with("offset=2001 to read more.]"));
    }

    #[test]
    fn caps_bytes_and_cuts_long_lines() {
        let long = "x".repeat(MAX_LINE_CHARS + 10);
        let page = page(&format!("{long}\nshort"), 1, 10).unwrap();
        assert!(page.text.starts_with(&"x".repeat(MAX_LINE_CHARS)));
        assert!(
            page.text
                .contains(" … [line cut: it has 2010 characters]\nshort\n")
        );

        let line = format!("{}\n", "y".repeat(1000));
        let text = line.repeat(1000); // 1 MB of 1000-byte lines
        let page = super::page(&text, 1, DEFAULT_LIMIT).unwrap();
        assert!(page.text.len() <= MAX_OUTPUT_BYTES);
        assert_eq!(page.last_line, MAX_OUTPUT_BYTES / 1001);
        assert!(page.truncated());
    }

    #[test]
    fn handles_line_endings_and_empty_files() {
        let page = page("a\r\nb", 1, 10).unwrap();
        assert_eq!(page.text, "a\nb\n");
        assert_eq!(page.total_lines, 2);
        let empty = super::page("", 1, 10).unwrap();
        assert_eq!(
            (empty.first_line, empty.last_line, empty.truncated()),
            (0, 0, false)
        );
        assert_eq!(render("/w/e", empty), "[`/w/e` is empty.]");
        assert!(super::page("", 2, 10).unwrap_err().contains("empty"));
    }

    #[test]
    fn refuses_offsets_past_the_end() {
        let e = page(&numbered(3), 4, 10).unwrap_err();
        assert!(
            e.contains("offset 4 is outside the file, which has 3 lines"),
            "{e}"
        );
    }

    #[test]
    fn reads_through_the_tool() {
        let dir = TestDir::new();
        dir.write("a.txt", numbered(3));
        let path = dir.path("a.txt");
        let outcome = ReadFile::call(json!({ "path": path, "offset": 2 })).unwrap();
        assert_eq!(outcome.output, "line 2\nline 3\n");
        assert_eq!(
            outcome.details,
            Some(json!({
                "path": path, "size": 21, "total_lines": 3,
                "first_line": 2, "last_line": 3, "truncated": false
            }))
        );

        dir.write("bin", b"\x7fELF\0\0");
        let e = ReadFile::call(json!({ "path": dir.path("bin") })).unwrap_err();
        assert!(e.output.contains("binary"), "{}", e.output);
        let e = ReadFile::call(json!({ "path": dir.path("missing") })).unwrap_err();
        assert!(e.output.contains("does not exist"), "{}", e.output);
        let e = ReadFile::call(json!({ "path": dir.path("") })).unwrap_err();
        assert!(e.output.contains("is a directory"), "{}", e.output);
        let e = ReadFile::call(json!({ "path": "a.txt" })).unwrap_err();
        assert!(e.output.contains("relative path"), "{}", e.output);
        let e = ReadFile::call(json!({ "path": path, "offset": 9 })).unwrap_err();
        assert!(e.output.starts_with("Cannot read `"), "{}", e.output);
    }

    #[test]
    fn messages_escape_the_path() {
        let dir = TestDir::new();
        let e = ReadFile::call(json!({ "path": dir.path("no\nsuch") })).unwrap_err();
        assert_eq!(
            e.output,
            format!(
                "Could not read `{}/no\\x0Asuch`: it does not exist. Check the path with \
                 list_dir or glob.",
                dir.path("")
            )
        );
    }
}
