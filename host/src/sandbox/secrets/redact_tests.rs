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
        .map(|i| Secret::new(format!("S{i}"), format!("value-{i}-{}", "q".repeat(i + 3))).unwrap())
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
    split_anywhere(key_redactor, &body, "head [redacted secret KEY] tail");
}

/// Streams `body` in two chunks split at each place, through a fresh
/// redactor of `redactor`'s each time: what goes out is always `expected`.
fn split_anywhere(redactor: fn() -> Redactor, body: &str, expected: &str) {
    for split in 0..body.len() {
        let mut stream = Stream::new(Arc::new(redactor()));
        let mut out = Vec::new();
        for chunk in [&body[..split], &body[split..]] {
            let (pieces, _) = stream.push(&Bytes::copy_from_slice(chunk.as_bytes()));
            pieces.iter().for_each(|piece| out.extend_from_slice(piece));
        }
        out.extend_from_slice(&stream.finish().0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            expected,
            "split at {split}"
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

/// A secret holding `&` and `<`, as an HTML error page reflects it.
const MARKUP: &str = "p&ss<w>rd\"{x}";

fn markup_redactor() -> Redactor {
    Redactor::new(&[Secret::new("PW", MARKUP).unwrap()]).unwrap()
}

/// Every character of `value` spelled by `spelling`.
fn spelled_all(value: &str, spelling: impl Fn(char) -> String) -> String {
    value.chars().map(spelling).collect()
}

#[test]
fn html_character_references_are_found_in_every_form() {
    let r = "[redacted secret PW]";
    let redactor = markup_redactor();
    let redacted = |text: &str| redactor.text(text).0.into_owned();
    let escaped = MARKUP
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&GT;")
        .replace('"', "&quot;")
        .replace('{', "&lbrace;")
        .replace('}', "&RCub;");
    assert_eq!(
        redacted(&format!("<p>{escaped}</p>")),
        format!("<p>{r}</p>")
    );
    // Every character as a reference: decimal, hex in either case, with
    // leading zeros, with and without the `;`.
    for spelling in [
        (|c: char| format!("&#{};", c as u32)) as fn(char) -> String,
        |c| format!("&#x{:x};", c as u32),
        |c| format!("&#X{:X};", c as u32),
        |c| format!("&#x{:06x};", c as u32),
        |c| format!("&#{:07}", c as u32),
    ] {
        let text = format!("a {} b", spelled_all(MARKUP, spelling));
        assert_eq!(redacted(&text), format!("a {r} b"), "{text}");
    }
    // Legacy names need no `;`; others and overlong digits are no reference.
    assert_eq!(redacted("p&ampss&ltw>rd\"{x}"), r);
    assert_eq!(redacted("p&ampss&ltw&gtrd&quot{x}"), r);
    let unknown = "p&ampersand;ss<w>rd\"{x}";
    assert_eq!(redacted(unknown), unknown);
    let overlong = "p&#0000000038;ss<w>rd\"{x}";
    assert_eq!(redacted(overlong), overlong);
    assert_eq!(redacted("&amp; &#; &#x; &"), "&amp; &#; &#x; &");
}

#[test]
fn a_stream_finds_html_references_split_anywhere() {
    let body = format!(
        "<h1>Error</h1> token {} rejected",
        MARKUP.replace('&', "&#x26;").replace('<', "&lt;")
    );
    let expected = "<h1>Error</h1> token [redacted secret PW] rejected";
    split_anywhere(markup_redactor, &body, expected);
}

#[test]
fn a_cut_loses_a_secret_s_html_spelled_start() {
    let redactor = markup_redactor();
    let (cut, tails) = redactor.cut_text("tail: p&amp;ss&lt;w");
    assert!(!cut.contains("ss&lt;w"), "{cut}");
    assert_eq!(tails, 1);
}
