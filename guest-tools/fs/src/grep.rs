//! `grep`: regular-expression search over a file or a tree, ripgrep style.
//!
//! Each file is read once and the regex runs over the whole buffer (not line
//! by line); line numbers come from counting newlines incrementally between
//! matches, and after a match the search resumes at the next line. That keeps
//! the work linear in the bytes searched, as fuel metering demands. The
//! `regex` crate guarantees linear-time matching, so no pattern can blow up.
//!
//! A match is reported on the line where it starts. Files with a NUL byte in
//! their first 8 KiB are skipped as binary, symlinks are not followed and
//! `.git` directories are skipped.

use crate::walk::{self, Flow, Kind, Problems};
use crate::{glob, names, paths, text};
use globset::GlobMatcher;
use memchr::{memchr, memrchr};
use regex::bytes::{Regex, RegexBuilder};
use std::path::Path;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The default and the largest `max_results`.
pub const DEFAULT_MAX_RESULTS: usize = 200;
pub const MAX_RESULTS: usize = 1000;
/// The most context lines around a match.
pub const MAX_CONTEXT: usize = 10;
/// Lines are cut after this many bytes in the output and the details.
pub const MAX_LINE_BYTES: usize = 300;
/// The output stops at the first match past this size.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// The longest regular expression accepted, in characters.
pub const MAX_PATTERN_CHARS: usize = 4096;
/// The most memory the compiled regular expression may take (the regex
/// crate's `size_limit`).
pub const MAX_REGEX_BYTES: usize = 8 << 20;
/// The deepest nesting of groups, repetitions and alternations (the regex
/// crate's `nest_limit`).
pub const MAX_REGEX_NESTING: u32 = 100;

/// The `grep` tool.
pub struct Grep;

#[derive(serde::Deserialize)]
struct Args {
    pattern: String,
    #[serde(default = "root")]
    path: String,
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    context: usize,
    #[serde(default = "default_max_results")]
    max_results: usize,
}

fn root() -> String {
    "/".into()
}

fn default_max_results() -> usize {
    DEFAULT_MAX_RESULTS
}

/// Compiles `pattern` with `^` and `$` matching at line boundaries (`\r\n`
/// included), within [`MAX_PATTERN_CHARS`], [`MAX_REGEX_BYTES`] and
/// [`MAX_REGEX_NESTING`].
pub fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, String> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "The regular expression is {chars} characters long, over the limit of \
             {MAX_PATTERN_CHARS}. Search for a shorter, distinctive part of the text."
        ));
    }
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .multi_line(true)
        .crlf(true)
        .size_limit(MAX_REGEX_BYTES)
        .nest_limit(MAX_REGEX_NESTING)
        .build()
        .map_err(|error| match error {
            regex::Error::CompiledTooBig(limit) => format!(
                "The regular expression is too large once compiled: over the limit of {} MiB. \
                 Use a simpler pattern: fewer or smaller repetitions such as {{1000}}, fewer \
                 alternatives, or a narrower class than \\w or . under case_insensitive.",
                limit >> 20
            ),
            error => format!(
                "Invalid regular expression: {error}\nThe syntax is Rust's regex crate (like \
                 RE2: no look-around or backreferences). Escape ( ) [ ] {{ }} . * + ? | ^ $ \\ \
                 with a backslash to match them literally. Groups may nest up to \
                 {MAX_REGEX_NESTING} levels."
            ),
        })
}

/// A matching line: its 1-based number and its byte range, newline excluded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineMatch {
    pub line: usize,
    pub start: usize,
    pub end: usize,
}

/// The lines of `haystack` on which a match of `regex` starts, at most `limit`.
pub fn search_lines(regex: &Regex, haystack: &[u8], limit: usize) -> Vec<LineMatch> {
    let mut found = Vec::new();
    let (mut line, mut counted) = (1, 0);
    let mut at = 0;
    while found.len() < limit && at <= haystack.len() {
        let Some(m) = regex.find_at(haystack, at) else {
            break;
        };
        let start = memrchr(b'\n', &haystack[..m.start()]).map_or(0, |i| i + 1);
        if start == haystack.len() {
            break; // an empty match after the final newline is not on a line
        }
        let end = memchr(b'\n', &haystack[m.start()..]).map_or(haystack.len(), |i| m.start() + i);
        line += memchr::memchr_iter(b'\n', &haystack[counted..start]).count();
        counted = start;
        found.push(LineMatch { line, start, end });
        at = end + 1;
    }
    found
}

