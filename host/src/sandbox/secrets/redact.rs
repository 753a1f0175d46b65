//! Finding secrets in bytes and replacing them with `[redacted secret NAME]`.
//!
//! Threat: a tool that receives a secret's echo (an API reflecting its
//! token, a header, an error page) would read it, and hand it to the model
//! or to another destination. So every byte a tool receives from the
//! network, and every line of its logs, is searched for each secret by what
//! it means, not by one spelling of it:
//! - exact forms, found by substring search: raw, and base64 (standard and
//!   URL-safe), the base64 forms at each of the three offsets a value can sit
//!   at inside a longer encoded text (as in `user:password` of Basic auth),
//!   keeping only the characters that depend on the value alone;
//! - spelled forms, where any character may be escaped as a serializer or
//!   an encoder chooses: JSON's `\uXXXX` (either hex case, surrogate pairs
//!   too), `\/`, `\"`, `\\` and the short escapes, and percent-encoding
//!   (`%XX` in either case, or `+` for a space) of any subset of its bytes,
//!   as PHP's `json_encode`, .NET's System.Text.Json and Python's
//!   `urllib.parse.quote` write them. Each is found from the first escaped
//!   character, which must decode to a byte of a secret.
//!
//! A stream keeps back the last few bytes of each chunk, fewer than the
//! longest spelling, so a value split across chunks is still found. A text
//! cut to a limit is redacted before it is cut, and a cut that ends in the
//! first [`MIN_TAIL`] or more bytes of a secret, in any spelling, loses that
//! tail too. The forms are held in memory zeroed on drop, and searched with
//! substring finders that borrow them, so no copy outlives the secret.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use zeroize::Zeroizing;

use super::secret::Secret;

/// The shortest partial form a cut text may end with and still be
/// redacted: a shorter tail tells next to nothing.
const MIN_TAIL: usize = 4;

/// The most bytes one byte of a secret can take when spelled: `\u00XX`.
const MAX_SPELLED_PER_BYTE: usize = 6;

/// Replaces every form of a set of secrets.
pub(crate) struct Redactor {
    forms: Vec<Form>,
    secrets: Vec<Spelled>,
    /// The length of the longest form or spelling.
    longest: usize,
    /// The bytes searched for, at most three a pass; every form has one of
    /// them at its `anchor`.
    passes: Vec<Vec<u8>>,
    /// The bytes that begin an escape: `\`, `%`, and `+` when a secret holds
    /// a space.
    escapes: Vec<u8>,
}

/// One exact form of a secret.
struct Form {
    bytes: Zeroizing<Vec<u8>>,
    /// Its secret, in [`Redactor::secrets`].
    secret: usize,
    /// Where in the form its searched-for byte is.
    anchor: usize,
}

/// A secret's value, matched in any spelling, and what replaces it.
struct Spelled {
    raw: Zeroizing<Vec<u8>>,
    marker: Arc<str>,
}

/// A place where a secret was found: `input[start..end]` is secret `secret`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Hit {
    start: usize,
    end: usize,
    secret: usize,
}

/// How a spelling of a secret matches from a place in a text.
#[derive(Debug, PartialEq, Eq)]
enum Spelling {
    /// The whole secret, ending here (the longest such match).
    Whole(usize),
    /// The text ends after this many of the secret's bytes.
    Cut(usize),
    None,
}

/// Bytes from the most to the least common in the text APIs send (English,
/// JSON, numbers); a byte not listed is rarer than any listed.
const COMMON: &[u8] =
    b" etaoinsrhldcumfpgwyb\"\n,.:0123456789-_/vkETAOINSRHLDCUMFPGWYBVKxjqzXJQZ{}[]=+%";

fn commonness(byte: u8) -> usize {
    COMMON
        .iter()
        .position(|b| *b == byte)
        .map_or(0, |i| COMMON.len() - i)
}

