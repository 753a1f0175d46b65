//! Python identifiers, and the names of the helper types of a stub.

use std::collections::{BTreeSet, HashMap, HashSet};

/// Python's hard keywords: not usable as names, parameters or class fields.
const KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names a helper type must not take: what the stubs import or use from
/// `typing` and the builtins, and the capitalised builtins (exceptions and
/// the like) a CamelCase name could shadow.
const RESERVED: [&str; 84] = [
    "Any",
    "Literal",
    "NotRequired",
    "Required",
    "TypedDict",
    "Unpack",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tuple",
    "object",
    "type",
    "typing",
    "asyncio",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "ZeroDivisionError",
];

/// The name a script calls the tool `name` by: `name` itself when it is a
/// Python identifier (ASCII, not a keyword); else `name` with each `-` and
/// `.` written `_` (`get-sum` → `get_sum`, as MCP servers' kebab-case
/// names need), when that is one; else `None`.
///
/// A tool with no such name (`3d`, `class`) gets no `def` in the stubs,
/// only a comment saying that a script cannot call it.
pub fn python_identifier(name: &str) -> Option<String> {
    if is_identifier(name) {
        return Some(name.to_owned());
    }
    let spelled: String = name
        .chars()
        .map(|c| if c == '-' || c == '.' { '_' } else { c })
        .collect();
    is_identifier(&spelled).then_some(spelled)
}

/// The identifier a script calls each of `names` (every tool of a
/// registry, whether a script may call it or not) by, one-to-one: a name
/// that is an identifier is its own; another gets its
/// [`python_identifier`] spelling when no tool's name or earlier spelling
/// is that, else the spelling with the first free suffix `_2`, `_3`, ...;
/// one with no spelling (`3d`, `class`) gets none. The names are taken in
/// sorted order, so the mapping depends on the set of names alone.
///
/// Computed over every tool, those denied or not granted included, so that
/// a script calling the identifier of a tool it may not call gets a
/// `NameError`, never another tool.
pub fn identifiers<'a>(names: impl IntoIterator<Item = &'a str>) -> HashMap<&'a str, String> {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut taken: HashSet<String> = names
        .iter()
        .filter(|name| is_identifier(name))
        .map(|name| (*name).to_owned())
        .collect();
    let mut out = HashMap::with_capacity(names.len());
    for name in names {
        if is_identifier(name) {
            out.insert(name, name.to_owned());
            continue;
        }
        let Some(spelled) = python_identifier(name) else {
            continue;
        };
        let mut identifier = spelled.clone();
        let mut n = 1;
        while taken.contains(&identifier) {
            n += 1;
            identifier = format!("{spelled}_{n}");
        }
        taken.insert(identifier.clone());
        out.insert(name, identifier);
    }
    out
}

/// Whether `name` is an ASCII Python identifier and not a keyword.
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !KEYWORDS.contains(&name)
}

/// `read_file` → `ReadFile`, `x-y` → `XY`: the ASCII letters and digits of
/// `name`, each run starting with a capital.
pub(crate) fn camel(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(|part| {
            let mut chars = part.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase());
            first.into_iter().chain(chars)
        })
        .collect()
}

/// Hands out helper type names, each once, within one stub or module.
pub(crate) struct Namer {
    used: BTreeSet<String>,
}

impl Namer {
    /// A namer with the reserved names (keywords, typing, builtins) taken.
    pub(crate) fn new() -> Self {
        let used = KEYWORDS.iter().chain(&RESERVED);
        Self {
            used: used.map(|name| (*name).to_owned()).collect(),
        }
    }

    /// Marks `name` (a tool's function) as taken.
    pub(crate) fn reserve(&mut self, name: &str) {
        self.used.insert(name.to_owned());
    }

    /// `candidate` (made an identifier), or it with the first free suffix
    /// `2`, `3`, ... (`_2`, `_3`, ... after a digit).
    pub(crate) fn claim(&mut self, candidate: &str) -> String {
        let base = match candidate.chars().next() {
            Some(c) if c == '_' || c.is_ascii_alphabetic() => candidate.to_owned(),
            _ => format!("T{candidate}"),
        };
        let separator = if base.ends_with(|c: char| c.is_ascii_digit()) {
            "_"
        } else {
            ""
        };
        let mut name = base.clone();
        let mut n = 1;
        while self.used.contains(&name) {
            n += 1;
            name = format!("{base}{separator}{n}");
        }
        self.used.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in [
            "grep",
            "_x",
            "read_file",
            "A1",
            "match",
            "type",
            "print",
            "_",
        ] {
            assert_eq!(python_identifier(ok).as_deref(), Some(ok), "{ok}");
        }
        assert_eq!(python_identifier("read-file").as_deref(), Some("read_file"));
        assert_eq!(python_identifier("x.y").as_deref(), Some("x_y"));
        for bad in ["", "3d", "class", "None", "from", "a b", "é", "3-d"] {
            assert_eq!(python_identifier(bad), None, "{bad}");
        }
    }

    #[test]
    fn camel_case() {
        assert_eq!(camel("read_file"), "ReadFile");
        assert_eq!(camel("x-y"), "XY");
        assert_eq!(camel("getHTTP"), "GetHTTP");
        assert_eq!(camel("__a__b"), "AB");
        assert_eq!(camel("3d"), "3d");
        assert_eq!(camel("日本"), "");
    }

    #[test]
    fn namer_dedupes_and_avoids_reserved() {
        let mut namer = Namer::new();
        namer.reserve("GrepResult");
        assert_eq!(namer.claim("GrepResult"), "GrepResult2");
        assert_eq!(namer.claim("GrepResult"), "GrepResult3");
        assert_eq!(namer.claim("Literal"), "Literal2");
        assert_eq!(namer.claim("ValueError"), "ValueError2");
        assert_eq!(namer.claim("None"), "None2");
        assert_eq!(namer.claim(""), "T");
        assert_eq!(namer.claim("3d"), "T3d");
        assert_eq!(namer.claim("D7"), "D7");
        assert_eq!(namer.claim("D7"), "D7_2");
    }
}