/// Appends ripgrep-style lines for one file's `matches` to `out`:
/// `path:12:text` for a matching line, `path-11-text` for a context line, and
/// `--` between groups that are not adjacent. Stops before the first match
/// that would start past `max_len` bytes of `out`, and returns how many
/// matches it wrote.
pub fn render(
    out: &mut String,
    path: &str,
    haystack: &[u8],
    matches: &[LineMatch],
    context: usize,
    max_len: usize,
) -> usize {
    let mut printed = 0; // the last line number written, 0 for none
    for (i, m) in matches.iter().enumerate() {
        if out.len() >= max_len {
            return i;
        }
        // Context before the match, without repeating lines already written.
        let mut before = Vec::new();
        let (mut number, mut start) = (m.line, m.start);
        while before.len() < context && number > 1 && number - 1 > printed {
            let end = start - 1; // the newline ending the previous line
            start = memrchr(b'\n', &haystack[..end]).map_or(0, |i| i + 1);
            number -= 1;
            before.push((number, start, end));
        }
        let first = before.last().map_or(m.line, |&(number, _, _)| number);
        if context > 0 && printed > 0 && first > printed + 1 {
            out.push_str("--\n");
        }
        for &(number, start, end) in before.iter().rev() {
            push_line(out, path, '-', number, &haystack[start..end]);
        }
        push_line(out, path, ':', m.line, &haystack[m.start..m.end]);
        printed = m.line;
        // Context after the match, up to the next match.
        let next = matches.get(i + 1).map_or(usize::MAX, |next| next.line);
        let mut end = m.end;
        while printed < m.line + context && printed + 1 < next && end + 1 < haystack.len() {
            let start = end + 1;
            end = memchr(b'\n', &haystack[start..]).map_or(haystack.len(), |i| start + i);
            printed += 1;
            push_line(out, path, '-', printed, &haystack[start..end]);
        }
    }
    matches.len()
}

/// Writes one line; `path` is already escaped.
fn push_line(out: &mut String, path: &str, separator: char, number: usize, line: &[u8]) {
    let text = text::display_line(line, MAX_LINE_BYTES);
    out.push_str(&format!("{path}{separator}{number}{separator}{text}\n"));
}

/// One match in the details.
#[derive(Debug, PartialEq, serde::Serialize)]
pub struct Match {
    pub path: String,
    pub line: usize,
    pub text: String,
}

/// A search in progress over one or more files.
pub struct Search {
    regex: Regex,
    context: usize,
    max_results: usize,
    /// The model-facing text.
    pub output: String,
    pub matches: Vec<Match>,
    pub files_searched: usize,
    pub files_matched: usize,
    /// Stopped at `max_results`.
    pub hit_max_results: bool,
    /// Stopped at [`MAX_OUTPUT_BYTES`].
    pub hit_output_limit: bool,
}

impl Search {
    pub fn new(regex: Regex, context: usize, max_results: usize) -> Self {
        Search {
            regex,
            context: context.min(MAX_CONTEXT),
            max_results: max_results.clamp(1, MAX_RESULTS),
            output: String::new(),
            matches: Vec::new(),
            files_searched: 0,
            files_matched: 0,
            hit_max_results: false,
            hit_output_limit: false,
        }
    }

    /// Whether the search has stopped, at a limit.
    pub fn is_done(&self) -> bool {
        self.hit_max_results || self.hit_output_limit
    }

    /// Searches one file's content; binary content is skipped and `false`
    /// returned. `path` is shown escaped.
    pub fn file(&mut self, path: &str, haystack: &[u8]) -> bool {
        self.file_at(path.as_ref(), haystack)
    }

    /// [`Search::file`] for a path that may not be UTF-8.
    pub fn file_at(&mut self, path: &Path, haystack: &[u8]) -> bool {
        if text::is_binary(haystack) {
            return false;
        }
        self.files_searched += 1;
        let remaining = self.max_results - self.matches.len();
        // One match more than needed tells whether the cap cut anything.
        let mut found = search_lines(&self.regex, haystack, remaining + 1);
        if found.len() > remaining {
            found.truncate(remaining);
            self.hit_max_results = true;
        }
        if found.is_empty() {
            return true;
        }
        self.files_matched += 1;
        let path = names::escape_path(path);
        let path = path.as_ref();
        if self.context > 0 && !self.output.is_empty() {
            self.output.push_str("--\n");
        }
        let written = render(
            &mut self.output,
            path,
            haystack,
            &found,
            self.context,
            MAX_OUTPUT_BYTES,
        );
        if written < found.len() {
            self.hit_output_limit = true;
        }
        self.matches.extend(found[..written].iter().map(|m| Match {
            path: path.to_string(),
            line: m.line,
            text: text::display_line(&haystack[m.start..m.end], MAX_LINE_BYTES),
        }));
        true
    }
}

