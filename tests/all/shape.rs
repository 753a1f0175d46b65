//! The shape of the library's source, checked as the book's architecture
//! page states it: imports between the top-level modules of `host/src` go
//! one way (no circles; `sandbox/` imports none of the others, `catalog/`
//! only `sandbox/`), inside the library they name the module an item lives
//! in rather than the crate root's re-exports, no file reaches 1,000 lines
//! and no function 100, and the architecture page has an entry for every
//! top-level module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module may import, beyond itself.
const ALLOWED_ONLY: [(&str, &[&str]); 2] = [("sandbox", &[]), ("catalog", &["sandbox"])];

/// The most lines a source file of the library may have.
const MAX_FILE_LINES: usize = 999;
/// The most lines a function may have.
const MAX_FUNCTION_LINES: usize = 100;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src")
}

/// Every `.rs` file of the library (not the binary's), with its module path.
fn library_files() -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    walk(&src(), &mut files);
    files.retain(|path| !path.starts_with(src().join("bin")));
    let declared = path_modules(&files);
    files
        .into_iter()
        .map(|path| {
            let module = declared
                .get(&path)
                .cloned()
                .unwrap_or_else(|| module_path(&path));
            (module, path)
        })
        .collect()
}

/// The module paths of files that a `#[path = "…"] mod name;` declares
/// (a test module in a file of its own): the declaring module's, then
/// `name`.
fn path_modules(files: &[PathBuf]) -> BTreeMap<PathBuf, Vec<String>> {
    let mut declared = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (at, line) in lines.iter().enumerate() {
            let Some(target) = line
                .strip_prefix("#[path = \"")
                .and_then(|rest| rest.strip_suffix("\"]"))
            else {
                continue;
            };
            let Some(name) = lines[at + 1..]
                .iter()
                .find(|l| !l.starts_with("#["))
                .and_then(|l| l.strip_prefix("mod "))
                .and_then(|l| l.strip_suffix(';'))
            else {
                continue;
            };
            let mut module = module_path(file);
            module.push(name.to_string());
            declared.insert(file.parent().unwrap().join(target), module);
        }
    }
    declared
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `catalog/registry.rs` → `[catalog, registry]`; `mcp/http/mod.rs` →
/// `[mcp, http]`; `lib.rs` → `[]`. A file of a `#[path]` module or a
/// directory of a file module (`send/tests.rs` beside `send.rs`) is the
/// child its path says.
fn module_path(path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The source without comments, string and character literals (so that a
/// path in a doc comment or a message is not taken for an import, nor a
/// brace in a literal for a block), its lines kept.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut i = 0;
    let newlines = |from: usize, to: usize, code: &mut String| {
        for _ in chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
        {
            code.push('\n');
        }
    };
    while i < chars.len() {
        let next = |k: usize| chars.get(i + k).copied().unwrap_or(' ');
        let after_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let end = match chars[i] {
            '/' if next(1) == '/' => find(&chars, i, "\n").map_or(chars.len(), |e| e - 1),
            '/' if next(1) == '*' => find(&chars, i + 2, "*/").unwrap_or(chars.len()),
            'r' if !after_ident
                && (next(1) == '"'
                    || (next(1) == '#' && next(2) != '_' && !next(2).is_alphabetic())) =>
            {
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                let close = format!("\"{}", "#".repeat(hashes));
                find(&chars, i + 2 + hashes, &close).unwrap_or(chars.len())
            }
            '"' => string_end(&chars, i + 1),
            '\'' if next(1) == '\\' => find(&chars, i + 2, "'").unwrap_or(chars.len()),
            '\'' if next(2) == '\'' => i + 3,
            c => {
                code.push(c);
                i += 1;
                continue;
            }
        };
        newlines(i, end, &mut code);
        code.push(' ');
        i = end;
    }
    code
}

/// Where `needle` ends, searched from `from`.
fn find(chars: &[char], from: usize, needle: &str) -> Option<usize> {
    let needle: Vec<char> = needle.chars().collect();
    (from..chars.len().saturating_sub(needle.len() - 1))
        .find(|&at| chars[at..at + needle.len()] == needle[..])
        .map(|at| at + needle.len())
}

/// Where a string literal whose text starts at `from` ends.
fn string_end(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// The crate-level names a file's code reaches: for every `crate::x` and
/// every `super::…::x` that climbs to the crate root, `x`.
fn crate_level_names(module: &[String], code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let rest = &code[i..];
        if starts_word && (rest.starts_with("crate::") || rest.starts_with("super::")) {
            let (depth_left, after) = climb(module, rest);
            if depth_left == 0 {
                names.extend(first_segments(after));
            }
            i += rest.len() - after.len();
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    names
}

/// Follows `crate::` or a chain of `super::` from `module`: how deep below
/// the crate root the path then is, and the rest of it.
fn climb<'a>(module: &[String], path: &'a str) -> (usize, &'a str) {
    if let Some(rest) = path.strip_prefix("crate::") {
        return (0, rest);
    }
    let mut depth = module.len();
    let mut rest = path;
    while let Some(after) = rest.strip_prefix("super::") {
        depth = depth.saturating_sub(1);
        rest = after;
    }
    (depth, rest)
}

/// `a::b` → `[a]`; `{a, b::c, self}` → `[a, b]`.
fn first_segments(path: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = path.strip_prefix('{') else {
        return vec![ident(path)];
    };
    let mut depth = 0;
    let mut names = Vec::new();
    let mut start = true;
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && !c.is_whitespace() => {
                names.push(ident(&group[index..]));
                start = false;
            }
            _ => {}
        }
    }
    names
}

