//! Turning a response into text for a model: what kind of content it is,
//! HTML to Markdown-like text, pieces by character offset, and redirect
//! targets. Pure functions, tested natively.

/// What a response holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// HTML, converted.
    Html,
    /// Text returned as it is.
    Text,
    /// Anything else, refused.
    Binary,
}

/// The kind of `body`, by its content type and, when that says nothing, by
/// a look at its first bytes.
pub fn kind(content_type: Option<&str>, body: &[u8]) -> Kind {
    let essence = content_type
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match essence.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        t if t.starts_with("text/") => Kind::Text,
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/x-javascript"
        | "application/ecmascript"
        | "application/x-yaml"
        | "application/yaml"
        | "application/toml"
        | "application/x-sh" => Kind::Text,
        t if t.ends_with("+json") || t.ends_with("+xml") => Kind::Text,
        "" | "application/octet-stream" => sniff(body),
        _ => Kind::Binary,
    }
}

fn sniff(body: &[u8]) -> Kind {
    let head = &body[..body.len().min(1024)];
    if head.contains(&0) || std::str::from_utf8(head).is_err() && head.len() < 4 {
        return Kind::Binary;
    }
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    if text.trim_start().starts_with("<!doctype html") || text.contains("<html") {
        Kind::Html
    } else if String::from_utf8_lossy(head).contains('\u{fffd}') && head.len() >= 1024 {
        Kind::Binary
    } else {
        Kind::Text
    }
}

/// HTML as Markdown-like text: headings, links, lists and emphasis kept;
/// scripts, styles and markup dropped.
pub fn html_to_text(html: &[u8]) -> String {
    let text = html2text::config::plain()
        .link_footnotes(true)
        .string_from_read(html, 100)
        .unwrap_or_else(|_| String::from_utf8_lossy(html).into_owned());
    // Runs of blank lines carry nothing for a model.
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// A piece of a text, by character offset.
#[derive(Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The characters from the offset, at most the maximum.
    pub text: &'a str,
    /// The text's length in characters.
    pub total: usize,
    /// Where the next piece starts, when there is one.
    pub next_offset: Option<usize>,
}

/// At most `max` characters of `text` from character `offset`.
pub fn piece(text: &str, offset: usize, max: usize) -> Piece<'_> {
    let total = text.chars().count();
    let byte = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i)
    };
    let start = byte(offset.min(total));
    let end_chars = offset.saturating_add(max).min(total);
    let end = byte(end_chars);
    Piece {
        text: &text[start..end],
        total,
        next_offset: (end_chars < total).then_some(end_chars),
    }
}

/// The URL a `Location` header points at, from the URL that sent it.
pub fn resolve(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if let Some(path) = location.strip_prefix("//") {
        return format!("{scheme}://{path}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority_end..];
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let directory = match path.rfind('/') {
        Some(i) => &path[..=i],
        None => "/",
    };
    format!("{scheme}://{authority}{directory}{location}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_decide_the_kind() {
        assert_eq!(kind(Some("text/html; charset=utf-8"), b""), Kind::Html);
        assert_eq!(kind(Some("text/plain"), b""), Kind::Text);
        assert_eq!(kind(Some("application/json"), b""), Kind::Text);
        assert_eq!(kind(Some("application/ld+json"), b""), Kind::Text);
        assert_eq!(kind(Some("image/png"), b"\x89PNG"), Kind::Binary);
        assert_eq!(kind(Some("application/pdf"), b"%PDF"), Kind::Binary);
        assert_eq!(kind(None, b"<!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(kind(None, b"plain words"), Kind::Text);
        assert_eq!(
            kind(Some("application/octet-stream"), b"\0\x01\x02"),
            Kind::Binary
        );
    }

    #[test]
    fn html_becomes_readable_text() {
        let html = br#"<html><head><title>T</title><style>p{color:red}</style>
            <script>alert(1)</script></head><body><h1>Heading</h1>
            <p>Some <b>bold</b> text with a <a href="https://example.com/x">link</a>.</p>
            <ul><li>one</li><li>two</li></ul></body></html>"#;
        let text = html_to_text(html);
        assert!(text.contains("Heading"), "{text}");
        assert!(text.contains("bold"), "{text}");
        assert!(text.contains("one") && text.contains("two"), "{text}");
        assert!(text.contains("https://example.com/x"), "{text}");
        assert!(
            !text.contains("alert(1)") && !text.contains("color:red"),
            "{text}"
        );
        assert!(!text.contains("<p>"), "{text}");
    }

    #[test]
    fn pieces_are_cut_on_characters_and_say_where_to_go_on() {
        let text = "héllo wörld";
        assert_eq!(
            piece(text, 0, 5),
            Piece {
                text: "héllo",
                total: 11,
                next_offset: Some(5)
            }
        );
        assert_eq!(
            piece(text, 6, 100),
            Piece {
                text: "wörld",
                total: 11,
                next_offset: None
            }
        );
        assert_eq!(piece(text, 50, 5).text, "");
    }

    #[test]
    fn redirect_targets_resolve_against_the_url() {
        let base = "https://a.test/dir/page?q=1";
        assert_eq!(resolve(base, "https://b.test/x"), "https://b.test/x");
        assert_eq!(resolve(base, "//c.test/y"), "https://c.test/y");
        assert_eq!(resolve(base, "/root"), "https://a.test/root");
        assert_eq!(resolve(base, "other"), "https://a.test/dir/other");
        assert_eq!(resolve("http://a.test", "x"), "http://a.test/x");
    }
}
