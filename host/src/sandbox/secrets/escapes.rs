//! The escapes a secret's characters may be written in, as serializers and
//! encoders write them: percent-encoding (`%XX`, `+` for a space), JSON's
//! (`\\uXXXX`, surrogate pairs, the short ones) and HTML character
//! references (named, decimal, hex). Each is read back to the character it
//! stands for, so that `redact` can match a secret however it is spelled.
//!
//! Threat model: the text is the network's or a tool's, so hostile: every
//! read is bounded (at most [`MAX_SPELLED_PER_BYTE`] bytes an escape), and
//! what does not decode is no escape.

/// The most bytes one byte of a secret can take when spelled:
/// `&DiacriticalGrave;`, the longest named reference of an ASCII character.
pub(super) const MAX_SPELLED_PER_BYTE: usize = 18;

/// The most digits of a numeric HTML character reference read (leading
/// zeros included).
const MAX_REFERENCE_DIGITS: usize = 8;

/// The HTML names of ASCII characters, as HTML5 defines them; looked up in
/// any case.
const NAMED_REFERENCES: &[(&str, u8)] = &[
    ("amp", b'&'),
    ("lt", b'<'),
    ("gt", b'>'),
    ("quot", b'"'),
    ("apos", b'\''),
    ("excl", b'!'),
    ("num", b'#'),
    ("dollar", b'$'),
    ("percnt", b'%'),
    ("lpar", b'('),
    ("rpar", b')'),
    ("ast", b'*'),
    ("midast", b'*'),
    ("plus", b'+'),
    ("comma", b','),
    ("period", b'.'),
    ("sol", b'/'),
    ("colon", b':'),
    ("semi", b';'),
    ("equals", b'='),
    ("quest", b'?'),
    ("commat", b'@'),
    ("lsqb", b'['),
    ("lbrack", b'['),
    ("bsol", b'\\'),
    ("rsqb", b']'),
    ("rbrack", b']'),
    ("hat", b'^'),
    ("lowbar", b'_'),
    ("underbar", b'_'),
    ("grave", b'`'),
    ("diacriticalgrave", b'`'),
    ("lcub", b'{'),
    ("lbrace", b'{'),
    ("verbar", b'|'),
    ("vert", b'|'),
    ("verticalline", b'|'),
    ("rcub", b'}'),
    ("rbrace", b'}'),
    ("tab", b'\t'),
    ("newline", b'\n'),
];

/// The names HTML decodes even without their `;`.
const LEGACY_REFERENCES: &[&str] = &["amp", "lt", "gt", "quot"];

/// Whether `rest` is the start of an escape that the text's end cut short.
pub(super) fn escape_cut_short(rest: &[u8]) -> bool {
    match rest {
        [b'%'] | [b'%', _] | [b'\\'] => true,
        [b'\\', b'u', tail @ ..] => tail.len() < 10 && unescape(rest).is_none(),
        [b'&', tail @ ..] => {
            tail.len() < MAX_SPELLED_PER_BYTE - 1
                && tail.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'#')
                && unescape(rest).is_none()
        }
        _ => false,
    }
}

/// The bytes an escape at the start of `input` stands for, and its length:
/// `%XX`, `+` (a space), a JSON escape (`\uXXXX`, a surrogate pair of
/// them, `\/` and the other short ones) or an HTML character reference.
pub(super) fn unescape(input: &[u8]) -> Option<(Decoded, usize)> {
    match input {
        [b'&', b'#', b'x' | b'X', digits @ ..] => numeric_reference(digits, 16, 3),
        [b'&', b'#', digits @ ..] => numeric_reference(digits, 10, 2),
        [b'&', name @ ..] => named_reference(name),
        [b'%', hi, lo, ..] => Some((Decoded::byte(hex(&[*hi, *lo])? as u8), 3)),
        [b'+', ..] => Some((Decoded::byte(b' '), 1)),
        [b'\\', b'u', ..] => {
            let unit = hex(input.get(2..6)?)?;
            let (code, len) = match unit {
                0xD800..=0xDBFF => {
                    let low = match input.get(6..12)? {
                        [b'\\', b'u', digits @ ..] => hex(digits)?,
                        _ => return None,
                    };
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return None;
                    }
                    (0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), 12)
                }
                0xDC00..=0xDFFF => return None,
                unit => (unit, 6),
            };
            Some((Decoded::char(char::from_u32(code)?), len))
        }
        [b'\\', short, ..] => {
            let byte = match short {
                b'"' | b'\\' | b'/' => *short,
                b'b' => 8,
                b'f' => 12,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                _ => return None,
            };
            Some((Decoded::byte(byte), 2))
        }
        _ => None,
    }
}

/// The character a numeric reference stands for, from its digits (in
/// `radix`) on, and the reference's length: `before` bytes, the digits and
/// an optional `;`.
fn numeric_reference(input: &[u8], radix: u32, before: usize) -> Option<(Decoded, usize)> {
    let digits = input
        .iter()
        .take_while(|b| char::from(**b).is_digit(radix))
        .count();
    if digits == 0 || digits > MAX_REFERENCE_DIGITS {
        return None;
    }
    let code = input[..digits].iter().try_fold(0u32, |value, digit| {
        Some(value * radix + char::from(*digit).to_digit(radix)?)
    })?;
    let semicolon = usize::from(input.get(digits) == Some(&b';'));
    let c = char::from_u32(code).filter(|c| *c != '\0')?;
    Some((Decoded::char(c), before + digits + semicolon))
}

/// The character a named reference stands for, from its name on (after the
/// `&`), and the reference's length.
fn named_reference(input: &[u8]) -> Option<(Decoded, usize)> {
    let name_len = input
        .iter()
        .take(MAX_SPELLED_PER_BYTE)
        .take_while(|b| b.is_ascii_alphanumeric())
        .count();
    let name = std::str::from_utf8(&input[..name_len]).ok()?;
    if input.get(name_len) == Some(&b';') {
        let (_, byte) = NAMED_REFERENCES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))?;
        return Some((Decoded::byte(*byte), 1 + name_len + 1));
    }
    // Without its `;`, a legacy name is read as HTML reads it: as the
    // start of the letters that follow (`&ampss` is `&` and `ss`).
    let legacy = LEGACY_REFERENCES.iter().find(|legacy| {
        name.get(..legacy.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(legacy))
    })?;
    let (_, byte) = NAMED_REFERENCES.iter().find(|(known, _)| known == legacy)?;
    Some((Decoded::byte(*byte), 1 + legacy.len()))
}

/// The value of hex digits, in either case.
fn hex(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |value, digit| {
        Some(value * 16 + char::from(*digit).to_digit(16)?)
    })
}

/// What one escape stands for: one character, at most four bytes.
pub(super) struct Decoded {
    bytes: [u8; 4],
    len: usize,
}

impl Decoded {
    fn byte(byte: u8) -> Decoded {
        Decoded {
            bytes: [byte, 0, 0, 0],
            len: 1,
        }
    }

    fn char(c: char) -> Decoded {
        let mut bytes = [0; 4];
        let len = c.encode_utf8(&mut bytes).len();
        Decoded { bytes, len }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}
