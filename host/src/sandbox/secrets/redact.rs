//! Finding secrets in bytes and replacing them with `[redacted secret NAME]`.
//!
//! Each secret is searched for in the forms it could come back in: raw,
//! JSON-escaped, percent-encoded (upper- and lower-case hex) and base64
//! (standard and URL-safe), the base64 forms at each of the three offsets a
//! value can sit at inside a longer encoded text (as in `user:password` of
//! Basic auth), keeping only the characters that depend on the value alone.
//! A stream keeps back the last few bytes of each chunk, fewer than the
//! longest form, so a value split across chunks is still found. The forms
//! are held in memory zeroed on drop, and searched with substring finders
//! that borrow them, so no copy outlives the secret.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use zeroize::Zeroizing;

use super::Secret;

/// The shortest partial form a cut text may end with and still be
/// redacted: a shorter tail tells next to nothing.
const MIN_TAIL: usize = 4;

/// Replaces every form of a set of secrets.
pub(crate) struct Redactor {
    forms: Vec<Form>,
    /// The length of the longest form.
    longest: usize,
    /// The bytes searched for, at most three a pass; every form has one of
    /// them at its `anchor`.
    passes: Vec<Vec<u8>>,
}

struct Form {
    bytes: Zeroizing<Vec<u8>>,
    marker: Arc<str>,
    /// Where in the form its searched-for byte is.
    anchor: usize,
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
        for secret in secrets {
            let marker: Arc<str> = format!("[redacted secret {}]", secret.name()).into();
            for bytes in forms_of(secret.value()) {
                if !forms.iter().any(|f| f.bytes == bytes) {
                    forms.push(Form {
                        bytes,
                        marker: marker.clone(),
                        anchor: 0,
                    });
                }
            }
        }
        let longest = forms.iter().map(|f| f.bytes.len()).max()?;
        let passes = anchors(&mut forms);
        Some(Redactor {
            forms,
            longest,
            passes,
        })
    }

    /// Every place in `input` where a form starts before `until`: (start,
    /// form), sorted, overlapping ones included.
    fn found(&self, input: &[u8], until: usize) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut check = |at: usize| {
            let byte = input[at];
            for (i, form) in self.forms.iter().enumerate() {
                if form.bytes[form.anchor] != byte || at < form.anchor {
                    continue;
                }
                let start = at - form.anchor;
                if start < until && input[start..].starts_with(&form.bytes) {
                    found.push((start, i));
                }
            }
        };
        for pass in &self.passes {
            match pass[..] {
                [a] => memchr::memchr_iter(a, input).for_each(&mut check),
                [a, b] => memchr::memchr2_iter(a, b, input).for_each(&mut check),
                [a, b, c] => memchr::memchr3_iter(a, b, c, input).for_each(&mut check),
                _ => unreachable!("passes hold one to three bytes"),
            }
        }
        found.sort_unstable();
        found
    }

    /// Writes to `out` what of `input` goes out, with every form that starts
    /// before `until` replaced; returns how far `input` was consumed (at
    /// least `until`, more when the last form found runs past it) and how
    /// many were replaced. When none was, `out` is left empty: what goes out
    /// is `input[..end]` as it is.
    fn scan(&self, input: &[u8], until: usize, out: &mut Vec<u8>) -> (usize, u64) {
        let (mut at, mut count) = (0, 0);
        let found = self.found(input, until);
        let mut next = 0;
        while next < found.len() {
            // The leftmost form; of two at the same place, the longer.
            let start = found[next].0;
            let mut best = found[next].1;
            while next < found.len() && found[next].0 == start {
                if self.forms[found[next].1].bytes.len() > self.forms[best].bytes.len() {
                    best = found[next].1;
                }
                next += 1;
            }
            if start < at {
                continue;
            }
            out.extend_from_slice(&input[at..start]);
            out.extend_from_slice(self.forms[best].marker.as_bytes());
            count += 1;
            at = start + self.forms[best].bytes.len();
        }
        let end = at.max(until);
        if count > 0 {
            out.extend_from_slice(&input[at..end]);
        }
        (end, count)
    }

    /// `input` with every form replaced, and how many were; borrowed when
    /// there were none.
    pub(crate) fn bytes<'a>(&self, input: &'a [u8]) -> (Cow<'a, [u8]>, u64) {
        let mut out = Vec::new();
        match self.scan(input, input.len(), &mut out) {
            (_, 0) => (Cow::Borrowed(input), 0),
            (_, count) => (Cow::Owned(out), count),
        }
    }

    /// `text` with every form replaced, and how many were.
    pub(crate) fn text<'a>(&self, text: &'a str) -> (Cow<'a, str>, u64) {
        match self.bytes(text.as_bytes()) {
            (Cow::Borrowed(_), _) => (Cow::Borrowed(text), 0),
            // Forms are whole UTF-8 sequences (or ASCII), so cutting them out
            // leaves valid UTF-8; lossy only as a guard.
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
    /// that begins a form is replaced too.
    pub(crate) fn cut_text(&self, text: &str) -> (String, u64) {
        let (redacted, mut count) = self.text(text);
        let mut redacted = redacted.into_owned();
        let bytes = redacted.as_bytes();
        let tail = self.forms.iter().find_map(|form| {
            (MIN_TAIL..form.bytes.len().min(bytes.len() + 1))
                .rev()
                .find(|n| bytes.ends_with(&form.bytes[..*n]))
                .map(|n| (n, form.marker.clone()))
        });
        if let Some((n, marker)) = tail {
            let mut cut = redacted.len() - n;
            while !redacted.is_char_boundary(cut) {
                cut -= 1;
            }
            redacted.truncate(cut);
            redacted.push_str(&marker);
            count += 1;
        }
        (redacted, count)
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

/// The forms `value` is searched for in.
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
}