/// Chooses each form's searched-for byte: the rarest byte not yet chosen
/// that the most uncovered forms hold, until every form holds one.
fn anchors(forms: &mut [Form]) -> Vec<Vec<u8>> {
    let mut chosen: Vec<u8> = Vec::new();
    loop {
        let uncovered: Vec<&Form> = forms
            .iter()
            .filter(|f| !f.bytes.iter().any(|b| chosen.contains(b)))
            .collect();
        if uncovered.is_empty() {
            break;
        }
        let best = (0..=255u8)
            .filter(|b| !chosen.contains(b))
            .map(|b| {
                let holders = uncovered.iter().filter(|f| f.bytes.contains(&b)).count();
                // Of bytes about as rare, the one more forms hold.
                (
                    holders > 0,
                    std::cmp::Reverse(commonness(b) / 8),
                    holders,
                    b,
                )
            })
            .max_by_key(|(any, rarity, holders, _)| (*any, *rarity, *holders))
            .map(|(.., b)| b)
            .expect("a form is not empty");
        chosen.push(best);
    }
    for form in forms.iter_mut() {
        form.anchor = form
            .bytes
            .iter()
            .position(|b| chosen.contains(b))
            .expect("every form holds a chosen byte");
    }
    chosen.chunks(3).map(<[u8]>::to_vec).collect()
}

impl Redactor {
    /// The redactor of `secrets`; `None` when there are none.
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Option<Redactor> {
        let mut forms: Vec<Form> = Vec::new();
        let mut spelled: Vec<Spelled> = Vec::new();
        for secret in secrets {
            let index = spelled.len();
            spelled.push(Spelled {
                raw: Zeroizing::new(secret.value().as_bytes().to_vec()),
                marker: format!("[redacted secret {}]", secret.name()).into(),
            });
            for bytes in forms_of(secret.value()) {
                if !forms.iter().any(|f| f.bytes == bytes) {
                    forms.push(Form {
                        bytes,
                        secret: index,
                        anchor: 0,
                    });
                }
            }
        }
        let longest_form = forms.iter().map(|f| f.bytes.len()).max()?;
        let longest_spelling = spelled.iter().map(|s| s.raw.len()).max()? * MAX_SPELLED_PER_BYTE;
        let mut escapes = vec![b'\\', b'%'];
        if spelled.iter().any(|s| s.raw.contains(&b' ')) {
            escapes.push(b'+');
        }
        let passes = anchors(&mut forms);
        Some(Redactor {
            forms,
            secrets: spelled,
            longest: longest_form.max(longest_spelling),
            passes,
            escapes,
        })
    }

    /// Every place in `input` where a secret starts before `until`, sorted,
    /// overlapping ones included.
    fn found(&self, input: &[u8], until: usize) -> Vec<Hit> {
        let mut found = Vec::new();
        let mut check = |at: usize| {
            let byte = input[at];
            for form in &self.forms {
                if form.bytes[form.anchor] != byte || at < form.anchor {
                    continue;
                }
                let start = at - form.anchor;
                if start < until && input[start..].starts_with(&form.bytes) {
                    found.push(Hit {
                        start,
                        end: start + form.bytes.len(),
                        secret: form.secret,
                    });
                }
            }
        };
        for pass in &self.passes {
            each_position(pass, input, &mut check);
        }
        each_position(&self.escapes, input, &mut |at| {
            self.spelled_through(input, at, until, &mut found)
        });
        found.sort_unstable();
        found
    }

    /// The spelled secrets whose first escaped character is the escape at
    /// `at`, starting before `until`.
    fn spelled_through(&self, input: &[u8], at: usize, until: usize, found: &mut Vec<Hit>) {
        let Some((decoded, _)) = unescape(&input[at..]) else {
            return;
        };
        let decoded = decoded.as_slice();
        for (index, secret) in self.secrets.iter().enumerate() {
            let raw = &secret.raw[..];
            // Each place in the secret the escaped character could be,
            // preceded in `input` by the secret's start as it is.
            for j in memchr::memchr_iter(decoded[0], raw) {
                let start = match at.checked_sub(j) {
                    Some(start) if start < until => start,
                    _ => continue,
                };
                if !raw[j..].starts_with(decoded) || input[start..at] != raw[..j] {
                    continue;
                }
                if let Spelling::Whole(end) = spell(input, start, raw) {
                    found.push(Hit {
                        start,
                        end,
                        secret: index,
                    });
                }
            }
        }
    }

