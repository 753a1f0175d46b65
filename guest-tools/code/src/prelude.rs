//! The functions a script calls its tools by, defined before it runs.
//!
//! Threat model: a script may make a call and never await it (`x =
//! write_file(...)`, a list of calls of which it awaits one). A tool call
//! must run only when awaited, so each tool is a plain function that checks
//! its arguments at once (a wrong call raises where it is made) and returns
//! a coroutine: Python runs a coroutine only when it is awaited or
//! gathered, and only then does it ask the host. Only the tools the
//! script's text names are defined: a name it never writes it cannot call.
//! The two host functions the wrappers use, [`CHECK`] and [`CALL`], are
//! reserved names.

use std::collections::BTreeSet;

/// The host function that checks a call's arguments when it is made.
pub const CHECK: &str = "__toolcage_check__";
/// The host function that runs an awaited call.
pub const CALL: &str = "__toolcage_call__";
/// The coroutine every tool function returns.
const RUN: &str = "__toolcage_run__";

/// The prelude of `code`: the coroutine, and a function for each
/// identifier the code's text holds that `callable` says is a tool.
pub fn prelude(code: &str, callable: impl Fn(&str) -> bool) -> String {
    let mut text = format!(
        "async def {RUN}(name, args, kwargs):\n    return await {CALL}(name, *args, **kwargs)\n"
    );
    for name in identifiers(code).into_iter().filter(|name| callable(name)) {
        text.push_str(&format!(
            "def {name}(*args, **kwargs):\n    {CHECK}(\"{name}\", *args, **kwargs)\n    return {RUN}(\"{name}\", args, kwargs)\n"
        ));
    }
    text
}

/// Every word of `code` that could be a Python identifier (ASCII), once
/// each; a tool named in a string or a comment is defined too, harmlessly.
fn identifiers(code: &str) -> BTreeSet<&str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tools_a_script_names_are_defined() {
        let code = "r = await read_file(path='/a')\n# grep later\nx = calc2(1)";
        let text = prelude(code, |name| ["read_file", "grep", "calc"].contains(&name));
        assert!(text.contains("def read_file(*args, **kwargs):"), "{text}");
        assert!(text.contains("def grep("), "named in a comment: {text}");
        assert!(!text.contains("def calc("), "calc2 is another word: {text}");
        assert_eq!(text.matches("def ").count(), 3, "{text}");
    }

    #[test]
    fn words_are_split_at_every_other_character() {
        let words = identifiers("a.b(c_d, 3e)+_f\té2");
        assert_eq!(
            words.into_iter().collect::<Vec<_>>(),
            ["_f", "a", "b", "c_d"]
        );
    }
}