/// The top-level modules `lib.rs` declares.
fn top_level_modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    code_of(&lib)
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// Each top-level module's imports of the others, and every place the
/// library imports the crate root's re-exports.
fn imports() -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let modules = top_level_modules();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut through_root = Vec::new();
    for (module, path) in library_files() {
        let Some(top) = module.first() else { continue };
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        for name in crate_level_names(&module, &code) {
            if modules.contains(&name) {
                if name != *top {
                    edges.entry(top.clone()).or_default().insert(name);
                }
            } else if !name.is_empty() && name != "self" {
                through_root.push(format!("{}: crate::{name}", path.display()));
            }
        }
    }
    (edges, through_root)
}

/// A circle in `edges`, if there is one, as the modules along it.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_top_level_modules_import_one_way() {
    let (edges, _) = imports();
    assert_eq!(
        circle(&edges),
        None,
        "an import circle; imports: {edges:#?}"
    );
    for (module, allowed) in ALLOWED_ONLY {
        let used = edges.get(module).cloned().unwrap_or_default();
        let beyond: Vec<&String> = used
            .iter()
            .filter(|m| !allowed.contains(&m.as_str()))
            .collect();
        assert!(
            beyond.is_empty(),
            "`{module}/` may import only {allowed:?}, but imports {beyond:?}"
        );
    }
}

#[test]
fn the_library_imports_items_from_their_modules() {
    let (_, through_root) = imports();
    assert!(
        through_root.is_empty(),
        "imports through the crate root's re-exports (name the module instead):\n{}",
        through_root.join("\n")
    );
}

#[test]
fn the_import_check_finds_what_it_looks_for() {
    // The check itself: a path climbing to the root, a group, a literal
    // and a comment that merely mention one.
    let module = ["catalog".to_string(), "live".to_string()];
    let code = code_of(
        "use super::super::call::{Call, x};\nuse super::table::Entry;\nuse crate::{sandbox::a, Error};\n// crate::mcp\nlet s = \"crate::agent\";",
    );
    let names = crate_level_names(&module, &code);
    assert_eq!(names, ["call", "sandbox", "Error"]);
    let edges = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(
        circle(&edges),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}

#[test]
fn no_source_file_or_function_is_too_long() {
    let mut long = Vec::new();
    for (_, path) in library_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{}: {lines} lines", path.display()));
        }
        for (name, length) in function_lengths(&code_of(&text)) {
            if length > MAX_FUNCTION_LINES {
                long.push(format!("{}: fn {name} is {length} lines", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}

/// Each function's name and its length in lines, from `fn` to its closing
/// brace (functions without a body are skipped).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut lengths = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(at) = find_fn(line) else { continue };
        let name: String = line[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 0i32;
        let mut opened = false;
        for (offset, body) in lines[start..].iter().enumerate() {
            if !opened && body.contains(';') && !body.contains('{') {
                break;
            }
            for c in body.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                lengths.push((name, offset + 1));
                break;
            }
        }
    }
    lengths
}

/// Where a line declares a function (`fn name`), if it does.
fn find_fn(line: &str) -> Option<usize> {
    let at = line.find("fn ")?;
    let before = &line[..at];
    let declares = before.split_whitespace().all(|word| {
        matches!(word, "pub" | "const" | "async" | "unsafe" | "extern") || word.starts_with("pub(")
    });
    let named = line[at + 3..].starts_with(|c: char| c.is_alphabetic() || c == '_');
    (declares && named).then_some(at)
}

#[test]
fn the_architecture_page_has_every_top_level_module() {
    let page =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/contributing/architecture.md");
    let page = std::fs::read_to_string(page).unwrap();
    let missing: Vec<String> = top_level_modules()
        .into_iter()
        .filter(|m| {
            !page.contains(&format!("host/src/{m}/")) && !page.contains(&format!("host/src/{m}.rs"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the architecture page has no entry for {missing:?}"
    );
}