    /// Writes to `out` what of `input` goes out, with every secret that
    /// starts before `until` replaced; returns how far `input` was consumed
    /// (at least `until`, more when the last secret found runs past it) and
    /// how many were replaced. When none was, `out` is left empty: what goes
    /// out is `input[..end]` as it is.
    fn scan(&self, input: &[u8], until: usize, out: &mut Vec<u8>) -> (usize, u64) {
        let (mut at, mut count) = (0, 0);
        let found = self.found(input, until);
        let mut next = 0;
        while next < found.len() {
            // The leftmost secret; of two at the same place, the longer.
            let mut best = found[next];
            while next < found.len() && found[next].start == best.start {
                if found[next].end > best.end {
                    best = found[next];
                }
                next += 1;
            }
            if best.start < at {
                // It overlaps the one just replaced (a secret whose end is
                // its start, or two secrets sharing bytes): what of it runs
                // past goes too.
                at = at.max(best.end);
                continue;
            }
            out.extend_from_slice(&input[at..best.start]);
            out.extend_from_slice(self.secrets[best.secret].marker.as_bytes());
            count += 1;
            at = best.end;
        }
        let end = at.max(until);
        if count > 0 {
            out.extend_from_slice(&input[at..end]);
        }
        (end, count)
    }

    /// `input` with every secret replaced, and how many were; borrowed when
    /// there were none.
    pub(crate) fn bytes<'a>(&self, input: &'a [u8]) -> (Cow<'a, [u8]>, u64) {
        let mut out = Vec::new();
        match self.scan(input, input.len(), &mut out) {
            (_, 0) => (Cow::Borrowed(input), 0),
            (_, count) => (Cow::Owned(out), count),
        }
    }

    /// `text` with every secret replaced, and how many were.
    pub(crate) fn text<'a>(&self, text: &'a str) -> (Cow<'a, str>, u64) {
        match self.bytes(text.as_bytes()) {
            (Cow::Borrowed(_), _) => (Cow::Borrowed(text), 0),
            // Secrets are found whole, from and to a character's boundary
            // (their first and last bytes are ASCII or whole sequences), so
            // cutting them out leaves valid UTF-8; lossy only as a guard.
            (Cow::Owned(bytes), count) => (
                Cow::Owned(
                    String::from_utf8(bytes)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                ),
                count,
            ),
        }
    }

    /// Like [`text`](Self::text), for a text that was cut short: a tail
    /// that begins a secret, in any spelling, is replaced too.
    pub(crate) fn cut_text(&self, text: &str) -> (String, u64) {
        let (redacted, mut count) = self.text(text);
        let mut redacted = redacted.into_owned();
        if let Some((start, marker)) = self.cut_tail(redacted.as_bytes()) {
            let mut cut = start;
            while !redacted.is_char_boundary(cut) {
                cut -= 1;
            }
            redacted.truncate(cut);
            redacted.push_str(&marker);
            count += 1;
        }
        (redacted, count)
    }

    /// `text` redacted, then cut to `max` bytes (and `…`), so that neither a
    /// secret nor its first [`MIN_TAIL`] bytes survive the cut: a tail that
    /// begins one is replaced by its marker, which may take the result past
    /// `max` by the marker's length.
    pub(crate) fn cut(&self, text: &str, max: usize) -> (String, u64) {
        let (redacted, count) = self.text(text);
        if redacted.len() <= max {
            return (redacted.into_owned(), count);
        }
        let mut end = max;
        while !redacted.is_char_boundary(end) {
            end -= 1;
        }
        let (mut cut, tails) = self.cut_text(&redacted[..end]);
        cut.push('…');
        (cut, count + tails)
    }

    /// Where the earliest tail of `bytes` that begins a secret starts, in
    /// any form or spelling, with that secret's marker.
    fn cut_tail(&self, bytes: &[u8]) -> Option<(usize, Arc<str>)> {
        let exact = self.forms.iter().filter_map(|form| {
            (MIN_TAIL..form.bytes.len().min(bytes.len() + 1))
                .rev()
                .find(|n| bytes.ends_with(&form.bytes[..*n]))
                .map(|n| (bytes.len() - n, form.secret))
        });
        let spelled = self
            .secrets
            .iter()
            .enumerate()
            .filter_map(|(index, secret)| {
                let window = secret.raw.len() * MAX_SPELLED_PER_BYTE;
                (bytes.len().saturating_sub(window)..bytes.len())
                .find(|start| {
                    matches!(spell(bytes, *start, &secret.raw), Spelling::Cut(n) if n >= MIN_TAIL)
                })
                .map(|start| (start, index))
            });
        exact
            .chain(spelled)
            .min()
            .map(|(start, secret)| (start, self.secrets[secret].marker.clone()))
    }

    /// Replaces every form in the strings and keys of `value`; returns how
    /// many were.
    pub(crate) fn json(&self, value: &mut serde_json::Value) -> u64 {
        use serde_json::Value;
        match value {
            Value::String(text) => match self.text(text) {
                (Cow::Owned(redacted), count) => {
                    *text = redacted;
                    count
                }
                (Cow::Borrowed(_), _) => 0,
            },
            Value::Array(items) => items.iter_mut().map(|v| self.json(v)).sum(),
            Value::Object(map) => {
                let mut count = 0;
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    if let (Cow::Owned(new_key), n) = self.text(&key) {
                        count += n;
                        let mut item = map.shift_remove(&key).unwrap_or_default();
                        count += self.json(&mut item);
                        map.insert(new_key, item);
                    } else if let Some(item) = map.get_mut(&key) {
                        count += self.json(item);
                    }
                }
                count
            }
            _ => 0,
        }
    }
}

