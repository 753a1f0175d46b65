//! Tool name patterns, the grammar of permission rules and of `calls`
//! grants: a tool name in which `*` stands for any run of characters
//! (possibly empty), with no other wildcard.
//!
//! Threat model: names come from models and tools. Matching is linear
//! backtracking, O(pattern × name), so no pattern or name can make it slow.

/// Whether `pattern` is made of tool name characters (`[A-Za-z0-9_-]`) and
/// `*`, and is not empty.
pub(crate) fn is_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*'))
}

/// Whether `name` matches `pattern`, where `*` matches any run of
/// characters. Linear backtracking on the last `*`: O(pattern × name).
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let (pattern, name) = (pattern.as_bytes(), name.as_bytes());
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((star_p, star_n)) = star {
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_only_on_stars() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("write_*", "write_file"));
        assert!(glob_match("write_*", "write_"));
        assert!(!glob_match("write_*", "rewrite_file"));
        assert!(glob_match("*_file", "edit_file"));
        assert!(glob_match("*_*_*", "a_b_c"));
        assert!(!glob_match("*_*_*", "a_b"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("**x**", "x"));
    }

    #[test]
    fn patterns_are_names_and_stars() {
        assert!(is_pattern("fetch"));
        assert!(is_pattern("read_*"));
        assert!(!is_pattern(""));
        assert!(!is_pattern("a b"));
        assert!(!is_pattern("a?"));
    }
}
