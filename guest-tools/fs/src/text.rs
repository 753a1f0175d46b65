//! Text helpers shared by the tools: loading files, binary detection, UTF-8
//! checks, line counting and shortening long lines. Everything is a linear
//! scan, since the tools run under fuel metering and files can be large.

use memchr::memchr;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The largest file the tools load, well inside the default 256 MiB memory
/// limit even when an edit holds two copies.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How much of a file's start is sniffed for NUL bytes, as git and ripgrep do.
pub const SNIFF_BYTES: usize = 8 * 1024;

/// Why a file could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    Io(io::Error),
    /// The file's size, over [`MAX_FILE_BYTES`].
    TooLarge(u64),
}

impl From<io::Error> for LoadError {
    fn from(error: io::Error) -> Self {
        LoadError::Io(error)
    }
}

impl LoadError {
    /// What went wrong reading `path`, and what to do.
    pub fn message(&self, path: &str) -> String {
        let path = crate::names::escape(path);
        match self {
            LoadError::Io(error) => crate::paths::io_error("read", &path, error),
            LoadError::TooLarge(size) => format!(
                "`{path}` is {} MiB, larger than the {} MiB the file tools load.",
                size / (1024 * 1024),
                MAX_FILE_BYTES / (1024 * 1024)
            ),
        }
    }
}

/// Reads the whole file at `path` into `buffer`, replacing its content and
/// reusing its allocation. Files over [`MAX_FILE_BYTES`] are refused before
/// any of them is read.
pub fn load(path: &Path, buffer: &mut Vec<u8>) -> Result<(), LoadError> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    if size > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge(size));
    }
    buffer.clear();
    buffer.reserve(usize::try_from(size).unwrap_or(0));
    // The file may grow while it is read: `take` keeps the bound.
    file.take(MAX_FILE_BYTES + 1).read_to_end(buffer)?;
    match u64::try_from(buffer.len()) {
        Ok(len) if len <= MAX_FILE_BYTES => Ok(()),
        _ => Err(LoadError::TooLarge(MAX_FILE_BYTES + 1)),
    }
}

/// Whether `bytes` look binary: a NUL byte within the first [`SNIFF_BYTES`].
pub fn is_binary(bytes: &[u8]) -> bool {
    memchr(0, &bytes[..bytes.len().min(SNIFF_BYTES)]).is_some()
}

/// The file's bytes as text, or a message saying why they are not text.
pub fn as_text<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a str, String> {
    let path = crate::names::escape(path);
    if is_binary(bytes) {
        return Err(format!(
            "`{path}` looks like a binary file (it contains NUL bytes), and this tool only \
             handles UTF-8 text. Use grep to search it, or leave it alone."
        ));
    }
    std::str::from_utf8(bytes).map_err(|error| {
        let line = line_of(bytes, error.valid_up_to());
        format!(
            "`{path}` is not valid UTF-8 (the first invalid byte is on line {line}): it may be \
             binary or use another encoding, and this tool only handles UTF-8 text."
        )
    })
}

/// The number of lines in `text`. A final line without a trailing newline
/// counts; the empty string after a final newline does not.
pub fn count_lines(text: &[u8]) -> usize {
    let newlines = memchr::memchr_iter(b'\n', text).count();
    newlines + usize::from(text.last().is_some_and(|&b| b != b'\n'))
}

/// The 1-based line number of byte `offset` in `bytes`.
pub fn line_of(bytes: &[u8], offset: usize) -> usize {
    1 + memchr::memchr_iter(b'\n', &bytes[..offset.min(bytes.len())]).count()
}

/// `line` cut to at most `max_chars` characters, or `None` when it fits.
pub fn cut_line(line: &str, max_chars: usize) -> Option<&str> {
    if line.len() <= max_chars {
        return None; // fewer bytes than the limit: certainly fewer characters
    }
    line.char_indices()
        .nth(max_chars)
        .map(|(end, _)| &line[..end])
}

