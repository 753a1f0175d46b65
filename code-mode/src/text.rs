//! Text made safe for Python source: string literals, docstrings, comments.

use serde_json::Value;

/// `s` as a double-quoted Python string literal.
pub(crate) fn py_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON scalar as a Python literal (`"a"`, `1`, `0.5`, `True`, `None`);
/// `None` for arrays and objects.
pub(crate) fn py_literal(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("None".into()),
        Value::Bool(true) => Some("True".into()),
        Value::Bool(false) => Some("False".into()),
        Value::String(s) => Some(py_str(s)),
        Value::Number(n) if n.is_f64() => n.as_f64().map(|f| format!("{f:?}")),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// `s` on one line: whitespace runs become one space, control characters
/// go. Safe in a comment, and in a docstring once escaped.
pub(crate) fn flat(s: &str) -> String {
    let words = s.split(|c: char| c.is_whitespace() || c.is_control());
    words
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lines of a multi-line text, without trailing whitespace or leading
/// and trailing blank lines.
pub(crate) fn lines(s: &str) -> Vec<&str> {
    let all: Vec<&str> = s.lines().map(str::trim_end).collect();
    let start = all.iter().position(|l| !l.is_empty()).unwrap_or(all.len());
    let end = all
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |i| i + 1);
    all[start..end].to_vec()
}

/// One line of text for inside a `"""` docstring: backslashes doubled, no
/// two quotes in a row left unescaped, control characters made spaces.
pub(crate) fn doc_escape(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if chars.get(i + 1).is_none_or(|&next| next == '"') => out.push_str("\\\""),
            c if c.is_control() && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_literals() {
        assert_eq!(py_str("a\"b\\c\nd\u{0}"), r#""a\"b\\c\nd\x00""#);
        assert_eq!(py_str("héllo"), "\"héllo\"");
    }

    #[test]
    fn scalar_literals() {
        assert_eq!(py_literal(&json!(null)).as_deref(), Some("None"));
        assert_eq!(py_literal(&json!(true)).as_deref(), Some("True"));
        assert_eq!(py_literal(&json!(false)).as_deref(), Some("False"));
        assert_eq!(py_literal(&json!(-3)).as_deref(), Some("-3"));
        assert_eq!(
            py_literal(&json!(u64::MAX)).as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(py_literal(&json!(0.5)).as_deref(), Some("0.5"));
        assert_eq!(py_literal(&json!(100.0)).as_deref(), Some("100.0"));
        assert_eq!(py_literal(&json!(1e300)).as_deref(), Some("1e300"));
        assert_eq!(py_literal(&json!("x")).as_deref(), Some("\"x\""));
        assert_eq!(py_literal(&json!([1])), None);
        assert_eq!(py_literal(&json!({})), None);
    }

    #[test]
    fn flattening() {
        assert_eq!(flat("  a\n\tb\r\n c\u{0}d  "), "a b c d");
        assert_eq!(flat(""), "");
    }

    #[test]
    fn trimmed_lines() {
        assert_eq!(lines("\n\n a \r\n\nb  \n\n"), [" a", "", "b"]);
        assert!(lines(" \n ").is_empty());
    }

    #[test]
    fn docstring_escapes() {
        assert_eq!(doc_escape(r#"say """hi""" \n"#), r#"say \"\""hi\"\"" \\n"#);
        assert_eq!(doc_escape("ends with \""), "ends with \\\"");
        assert_eq!(doc_escape("a\u{0}b\tc"), "a b\tc");
    }
}