/// Selects files by `glob`: against the path relative to the searched
/// directory when the glob has a `/`, else against the file name.
pub struct FileFilter {
    matcher: GlobMatcher,
    whole_path: bool,
}

impl FileFilter {
    pub fn new(glob: &str) -> Result<Self, String> {
        Ok(FileFilter {
            matcher: glob::compile(glob)?,
            whole_path: glob.contains('/'),
        })
    }

    pub fn accepts(&self, path: &Path, searched_dir: &str) -> bool {
        if self.whole_path {
            self.matcher
                .is_match(path.strip_prefix(searched_dir).unwrap_or(path))
        } else {
            path.file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        }
    }
}

impl Tool for Grep {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "grep",
            "Searches file contents for a regular expression (Rust regex syntax, like RE2) in \
             one file or recursively in a directory (default /, every mounted directory). \
             Prints matching lines as `path:line:text`, and with `context` the lines around \
             them as `path-line-text`, with `--` between groups. Use `glob` to restrict which \
             files are searched (e.g. *.rs, or src/**/*.ts for a path relative to `path`). ^ \
             and $ match at line ends; a match is reported on the line where it starts. \
             Binary files, symlinks and .git directories are skipped. Returns at most \
             max_results matching lines (default 200, at most 1000), lines cut at 300 bytes. \
             In paths and lines, a control character other than tab or a byte that is not \
             UTF-8 is shown as \\xNN. The pattern may be up to 4096 characters (compiled \
             within 8 MiB, groups nested up to 100 levels). Use glob to find files by name.",
        )
        .title("Search file contents")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_PATTERN_CHARS,
                    "description": "Regular expression, e.g. fn\\s+main or (?i)todo. At most \
                                    4096 characters."
                },
                "path": {
                    "type": "string",
                    "description": "Absolute path of a file or directory to search. Default /, \
                                    every mounted directory."
                },
                "glob": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": glob::MAX_PATTERN_CHARS,
                    "description": "Only search files matching this glob: by file name \
                                    (*.rs), or by path relative to `path` when it has a / \
                                    (src/**/*.rs). At most 1024 characters."
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Ignore case. Default false."
                },
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_CONTEXT,
                    "description": "Lines of context before and after each match. Default 0."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RESULTS,
                    "description": "The most matching lines to return. Default 200."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "matches": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": { "type": "string" },
                            "line": { "type": "integer", "minimum": 1 },
                            "text": {
                                "type": "string",
                                "description": "The matching line, cut after 300 bytes."
                            }
                        },
                        "required": ["path", "line", "text"],
                        "additionalProperties": false
                    }
                },
                "files_searched": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Text files searched (binary files are skipped)."
                },
                "files_matched": { "type": "integer", "minimum": 0 },
                "match_count": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Matching lines returned."
                },
                "truncated": {
                    "type": "boolean",
                    "description": "The search stopped at max_results or at the output size \
                                    limit; more matches may exist."
                }
            },
            "required": ["matches", "files_searched", "files_matched", "match_count", "truncated"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve(&args.path).map_err(Outcome::text)?;
        let regex = compile(&args.pattern, args.case_insensitive).map_err(Outcome::text)?;
        let filter = args
            .glob
            .as_deref()
            .map(FileFilter::new)
            .transpose()
            .map_err(Outcome::text)?;
        let mut search = Search::new(regex, args.context, args.max_results);
        let mut skipped = Skipped::default();
        let mut buffer = Vec::new();

        let roots = paths::walk_roots(&path);
        let single_file = roots == [path.as_str()]
            && std::fs::metadata(&path)
                .map_err(|error| Outcome::text(paths::io_error("search", &path, &error)))?
                .is_file();
        if single_file {
            text::load(Path::new(&path), &mut buffer)
                .map_err(|error| Outcome::text(error.message(&path)))?;
            if !search.file(&path, &buffer) {
                return Err(Outcome::text(format!(
                    "`{}` looks like a binary file (it contains NUL bytes), so it was not \
                     searched.",
                    names::escape(&path)
                )));
            }
        } else {
            for root in &roots {
                let options = walk::Options {
                    min_depth: 0,
                    max_depth: usize::MAX,
                    skip_git: true,
                };
                let walked = walk::walk(Path::new(root), options, &mut skipped.problems, |entry| {
                    let file = entry.path.as_path();
                    if entry.kind != Kind::File
                        || filter.as_ref().is_some_and(|f| !f.accepts(file, &path))
                    {
                        return Flow::Continue;
                    }
                    match text::load(file, &mut buffer) {
                        Ok(()) => {
                            search.file_at(file, &buffer);
                        }
                        Err(text::LoadError::TooLarge(_)) => skipped.too_large += 1,
                        Err(text::LoadError::Io(_)) => skipped.unloadable += 1,
                    }
                    if search.is_done() {
                        Flow::Stop
                    } else {
                        Flow::Continue
                    }
                });
                match walked {
                    Ok(Flow::Stop) => break,
                    Ok(Flow::Continue) => {}
                    Err(_) => skipped.problems.unreadable += 1,
                }
            }
        }
        Ok(finish(search, &args.pattern, &path, &skipped))
    }
}