/// A body being redacted as it streams: each chunk goes out less the bytes
/// that could begin a form, which wait for the next chunk.
pub(crate) struct Stream {
    redactor: Arc<Redactor>,
    held: Zeroizing<Vec<u8>>,
}

impl Stream {
    pub(crate) fn new(redactor: Arc<Redactor>) -> Stream {
        Stream {
            redactor,
            held: Zeroizing::new(Vec::new()),
        }
    }

    /// What of `chunk` (after what was held back) can go out now, redacted,
    /// in one or two pieces (either may be empty), and how many forms were
    /// replaced.
    pub(crate) fn push(&mut self, chunk: &Bytes) -> ([Bytes; 2], u64) {
        let keep = self.redactor.longest - 1;
        let until = chunk.len().saturating_sub(keep);
        // The common case, without copying the chunk: no form starts in what
        // was held back (a form starting there ends within `keep` bytes of
        // the chunk), and none in the chunk.
        if chunk.len() >= keep {
            let mut boundary = Zeroizing::new(Vec::with_capacity(self.held.len() + keep));
            boundary.extend_from_slice(&self.held);
            boundary.extend_from_slice(&chunk[..keep]);
            let mut out = Vec::new();
            if self.redactor.scan(&boundary, self.held.len(), &mut out).1 == 0 {
                let (end, count) = self.redactor.scan(chunk, until, &mut out);
                let held = Bytes::copy_from_slice(&self.held);
                self.held.clear();
                self.held.extend_from_slice(&chunk[end..]);
                return match count {
                    0 => ([held, chunk.slice(..end)], 0),
                    _ => ([held, Bytes::from(out)], count),
                };
            }
        }
        let mut input = Zeroizing::new(std::mem::take(&mut *self.held));
        input.extend_from_slice(chunk);
        let until = input.len().saturating_sub(keep);
        let mut out = Vec::new();
        let (end, count) = self.redactor.scan(&input, until, &mut out);
        self.held.extend_from_slice(&input[end..]);
        match count {
            0 => ([Bytes::copy_from_slice(&input[..end]), Bytes::new()], 0),
            _ => ([Bytes::from(out), Bytes::new()], count),
        }
    }