/// `bytes` as one line of output: without a trailing `\r`, escaped as
/// [`crate::names`] says (tabs kept), and cut to `max_bytes` (at a character
/// boundary) with a trailing `…` when longer.
pub fn display_line(bytes: &[u8], max_bytes: usize) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.len() <= max_bytes {
        return crate::names::escape_line(bytes).into_owned();
    }
    // A character split by the cut is left out rather than shown as bytes.
    let mut cut = max_bytes;
    if let Some(start) = (cut.saturating_sub(3)..cut)
        .rev()
        .find(|&i| bytes[i] >= 0xC0)
    {
        let split = std::str::from_utf8(&bytes[start..cut]).is_err_and(|e| e.error_len().is_none());
        if split {
            cut = start;
        }
    }
    let mut line = crate::names::escape_line(&bytes[..cut]).into_owned();
    line.push('…');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_binary_by_nul_in_the_first_8_kib() {
        assert!(!is_binary(b"plain text\n"));
        assert!(is_binary(b"PK\x03\x04\0\0"));
        let mut late = vec![b'a'; SNIFF_BYTES];
        late.push(0);
        assert!(
            !is_binary(&late),
            "a NUL past the sniffed prefix is not looked at"
        );
        assert!(!is_binary(b""));
    }

    #[test]
    fn refuses_binary_and_invalid_utf8() {
        assert_eq!(as_text("/w/a", b"ok\n"), Ok("ok\n"));
        let e = as_text("/w/a", b"\0\x01").unwrap_err();
        assert!(e.contains("binary"), "{e}");
        let e = as_text("/w/a", b"one\ntwo\n\xff\n").unwrap_err();
        assert!(e.contains("not valid UTF-8") && e.contains("line 3"), "{e}");
    }

    #[test]
    fn loads_files_into_a_reused_buffer() {
        let dir = crate::TestDir::new();
        dir.write("a", "first, longer");
        dir.write("b", "second");
        let mut buffer = Vec::new();
        load(Path::new(&dir.path("a")), &mut buffer).unwrap();
        load(Path::new(&dir.path("b")), &mut buffer).unwrap();
        assert_eq!(buffer, b"second");
        let Err(error) = load(Path::new(&dir.path("c")), &mut buffer) else {
            panic!("c does not exist")
        };
        assert!(error.message("/w/c").contains("does not exist"));
        let message = LoadError::TooLarge(100 << 20).message("/w/big");
        assert_eq!(
            message,
            "`/w/big` is 100 MiB, larger than the 64 MiB the file tools load."
        );
    }

    #[test]
    fn counts_lines() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"\n"), 1);
        assert_eq!(count_lines(b"a"), 1);
        assert_eq!(count_lines(b"a\nb"), 2);
        assert_eq!(count_lines(b"a\nb\n"), 2);
        assert_eq!(count_lines(b"a\n\n"), 2);
        assert_eq!(line_of(b"a\nb\nc", 0), 1);
        assert_eq!(line_of(b"a\nb\nc", 2), 2);
        assert_eq!(line_of(b"a\nb\nc", 4), 3);
    }

    #[test]
    fn cuts_long_lines_at_character_boundaries() {
        assert_eq!(cut_line("short", 10), None);
        assert_eq!(cut_line("ééé", 3), None);
        assert_eq!(cut_line("éééé", 3), Some("ééé"));
        assert_eq!(cut_line("abcdef", 4), Some("abcd"));
    }

    #[test]
    fn displays_lines_safely() {
        assert_eq!(display_line(b"let x = 1;\r", 100), "let x = 1;");
        assert_eq!(display_line(b"a\x1bb\tc", 100), "a\\x1Bb\tc");
        assert_eq!(display_line(b"abcdef", 3), "abc…");
        assert_eq!(display_line("aé".as_bytes(), 2), "a…");
        assert_eq!(display_line("aéz".as_bytes(), 3), "aé…");
        assert_eq!(display_line(b"\xffx", 10), "\\xFFx");
        assert_eq!(display_line(b"ab\x80\x80\x80\x80", 4), "ab\\x80\\x80…");
        assert_eq!(display_line(b"x\ny\r", 10), "x\\x0Ay");
    }
}