/// Files a walk could not search.
#[derive(Debug, Default)]
struct Skipped {
    /// What the walk could not read.
    problems: Problems,
    /// Files found that could not be opened.
    unloadable: usize,
    too_large: usize,
}

/// The outcome of a finished search: the output with its notes, and details.
fn finish(search: Search, pattern: &str, path: &str, skipped: &Skipped) -> Outcome {
    let truncated = search.is_done();
    let mut output = search.output;
    if search.matches.is_empty() {
        let files = match search.files_searched {
            1 => "1 file".to_string(),
            n => format!("{n} files"),
        };
        output.push_str(&format!(
            "No matches for `{}` in {files} searched under `{}`.\n",
            names::escape(pattern),
            names::escape(path)
        ));
    }
    if search.hit_max_results {
        output.push_str(&format!(
            "[Stopped after {} matching lines (max_results). Narrow the pattern, path or glob \
             to see the rest, or raise max_results (at most {MAX_RESULTS}).]\n",
            search.matches.len()
        ));
    } else if search.hit_output_limit {
        output.push_str(&format!(
            "[Stopped after {} matching lines: the output reached {} KiB. Narrow the search or \
             use less context.]\n",
            search.matches.len(),
            MAX_OUTPUT_BYTES / 1024
        ));
    }
    let problems = Problems {
        unreadable: skipped.problems.unreadable + skipped.unloadable,
        ..skipped.problems
    };
    output.push_str(&problems.notes());
    if skipped.too_large > 0 {
        output.push_str(&format!(
            "[{} files over {} MiB were skipped.]\n",
            skipped.too_large,
            text::MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    let details = json!({
        "match_count": search.matches.len(),
        "files_searched": search.files_searched,
        "files_matched": search.files_matched,
        "truncated": truncated,
        "matches": search.matches,
    });
    Outcome::text(output).with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    fn lines(pattern: &str, haystack: &str) -> Vec<usize> {
        let regex = compile(pattern, false).unwrap();
        search_lines(&regex, haystack.as_bytes(), usize::MAX)
            .iter()
            .map(|m| m.line)
            .collect()
    }

    #[test]
    fn finds_matching_lines_once_each() {
        let text = "alpha\nbeta beta\ngamma\n\ndelta beta";
        assert_eq!(lines("beta", text), [2, 5]);
        assert_eq!(lines("^", text), [1, 2, 3, 4, 5]);
        assert_eq!(lines("^$", text), [4]);
        assert_eq!(lines("a$", text), [1, 2, 3, 5]);
        assert_eq!(lines("", "a\nb\n"), [1, 2]);
        assert_eq!(lines("x", ""), Vec::<usize>::new());
        assert_eq!(lines("", ""), Vec::<usize>::new());
        assert_eq!(lines("end$", "the end\r\nno\r\n"), [1]);
        // A match spanning lines is reported where it starts.
        assert_eq!(lines("a\\nb", "x\na\nb\n"), [2]);
        let regex = compile("beta", false).unwrap();
        let found = search_lines(&regex, text.as_bytes(), 1);
        assert_eq!(
            found,
            [LineMatch {
                line: 2,
                start: 6,
                end: 15
            }]
        );
    }

    #[test]
    fn case_insensitive() {
        let regex = compile("hello", true).unwrap();
        assert_eq!(search_lines(&regex, b"HeLLo\n", 10).len(), 1);
    }

    #[test]
    fn reports_invalid_regexes() {
        let e = compile("fn(", false).unwrap_err();
        assert!(
            e.starts_with("Invalid regular expression: regex parse error"),
            "{e}"
        );
        assert!(e.contains("unclosed group"), "{e}");
    }

    fn rendered(haystack: &str, pattern: &str, context: usize) -> String {
        let regex = compile(pattern, false).unwrap();
        let found = search_lines(&regex, haystack.as_bytes(), usize::MAX);
        let mut out = String::new();
        assert_eq!(
            render(
                &mut out,
                "f",
                haystack.as_bytes(),
                &found,
                context,
                usize::MAX
            ),
            found.len()
        );
        out
    }

    #[test]
    fn renders_ripgrep_style() {
        let text = "1\n2\nhit 3\n4\n5\n6\n7\nhit 8\nhit 9\n10\n";
        assert_eq!(
            rendered(text, "hit", 0),
            "f:3:hit 3\nf:8:hit 8\nf:9:hit 9\n"
        );
        assert_eq!(
            rendered(text, "hit", 1),
            "f-2-2\nf:3:hit 3\nf-4-4\n--\nf-7-7\nf:8:hit 8\nf:9:hit 9\nf-10-10\n"
        );
        // Overlapping context is merged, not repeated.
        assert_eq!(
            rendered(text, "hit", 2),
            "f-1-1\nf-2-2\nf:3:hit 3\nf-4-4\nf-5-5\nf-6-6\nf-7-7\nf:8:hit 8\nf:9:hit 9\nf-10-10\n"
        );
        // Context stops at the file's edges.
        assert_eq!(rendered("hit\nlast", "hit", 3), "f:1:hit\nf-2-last\n");
        assert_eq!(rendered("a\nhit\n", "hit", 3), "f-1-a\nf:2:hit\n");
    }

    #[test]
    fn render_stops_at_the_size_limit() {
        let text = "hit\n".repeat(10);
        let regex = compile("hit", false).unwrap();
        let found = search_lines(&regex, text.as_bytes(), usize::MAX);
        let mut out = String::new();
        assert_eq!(render(&mut out, "f", text.as_bytes(), &found, 0, 20), 3);
        assert_eq!(out, "f:1:hit\nf:2:hit\nf:3:hit\n");
    }

    #[test]
    fn search_caps_results_across_files() {
        let mut search = Search::new(compile("x", false).unwrap(), 0, 3);
        assert!(search.file("/a", b"x\nx\n"));
        assert!(!search.is_done());
        assert!(!search.file("/bin", b"x\0x"), "binary files are skipped");
        assert!(search.file("/b", b"x\nx\n"));
        assert!(search.hit_max_results);
        assert_eq!(search.output, "/a:1:x\n/a:2:x\n/b:1:x\n");
        assert_eq!((search.files_searched, search.files_matched), (2, 2));

        let mut exact = Search::new(compile("x", false).unwrap(), 0, 2);
        exact.file("/a", b"x\nx\n");
        assert!(
            !exact.is_done(),
            "reaching max_results exactly truncates nothing"
        );
    }

    #[test]
    fn separates_files_when_showing_context() {
        let mut search = Search::new(compile("x", false).unwrap(), 1, 10);
        search.file("/a", b"x\n");
        search.file("/b", b"y\nx\n");
        assert_eq!(search.output, "/a:1:x\n--\n/b-1-y\n/b:2:x\n");
    }

    #[test]
    fn filters_files_by_name_or_relative_path() {
        let by_name = FileFilter::new("*.rs").unwrap();
        assert!(by_name.accepts(Path::new("/w/src/deep/a.rs"), "/w"));
        assert!(!by_name.accepts(Path::new("/w/a.rs.bak"), "/w"));
        let by_path = FileFilter::new("src/**/*.rs").unwrap();
        assert!(by_path.accepts(Path::new("/w/src/deep/a.rs"), "/w"));
        assert!(!by_path.accepts(Path::new("/w/tests/a.rs"), "/w"));
    }

    #[test]
    fn greps_through_the_tool() {
        let dir = TestDir::new();
        dir.write("src/main.rs", "fn main() {\n    todo!()\n}\n");
        dir.write("src/lib.rs", "// TODO: docs\npub fn f() {}\n");
        dir.write("README.md", "todo list\n");
        dir.write("logo.png", b"\x89PNG\0\0todo");
        dir.write(".git/HEAD", "todo\n");

        let outcome = Grep::call(json!({
            "pattern": "todo", "path": dir.path(""), "case_insensitive": true, "glob": "*.rs"
        }))
        .unwrap();
        let (lib, main) = (dir.path("src/lib.rs"), dir.path("src/main.rs"));
        assert_eq!(
            outcome.output,
            format!("{lib}:1:// TODO: docs\n{main}:2:    todo!()\n")
        );
        assert_eq!(
            outcome.details,
            Some(json!({
                "matches": [
                    { "path": lib, "line": 1, "text": "// TODO: docs" },
                    { "path": main, "line": 2, "text": "    todo!()" }
                ],
                "files_searched": 2, "files_matched": 2, "match_count": 2, "truncated": false
            }))
        );

        let all = Grep::call(json!({ "pattern": "todo", "path": dir.path("") })).unwrap();
        let details = all.details.unwrap();
        assert_eq!(details["files_searched"], 3, "the PNG and .git are skipped");
        assert_eq!(details["match_count"], 2);

        let one = Grep::call(json!({ "pattern": "fn", "path": dir.path("src/lib.rs") })).unwrap();
        assert_eq!(one.output, format!("{lib}:2:pub fn f() {{}}\n"));

        let none = Grep::call(json!({ "pattern": "nothing", "path": dir.path("") })).unwrap();
        assert!(
            none.output
                .starts_with("No matches for `nothing` in 3 files"),
            "{}",
            none.output
        );

        let capped = Grep::call(json!({
            "pattern": ".", "path": dir.path(""), "max_results": 1
        }))
        .unwrap();
        assert!(
            capped.output.contains("[Stopped after 1 matching lines"),
            "{}",
            capped.output
        );
        assert_eq!(capped.details.unwrap()["truncated"], true);

        let e = Grep::call(json!({ "pattern": "(", "path": dir.path("") })).unwrap_err();
        assert!(
            e.output.starts_with("Invalid regular expression"),
            "{}",
            e.output
        );
        let e = Grep::call(json!({ "pattern": "x", "path": dir.path("logo.png") })).unwrap_err();
        assert!(e.output.contains("binary"), "{}", e.output);
        let e = Grep::call(json!({ "pattern": "x", "path": dir.path("nope") })).unwrap_err();
        assert!(e.output.contains("does not exist"), "{}", e.output);
    }

    #[test]
    fn refuses_patterns_over_the_limits() {
        let e = compile(&"a".repeat(MAX_PATTERN_CHARS + 1), false).unwrap_err();
        assert!(
            e.starts_with(
                "The regular expression is 4097 characters long, over the limit of 4096."
            ),
            "{e}"
        );
        let e = compile(r"\w{100}{100}", false).unwrap_err();
        assert!(
            e.starts_with(
                "The regular expression is too large once compiled: over the limit of 8 MiB."
            ),
            "{e}"
        );
        let deep = format!("{}a{}", "(".repeat(200), ")".repeat(200));
        let e = compile(&deep, false).unwrap_err();
        assert!(
            e.contains("nested") && e.contains("up to 100 levels"),
            "{e}"
        );
        let e = FileFilter::new(&"{".repeat(20)).err().unwrap();
        assert!(e.contains("levels deep"), "{e}");
    }

    #[test]
    fn escapes_paths_and_lines() {
        use std::os::unix::ffi::OsStrExt;
        let dir = TestDir::new();
        dir.write("a.txt", "needle\n");
        dir.write("z.txt", "needle \x1b[2J\n");
        let root = std::path::PathBuf::from(dir.path(""));
        for name in [&b"bad\xff.txt"[..], b"x\nforged.txt:1:needle"] {
            std::fs::write(root.join(std::ffi::OsStr::from_bytes(name)), "needle\n").unwrap();
        }
        let outcome = Grep::call(json!({ "pattern": "needle", "path": dir.path("") })).unwrap();
        let root = dir.path("");
        assert_eq!(
            outcome.output,
            format!(
                "{root}/a.txt:1:needle\n{root}/bad\\xFF.txt:1:needle\n\
                 {root}/x\\x0Aforged.txt:1:needle:1:needle\n{root}/z.txt:1:needle \\x1B[2J\n"
            )
        );
        let details = outcome.details.unwrap();
        assert_eq!(
            details["matches"][1]["path"],
            format!(r"{root}/bad\xFF.txt")
        );
        assert_eq!(details["matches"][3]["text"], r"needle \x1B[2J");
    }
}
