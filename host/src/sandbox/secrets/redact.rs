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
//!   `urllib.parse.quote` write them, and HTML character references: named
//!   (`&amp;`, `&lt;`, `&lbrace;` and every other name of an ASCII
//!   character, in any case), decimal and hex (`&#38;`, `&#x26;`, any case,
//!   leading zeros up to eight digits, the `;` optional), as an error page
//!   or an HTML-to-text decoder writes and reads them. Each is found from
//!   the first escaped character, which must decode to a byte of a secret.
//!
//! What this defends against is an honest reflection: a server echoing what
//! it was sent, in the encodings web software uses. A server colluding with
//! the tool can always send a secret in an encoding no redactor knows (hex,
//! reversed, split over requests): a secret is only as safe as the
//! destinations it is granted to.
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

use super::escapes::{MAX_SPELLED_PER_BYTE, escape_cut_short, unescape};
use super::secret::Secret;

/// The shortest partial form a cut text may end with and still be
/// redacted: a shorter tail tells next to nothing.
const MIN_TAIL: usize = 4;

/// Replaces every form of a set of secrets.
pub(crate) struct Redactor {
    forms: Vec<Form>,
    secrets: Vec<Spelled>,
    /// The length of the longest form or spelling.
    longest: usize,
    /// The bytes searched for, at most three a pass; every form has one of
    /// them at its `anchor`.
    passes: Vec<Vec<u8>>,
    /// The bytes that begin an escape: `\`, `%`, `&`, and `+` when a secret
    /// holds a space.
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
        let mut escapes = vec![b'\\', b'%', b'&'];
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
        for escapes in self.escapes.chunks(3) {
            each_position(escapes, input, &mut |at| {
                self.spelled_through(input, at, until, &mut found)
            });
        }
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
#[path = "redact_tests.rs"]
mod tests;