    /// What was held back, redacted, at the end of the body.
    pub(crate) fn finish(&mut self) -> (Bytes, u64) {
        let held = Zeroizing::new(std::mem::take(&mut *self.held));
        let mut out = Vec::new();
        match self.redactor.scan(&held, held.len(), &mut out) {
            (_, 0) => (Bytes::copy_from_slice(&held), 0),
            (_, count) => (Bytes::from(out), count),
        }
    }
}

/// Calls `f` with each place in `input` that holds one of `bytes` (one to
/// three of them).
fn each_position(bytes: &[u8], input: &[u8], f: &mut impl FnMut(usize)) {
    match *bytes {
        [a] => memchr::memchr_iter(a, input).for_each(f),
        [a, b] => memchr::memchr2_iter(a, b, input).for_each(f),
        [a, b, c] => memchr::memchr3_iter(a, b, c, input).for_each(f),
        _ => unreachable!("passes hold one to three bytes"),
    }
}

/// How `secret` matches `input` from `start`, each of its characters as it
/// is or escaped (see the module doc). Every way is followed, so a secret
/// holding `%` or `\` is found both as it is and escaped.
fn spell(input: &[u8], start: usize, secret: &[u8]) -> Spelling {
    let (mut whole, mut cut) = (None, None);
    let mut ways = vec![(start, 0usize)];
    // Ways part only where a byte is both itself and an escape's start;
    // once they have, each place is followed once.
    let (mut parted, mut seen) = (false, std::collections::HashSet::new());
    while let Some((at, matched)) = ways.pop() {
        if parted && !seen.insert((at, matched)) {
            continue;
        }
        if matched == secret.len() {
            whole = whole.max(Some(at));
            continue;
        }
        let rest = &input[at..];
        if rest.is_empty() || escape_cut_short(rest) {
            cut = cut.max(Some(matched));
            continue;
        }
        let before = ways.len();
        if rest[0] == secret[matched] {
            ways.push((at + 1, matched + 1));
        }
        if let Some((decoded, len)) = unescape(rest)
            && secret[matched..].starts_with(decoded.as_slice())
        {
            ways.push((at + len, matched + decoded.len()));
        }
        parted |= ways.len() > before + 1;
    }
    match (whole, cut) {
        (Some(end), _) => Spelling::Whole(end),
        (None, Some(matched)) => Spelling::Cut(matched),
        (None, None) => Spelling::None,
    }
}

/// Whether `rest` is the start of an escape that the text's end cut short.
fn escape_cut_short(rest: &[u8]) -> bool {
    match rest {
        [b'%'] | [b'%', _] | [b'\\'] => true,
        [b'\\', b'u', tail @ ..] => tail.len() < 10 && unescape(rest).is_none(),
        _ => false,
    }
}

