//! How file names, paths and matched text appear in the tools' output.
//!
//! A name is attacker-controlled text: a planted file called
//! `a\n/w/x.rs:1:fn forged()` would forge a grep match, and one holding
//! `ESC ]0;…BEL` would retitle the terminal of whoever prints the output. So
//! every name, path and matched line the tools print goes through
//! [`escape_bytes`] (or [`escape`], [`escape_path`]), which keeps one entry on
//! one line and shows what the name really holds:
//!
//! - a byte that is not part of valid UTF-8 is written `\xNN` (hex, two
//!   digits, uppercase), wherever such a name reaches the tools (natively;
//!   under WASI 0.2 names are strings, so wasmtime reports such an entry as
//!   an error, which the walks count and pass over: see `walk.rs`);
//! - an ASCII control character (U+0000–U+001F and DEL, newline, carriage
//!   return and ESC included) is written `\xNN` as well;
//! - other control and invisible format characters that can reorder or break
//!   lines on screen (C1 controls U+0080–U+009F, the line and paragraph
//!   separators U+2028 and U+2029, and the bidirectional controls U+061C,
//!   U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) are written `\u{NNNN}`;
//! - everything else, backslashes included, is shown as it is.
//!
//! Escaping is idempotent: escaped text holds only printable characters.

use std::borrow::Cow;
use std::path::Path;

/// Whether `c` is shown escaped (see the module documentation).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

fn push_escaped(out: &mut String, c: char) {
    use std::fmt::Write;
    let code = u32::from(c);
    // Writing to a String cannot fail.
    let _ = if code < 0x80 {
        write!(out, "\\x{code:02X}")
    } else {
        write!(out, "\\u{{{code:04X}}}")
    };
}

/// `bytes` as printable text, escaped as the module documentation says;
/// characters for which `keep` returns true are kept even when they would be
/// escaped (grep keeps the tabs of the lines it shows).
fn escape_with(bytes: &[u8], keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && !text.chars().any(|c| needs_escape(c) && !keep(c))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if needs_escape(c) && !keep(c) {
                push_escaped(&mut out, c);
            } else {
                out.push(c);
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02X}"));
        }
    }
    Cow::Owned(out)
}

/// A name or path given as bytes, escaped for output.
pub fn escape_bytes(bytes: &[u8]) -> Cow<'_, str> {
    escape_with(bytes, |_| false)
}

/// A name or path given as text, escaped for output.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_bytes(text.as_bytes())
}

/// A path escaped for output. Its bytes are taken as they are, so a name that
/// is not UTF-8 shows its other bytes as `\xNN`.
pub fn escape_path(path: &Path) -> Cow<'_, str> {
    escape_bytes(path.as_os_str().as_encoded_bytes())
}

/// A line of a file escaped for output, tabs kept.
pub fn escape_line(bytes: &[u8]) -> Cow<'_, str> {
    escape_with(bytes, |c| c == '\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_ordinary_names() {
        assert!(matches!(escape("src/main.rs"), Cow::Borrowed(_)));
        assert_eq!(escape("dossier/été 2024.txt"), "dossier/été 2024.txt");
        assert_eq!(escape(r"back\slash"), r"back\slash");
    }

    #[test]
    fn escapes_bytes_that_are_not_utf8() {
        assert_eq!(escape_bytes(b"bad\xffname"), r"bad\xFFname");
        // A truncated sequence: each byte on its own.
        assert_eq!(escape_bytes(b"x\xe2\x82"), r"x\xE2\x82");
        assert_eq!(escape_bytes("é\u{0}".as_bytes()), r"é\x00");
    }

    #[test]
    fn escapes_control_characters() {
        assert_eq!(
            escape("a\n/w/x.rs:1:forged"),
            r"a\x0A/w/x.rs:1:forged",
            "a newline cannot start a line of its own"
        );
        assert_eq!(escape("\x1b]0;owned\x07.txt"), r"\x1B]0;owned\x07.txt");
        assert_eq!(escape("cr\rtab\tdel\x7f"), r"cr\x0Dtab\x09del\x7F");
        assert_eq!(escape("c1\u{85}\u{9b}"), r"c1\u{0085}\u{009B}");
        assert_eq!(escape("ls\u{2028}\u{202E}txt"), r"ls\u{2028}\u{202E}txt");
    }

    #[test]
    fn escaping_is_idempotent() {
        for name in ["a\nb", "\x1b[31m", "x\u{85}"] {
            let once = escape(name).into_owned();
            assert_eq!(escape(&once), once);
        }
        let once = escape_bytes(b"\xff").into_owned();
        assert_eq!(escape(&once), once);
    }

    #[test]
    fn lines_keep_tabs() {
        assert_eq!(escape_line(b"\tlet x;\x1b[2J"), "\tlet x;\\x1B[2J");
    }
}