/// The bytes an escape at the start of `input` stands for, and its length:
/// `%XX`, `+` (a space), or a JSON escape (`\uXXXX`, a surrogate pair of
/// them, `\/` and the other short ones).
fn unescape(input: &[u8]) -> Option<(Decoded, usize)> {
    match input {
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

/// The value of hex digits, in either case.
fn hex(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |value, digit| {
        Some(value * 16 + char::from(*digit).to_digit(16)?)
    })
}

/// What one escape stands for: one character, at most four bytes.
struct Decoded {
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

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The exact forms `value` is searched for in (its spellings are found by
/// [`spell`]).
fn forms_of(value: &str) -> Vec<Zeroizing<Vec<u8>>> {
    let raw = value.as_bytes();
    let mut forms = vec![Zeroizing::new(raw.to_vec())];
    let json = Zeroizing::new(serde_json::to_string(value).unwrap_or_default());
    if json.len() >= 2 {
        forms.push(Zeroizing::new(json.as_bytes()[1..json.len() - 1].to_vec()));
    }
    for hex in [b"0123456789ABCDEF", b"0123456789abcdef"] {
        forms.push(percent_encoded(raw, hex));
    }
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        for offset in 0..3usize {
            let mut input = Zeroizing::new(vec![0u8; offset]);
            input.extend_from_slice(raw);
            let encoded = Zeroizing::new(engine.encode(&*input));
            // The characters whose six bits all come from the value.
            let start = (8 * offset).div_ceil(6);
            let end = 8 * (offset + raw.len()) / 6;
            if end > start {
                forms.push(Zeroizing::new(encoded.as_bytes()[start..end].to_vec()));
            }
        }
    }
    let mut unique: Vec<Zeroizing<Vec<u8>>> = Vec::new();
    for form in forms {
        if !form.is_empty() && !unique.contains(&form) {
            unique.push(form);
        }
    }
    unique
}

/// Every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`.
fn percent_encoded(raw: &[u8], hex: &[u8; 16]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(raw.len() * 3));
    for &b in raw {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', hex[usize::from(b >> 4)], hex[usize::from(b & 15)]]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "tok/en+9:Zq\"w x";

    fn redactor() -> Redactor {
        Redactor::new(&[Secret::new("TOKEN", VALUE).unwrap()]).unwrap()
    }

    fn redacted(input: &str) -> String {
        redactor().text(input).0.into_owned()
    }

    #[test]
    fn every_form_is_replaced() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let r = "[redacted secret TOKEN]";
        assert_eq!(redacted(&format!("a {VALUE} b")), format!("a {r} b"));
        let json = serde_json::to_string(VALUE).unwrap();
        assert_eq!(redacted(&json), format!("\"{r}\""));
        assert_eq!(redacted("tok%2Fen%2B9%3AZq%22w%20x"), r);
        assert_eq!(redacted("tok%2fen%2b9%3aZq%22w%20x"), r);
        // Base64 at every offset inside a longer text, as in Basic auth.
        for prefix in ["", "u:", "us:", "use:"] {
            for engine in [STANDARD, URL_SAFE] {
                let encoded = engine.encode(format!("{prefix}{VALUE}"));
                let out = redacted(&encoded);
                assert!(out.contains(r), "{prefix:?}: {encoded} → {out}");
                assert!(out.len() < encoded.len() / 2 + r.len(), "{out}");
            }
        }
        assert_eq!(redacted("nothing here"), "nothing here");
        assert_eq!(redactor().text(&format!("{VALUE}{VALUE}")).1, 2);
    }

    #[test]
    fn a_stream_finds_a_value_split_anywhere() {
        let body = format!("head {VALUE} middle {VALUE} tail");
        for split in 0..body.len() {
            for second in split..body.len() {
                let mut stream = Stream::new(Arc::new(redactor()));
                let mut out = Vec::new();
                let mut count = 0;
                for chunk in [&body[..split], &body[split..second], &body[second..]] {
                    let (pieces, n) = stream.push(&Bytes::copy_from_slice(chunk.as_bytes()));
                    pieces.iter().for_each(|piece| out.extend_from_slice(piece));
                    count += n;
                }
                let (bytes, n) = stream.finish();
                out.extend_from_slice(&bytes);
                count += n;
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    "head [redacted secret TOKEN] middle [redacted secret TOKEN] tail"
                );
                assert_eq!(count, 2);
            }
        }
    }

    #[test]
    fn a_stream_without_secrets_passes_chunks_through() {
        let mut stream = Stream::new(Arc::new(redactor()));
        let chunk = Bytes::from(vec![b'x'; 64 << 10]);
        let ([held, out], count) = stream.push(&chunk);
        assert_eq!(count, 0);
        assert!(held.is_empty());
        assert_eq!(out.len(), chunk.len() - (redactor().longest - 1));
        let ([held, out], _) = stream.push(&chunk);
        assert_eq!(held.len(), redactor().longest - 1);
        assert_eq!(out.as_ptr(), chunk.as_ptr(), "the chunk itself, not a copy");
        assert_eq!(stream.finish().0.len(), redactor().longest - 1);
    }

    #[test]
    fn a_cut_text_loses_the_start_of_a_value() {
        let (out, count) = redactor().cut_text(&format!("log: {}", &VALUE[..6]));
        assert_eq!(out, "log: [redacted secret TOKEN]");
        assert_eq!(count, 1);
        let (out, _) = redactor().cut_text("log: tok");
        assert_eq!(out, "log: tok", "three bytes tell next to nothing");
    }

    #[test]
    fn many_secrets_are_each_found() {
        let secrets: Vec<Secret> = (0..12)
            .map(|i| {
                Secret::new(format!("S{i}"), format!("value-{i}-{}", "q".repeat(i + 3))).unwrap()
            })
            .collect();
        let redactor = Redactor::new(&secrets).unwrap();
        let text: String = secrets.iter().map(|s| format!("<{}>", s.value())).collect();
        let (out, count) = redactor.text(&text);
        assert_eq!(count, 12, "{out}");
        let expected: String = (0..12)
            .map(|i| format!("<[redacted secret S{i}]>"))
            .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn json_strings_and_keys_are_redacted() {
        let mut value = serde_json::json!({ VALUE: [VALUE, 1, { "k": format!("x{VALUE}") }] });
        assert_eq!(redactor().json(&mut value), 3);
        assert_eq!(
            value,
            serde_json::json!({ "[redacted secret TOKEN]": ["[redacted secret TOKEN]", 1, { "k": "x[redacted secret TOKEN]" }] })
        );
    }

    /// An AWS-style key, with both `/` and `+`.
    const KEY: &str = "wJalr/XUtnFEMI+K7MDENG=bPxRfiCY";

    fn key_redactor() -> Redactor {
        Redactor::new(&[Secret::new("KEY", KEY).unwrap()]).unwrap()
    }

    #[test]
    fn every_serializer_s_json_escapes_are_found() {
        let r = "[redacted secret KEY]";
        let escaped = |escape: &dyn Fn(char) -> Option<String>| -> String {
            KEY.chars()
                .map(|c| escape(c).unwrap_or_else(|| c.to_string()))
                .collect()
        };
        let spellings = [
            // PHP's json_encode: `\/`.
            escaped(&|c| (c == '/').then(|| "\\/".into())),
            // .NET's System.Text.Json: `\u002B` for `+`, `\u003D` for `=`.
            escaped(&|c| "+=".contains(c).then(|| format!("\\u{:04X}", c as u32))),
            // Both, and lower-case hex.
            escaped(&|c| match c {
                '/' => Some("\\/".into()),
                '+' | '=' => Some(format!("\\u{:04x}", c as u32)),
                _ => None,
            }),
            // Every character escaped.
            escaped(&|c| Some(format!("\\u{:04x}", c as u32))),
        ];
        for spelling in spellings {
            let body = format!("{{\"echo\":\"{spelling}\",\"n\":1}}");
            let (out, count) = key_redactor().text(&body);
            assert_eq!(out, format!("{{\"echo\":\"{r}\",\"n\":1}}"), "{body}");
            assert_eq!(count, 1);
            // What a JSON parser makes of the text is the secret.
            let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(parsed["echo"], KEY);
        }
    }

    #[test]
    fn partly_percent_encoded_forms_are_found() {
        let r = "[redacted secret KEY]";
        // Python's urllib.parse.quote: `/` raw, `+` and `=` encoded.
        let python = KEY.replace('+', "%2B").replace('=', "%3D");
        let lower_hex = python.replace("%2B", "%2b").replace("%3D", "%3d");
        for spelling in [
            python,
            lower_hex,
            KEY.replace('+', "%2b"),
            KEY.replace('/', "%2F"),
        ] {
            let query = format!("?k={spelling}&x=1");
            let (out, count) = key_redactor().text(&query);
            assert_eq!(out, format!("?k={r}&x=1"), "{spelling}");
            assert_eq!(count, 1);
        }
        // A space as `+`, in a form body.
        assert_eq!(
            redacted("a=tok%2Fen%2B9%3AZq%22w+x"),
            "a=[redacted secret TOKEN]"
        );
        // A value that is not the secret is left alone.
        let near = KEY.replace('+', "%2C");
        assert_eq!(key_redactor().text(&near).1, 0);
    }

    #[test]
    fn non_ascii_secrets_are_found_in_surrogate_pairs_and_escapes() {
        let value = "pä55-🔑-wörd";
        let redactor = Redactor::new(&[Secret::new("P", value).unwrap()]).unwrap();
        let ascii_json = value
            .encode_utf16()
            .map(|unit| format!("\\u{unit:04X}"))
            .collect::<String>();
        let percent: String = value.bytes().map(|b| format!("%{b:02x}")).collect();
        for spelling in [ascii_json, percent, value.replace('ä', "\\u00e4")] {
            assert_eq!(
                redactor.text(&spelling).0,
                "[redacted secret P]",
                "{spelling}"
            );
        }
    }

    #[test]
    fn a_secret_holding_escape_bytes_is_found_as_it_is_and_escaped() {
        let value = "ab%25c\\d";
        let redactor = Redactor::new(&[Secret::new("E", value).unwrap()]).unwrap();
        for spelling in [value, "ab%2525c\\\\d", "ab%25c%5Cd"] {
            assert_eq!(
                redactor.text(spelling).0,
                "[redacted secret E]",
                "{spelling}"
            );
        }
    }

    #[test]
    fn a_stream_finds_a_spelling_split_anywhere() {
        let spelled = KEY.replace('/', "\\/").replace('+', "\\u002B");
        let body = format!("head {spelled} tail");
        for split in 0..body.len() {
            let mut stream = Stream::new(Arc::new(key_redactor()));
            let mut out = Vec::new();
            for chunk in [&body[..split], &body[split..]] {
                let (pieces, _) = stream.push(&Bytes::copy_from_slice(chunk.as_bytes()));
                pieces.iter().for_each(|piece| out.extend_from_slice(piece));
            }
            out.extend_from_slice(&stream.finish().0);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "head [redacted secret KEY] tail"
            );
        }
    }

    #[test]
    fn a_cut_loses_every_spelled_start_of_a_secret() {
        let spelled = KEY.replace('/', "%2F").replace('+', "\\u002B");
        for keep in MIN_TAIL..KEY.len() {
            let prefix: String = KEY[..keep].replace('/', "%2F").replace('+', "\\u002B");
            let (out, count) = key_redactor().cut_text(&format!("GET /?k={prefix}"));
            assert_eq!(out, "GET /?k=[redacted secret KEY]", "{keep}: {prefix}");
            assert_eq!(count, 1);
        }
        // Cut inside an escape.
        let (out, _) = key_redactor().cut_text(&format!("k={}", &spelled[..18]));
        assert_eq!(out, "k=[redacted secret KEY]");
        // A text redacted before its cut: the cut falls in the marker.
        let line = format!("GET http://h/?k={KEY}&pad={}", "x".repeat(600));
        let (out, count) = key_redactor().cut(&line, 20 + "[redacted secret".len());
        assert!(!out.contains(&KEY[..MIN_TAIL]), "{out}");
        assert!(out.ends_with('…'), "{out}");
        assert_eq!(count, 1);
        // Redacted first, the text fits: nothing more is cut.
        let (out, count) = key_redactor().cut(&format!("k={KEY}x"), 2 + KEY.len() - 1);
        assert_eq!(out, "k=[redacted secret KEY]x");
        assert_eq!(count, 1);
    }

    #[test]
    fn a_php_escaped_token_in_a_one_chunk_body_is_found() {
        let value = "ghp_T0ken-Value+9/xyz\"q";
        let redactor = Redactor::new(&[Secret::new("T", value).unwrap()]).unwrap();
        let body = r#""authorization: Bearer ghp_T0ken-Value+9\/xyz\"q\nhost: h\n""#;
        let mut stream = Stream::new(Arc::new(redactor));
        let ([a, b], n) = stream.push(&Bytes::copy_from_slice(body.as_bytes()));
        let (rest, m) = stream.finish();
        let out = [a, b, rest].concat();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""authorization: Bearer [redacted secret T]\nhost: h\n""#
        );
        assert_eq!(n + m, 1);
    }

    #[test]
    fn overlapping_secrets_leave_nothing_of_either() {
        let redactor = Redactor::new(&[Secret::new("X", "abcdefgha").unwrap()]).unwrap();
        let (out, count) = redactor.text("<abcdefghabcdefgha>");
        assert_eq!(out, "<[redacted secret X]>");
        assert_eq!(count, 1);
    }
}
