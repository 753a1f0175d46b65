//! The book (`docs/`) cannot drift from the code: its CLI examples run, its
//! config reference is the parser's own table (both ways), its
//! `toolcage.toml` examples parse, every client snippet names flags that
//! exist, each `--help` names pages that exist, and every relative link
//! and anchor resolves (the link check CI runs; see
//! `docs/src/contributing/index.md`).
//!
//! A CLI example is a ```console block: `$ toolcage ARGS` lines, each
//! followed by an optional `? CODE` line (the exit status, 0 without one)
//! and its output, stdout then stderr. In the output a line `...` stands
//! for any number of lines and `[..]` for any text within a line. Each
//! block runs in a fresh directory holding `project/` (a few files to
//! mount), `tools/calc.wasm` (the bundled calc as a file) and
//! `broken/bad_name.wasm` (a component declaring a bad name) and
//! `configs/typo.toml` (a config with a misspelt key). The two lines a slow load prints on stderr (a cold compile
//! cache) are left out before matching.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use toolcage::Config;
use toolcage_tests::{guests, toolcage};

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Every page of the book, by its path under `docs/src`.
fn pages() -> BTreeMap<String, String> {
    let src = root().join("docs/src");
    let mut pages = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let name = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                pages.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    pages
}

/// The book's pages and the README (as `../../README.md`), whose examples
/// are held to the same checks.
fn pages_and_readme() -> BTreeMap<String, String> {
    let mut pages = pages();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    pages.insert("../../README.md".into(), readme);
    pages
}

/// A fenced code block: its info string and its text.
struct Block {
    info: String,
    text: String,
}

/// The fenced code blocks of a page.
fn blocks(page: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in page.lines() {
        let trimmed = line.trim_start();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// A page's text outside its code blocks.
fn prose(page: &str) -> String {
    let mut text = String::new();
    let mut in_block = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// Splits a command line as a POSIX shell does, for quotes only.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Whether `text` matches `pattern`, where `[..]` is any text.
fn line_matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once("[..]") {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| line_matches(tail, &rest[i..]))
        }
    }
}

/// Whether `lines` match `patterns`, where a `...` line is any lines.
fn lines_match(patterns: &[&str], lines: &[&str]) -> bool {
    match patterns.split_first() {
        None => lines.is_empty(),
        Some((&"...", rest)) => (0..=lines.len()).any(|i| lines_match(rest, &lines[i..])),
        Some((pattern, rest)) => lines
            .split_first()
            .is_some_and(|(line, lines)| line_matches(pattern, line) && lines_match(rest, lines)),
    }
}

/// One `$ toolcage ...` of a console block.
struct Example {
    command: String,
    status: i32,
    output: Vec<String>,
}

fn examples(block: &str) -> Vec<Example> {
    let mut examples: Vec<Example> = Vec::new();
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            examples.push(Example {
                command: command.to_string(),
                status: 0,
                output: Vec::new(),
            });
        } else if let Some(example) = examples.last_mut() {
            match line.strip_prefix("? ") {
                Some(code) if example.output.is_empty() => {
                    example.status = code.trim().parse().expect("? CODE")
                }
                _ => example.output.push(line.trim_end().to_string()),
            }
        } else {
            panic!("a console block must start with `$ `: {line}");
        }
    }
    examples
}

/// The directory a console block runs in.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("src/main.rs"),
        "fn main() {\n    // TODO: greet the user\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("notes.md"),
        "# Notes\n\nTODO: write the intro\n",
    )
    .unwrap();
    std::fs::write(
        project.join("sales.csv"),
        "region,units\nnorth,12\nsouth,30\nnorth,18\n",
    )
    .unwrap();
    let configs = dir.path().join("configs");
    std::fs::create_dir(&configs).unwrap();
    std::fs::write(configs.join("typo.toml"), "[limits]\ntimeout = 5\n").unwrap();
    // The bundled calc as a file (`just tools`), and a component that
    // declares a bad name.
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::copy(guests::TOOLCAGE_CALC, tools.join("calc.wasm")).unwrap();
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    std::fs::copy(guests::FIXTURE_BAD_NAME, broken.join("bad_name.wasm")).unwrap();
    dir
}

fn run(example: &Example, dir: &Path) -> Result<(), String> {
    let words = words(&example.command);
    let Some(args) = words.strip_prefix(&["toolcage".to_string()]) else {
        return Err(format!("only toolcage runs here: {}", example.command));
    };
    let output = toolcage()
        .args(args)
        .current_dir(dir)
        .env_remove("TOOLCAGE_TOKEN")
        .output()
        .unwrap();
    let stderr = toolcage_tests::without_slow_load_notes(&String::from_utf8_lossy(&output.stderr));
    let actual = format!("{}{stderr}", String::from_utf8_lossy(&output.stdout));
    let actual_lines: Vec<&str> = actual.lines().map(str::trim_end).collect();
    let expected: Vec<&str> = example.output.iter().map(String::as_str).collect();
    let status = output.status.code().unwrap_or(-1);
    if status == example.status && lines_match(&expected, &actual_lines) {
        Ok(())
    } else {
        Err(format!(
            "$ {}\nexpected (status {}):\n{}\ngot (status {status}):\n{actual}",
            example.command,
            example.status,
            expected.join("\n")
        ))
    }
}

#[test]
fn the_books_cli_examples_run_as_shown() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (page, text) in pages_and_readme() {
        for block in blocks(&text).iter().filter(|b| b.info == "console") {
            let dir = fixture();
            for example in examples(&block.text) {
                ran += 1;
                if let Err(failure) = run(&example, dir.path()) {
                    failures.push(format!("docs/src/{page}:\n{failure}"));
                }
            }
        }
    }
    assert!(ran >= 20, "only {ran} examples ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The rows of the config reference: key → default.
fn reference_keys() -> BTreeMap<String, String> {
    let page = &pages()["reference/config.md"];
    let mut keys = BTreeMap::new();
    for line in prose(page).lines() {
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches(['|', ' ']))
            .collect();
        if let [key, default, _meaning] = cells[..]
            && let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`'))
        {
            let default = default.trim_matches('`').to_string();
            assert!(
                keys.insert(key.to_string(), default).is_none(),
                "{key} twice"
            );
        }
    }
    keys
}

#[test]
fn the_config_reference_is_the_parsers_table_both_ways() {
    let documented = reference_keys();
    let parsed: BTreeMap<String, String> = Config::keys()
        .map(|k| (k.path.to_string(), k.default.to_string()))
        .collect();
    let missing: Vec<_> = parsed
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    let unknown: Vec<_> = documented
        .keys()
        .filter(|k| !parsed.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "keys the parser takes but reference/config.md lacks: {missing:?}; keys it lists that the parser refuses: {unknown:?}"
    );
    for (key, default) in &parsed {
        assert_eq!(&documented[key], default, "the default of {key}");
    }
}

#[test]
fn every_toolcage_toml_in_the_book_parses() {
    let mut parsed = 0;
    for (page, text) in pages_and_readme() {
        if page.starts_with("clients/") {
            continue; // the clients' own TOML (Codex), checked below
        }
        for block in blocks(&text).iter().filter(|b| b.info == "toml") {
            if let Err(error) = Config::parse(&block.text, Path::new("/etc/toolcage")) {
                panic!("docs/src/{page}: {error}\n{}", block.text);
            }
            parsed += 1;
        }
    }
    assert!(parsed >= 8, "only {parsed} toolcage.toml examples");
}

/// Every `--flag` any `toolcage ... --help` shows.
fn flags() -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let commands = [
        "list",
        "inspect",
        "call",
        "check",
        "pull",
        "push",
        "sign",
        "generate-key-pair",
        "definitions",
        "serve",
        "new",
        "run-calls",
    ];
    for command in [None].into_iter().chain(commands.map(Some)) {
        let output = toolcage().args(command).arg("--help").output().unwrap();
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout).into_owned();
        flags.extend(long_flags(&help));
    }
    flags
}

/// The `--long-flags` of a text.
fn long_flags(text: &str) -> Vec<String> {
    text.match_indices("--")
        .filter(|(i, _)| *i == 0 || !text.as_bytes()[i - 1].is_ascii_alphanumeric())
        .map(|(i, _)| {
            let rest = &text[i + 2..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(rest.len());
            format!("--{}", &rest[..end])
        })
        .filter(|f| f.len() > 3 && !f.ends_with('-'))
        .collect()
}

/// The arguments a client snippet starts toolcage with.
fn toolcage_args(value: &serde_json::Value, found: &mut Vec<Vec<String>>) {
    match value {
        serde_json::Value::Object(map) => {
            let command = map.get("command").and_then(|c| c.as_str());
            if command.is_some_and(|c| c.ends_with("toolcage")) {
                let args = map.get("args").and_then(|a| a.as_array()).expect("args");
                found.push(
                    args.iter()
                        .map(|a| a.as_str().unwrap().to_string())
                        .collect(),
                );
            }
            map.values().for_each(|v| toolcage_args(v, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| toolcage_args(v, found)),
        _ => {}
    }
}

#[test]
fn every_client_snippet_parses_and_starts_toolcage_with_flags_that_exist() {
    let flags = flags();
    let mut checked = 0;
    for (page, text) in pages()
        .into_iter()
        .filter(|(p, _)| p.starts_with("clients/"))
    {
        for block in blocks(&text) {
            let value: serde_json::Value = match block.info.as_str() {
                "json" | "jsonc" => serde_json::from_str(&block.text)
                    .unwrap_or_else(|e| panic!("docs/src/{page}: not JSON: {e}\n{}", block.text)),
                "toml" => {
                    let table: toml::Table = toml::from_str(&block.text).unwrap_or_else(|e| {
                        panic!("docs/src/{page}: not TOML: {e}\n{}", block.text)
                    });
                    serde_json::to_value(table).unwrap()
                }
                "python" => {
                    check_python(&page, &block.text);
                    checked += 1;
                    continue;
                }
                _ => {
                    for flag in long_flags(&block.text) {
                        let words = words(&block.text);
                        if words.iter().any(|w| w == "toolcage") && !is_other_tools_flag(&flag) {
                            assert!(
                                flags.contains(&flag),
                                "docs/src/{page}: {flag} is no toolcage flag"
                            );
                        }
                    }
                    continue;
                }
            };
            let mut found = Vec::new();
            toolcage_args(&value, &mut found);
            let url = block.text.contains("http://127.0.0.1:8080/mcp");
            assert!(
                !found.is_empty() || url,
                "docs/src/{page}: neither a toolcage command nor its URL in\n{}",
                block.text
            );
            for args in found {
                assert!(
                    args.contains(&"serve".to_string()),
                    "docs/src/{page}: {args:?}"
                );
                for flag in args.iter().filter(|a| a.starts_with("--")) {
                    assert!(
                        flags.contains(flag),
                        "docs/src/{page}: {flag} is no toolcage flag"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} client snippets");
}

/// Flags of the clients' own commands in the same lines (`claude mcp add
/// --transport`, `code --add-mcp`, `npx ... --config`).
fn is_other_tools_flag(flag: &str) -> bool {
    [
        "--transport",
        "--scope",
        "--header",
        "--add-mcp",
        "--server",
        "--cli",
        "--method",
        "--env",
        "--tool-name",
        "--tool-arg",
    ]
    .contains(&flag)
}

/// A Python snippet is Python, and starts toolcage.
fn check_python(page: &str, code: &str) {
    let output = std::process::Command::new("python3")
        .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(code.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        output.status.success(),
        "docs/src/{page}: not Python: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        code.contains("\"toolcage\"") && (code.contains("\"serve\"") || code.contains("/mcp\"")),
        "docs/src/{page}: toolcage is neither started nor reached in\n{code}"
    );
}

/// The id mdBook gives a heading.
fn heading_id(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a page: its headings' ids.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for line in prose(page).lines() {
        if let Some(heading) = line.strip_prefix('#') {
            let text = heading.trim_start_matches('#').trim();
            let text: String = text.chars().filter(|c| *c != '`').collect();
            let id = heading_id(&text);
            let mut unique = id.clone();
            let mut n = 1;
            while !ids.insert(unique.clone()) {
                unique = format!("{id}-{n}");
                n += 1;
            }
        }
    }
    ids
}

/// The relative link targets of a page's prose.
fn links(page: &str) -> Vec<String> {
    let text = prose(page);
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            rest.find(')').map(|end| rest[..end].to_string())
        })
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// Checks a link from `from` (a path under the root) to `target`.
fn check_link(from: &Path, target: &str, pages: &BTreeMap<PathBuf, String>) -> Result<(), String> {
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = if file.is_empty() {
        from.to_path_buf()
    } else {
        normalize(&from.parent().unwrap().join(file))
    };
    if !root().join(&path).exists() {
        return Err(format!("{}: {target}: no such file", from.display()));
    }
    if anchor.is_empty() {
        return Ok(());
    }
    match pages.get(&path) {
        Some(text) if anchors(text).contains(anchor) => Ok(()),
        Some(_) => Err(format!("{}: {target}: no such heading", from.display())),
        None => Err(format!(
            "{}: {target}: an anchor into a file that is no page",
            from.display()
        )),
    }
}

/// `a/b/../c` → `a/c`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut all: BTreeMap<PathBuf, String> = pages()
        .into_iter()
        .map(|(p, t)| (Path::new("docs/src").join(p), t))
        .collect();
    all.insert(
        "README.md".into(),
        std::fs::read_to_string(root().join("README.md")).unwrap(),
    );
    let mut broken = Vec::new();
    for (from, text) in &all {
        for target in links(text) {
            if let Err(e) = check_link(from, &target, &all) {
                broken.push(e);
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // Every page is in the book's table of contents.
    let summary = &all[Path::new("docs/src/SUMMARY.md")];
    for page in all.keys().filter(|p| p.starts_with("docs/src")) {
        let name = page
            .strip_prefix("docs/src")
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name == "SUMMARY.md" || summary.contains(&format!("]({name})")),
            "{name} is not in SUMMARY.md"
        );
    }
}

#[test]
fn each_help_names_pages_that_exist() {
    let args = std::fs::read_to_string(root().join("host/src/bin/toolcage/args.rs")).unwrap();
    let all: BTreeMap<PathBuf, String> = pages()
        .into_iter()
        .map(|(p, t)| (Path::new("docs/src").join(p), t))
        .collect();
    let mut named = 0;
    for call in args.split("book!(").skip(1) {
        let call = &call[..call.find(')').unwrap()];
        for page in call.split(',').map(|p| p.trim().trim_matches('"')) {
            let from = Path::new("docs/src/SUMMARY.md");
            check_link(from, page, &all).unwrap();
            named += 1;
        }
    }
    assert!(named >= 13, "{named}");
    let help = toolcage().args(["call", "--help"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("The book: docs/src/reference/cli.md#call")
    );
}

#[test]
fn the_book_documents_every_flag_of_every_help() {
    let page = &pages()["reference/cli.md"];
    let documented: BTreeSet<String> = long_flags(page).into_iter().collect();
    let missing: Vec<_> = flags()
        .into_iter()
        .filter(|f| !documented.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "flags reference/cli.md lacks: {missing:?}"
    );
    let unknown: Vec<_> = documented.difference(&flags()).cloned().collect();
    assert!(
        unknown.is_empty(),
        "reference/cli.md names flags no --help has: {unknown:?}"
    );
}

/// A client's own CLI (from `target/client-clis`), run offline in `project`
/// with its own `home`, finding `toolcage` on its `PATH`.
fn client(program: &str, project: &Path, home: &Path) -> std::process::Command {
    let bin = toolcage_tests::client_clis();
    let path = std::env::join_paths(
        [
            bin.clone(),
            toolcage_tests::toolcage_bin().parent().unwrap().into(),
        ]
        .into_iter()
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    // The user's compile cache: a cold one could outlast the clients'
    // 30 s connection timeout on a busy machine.
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap();
    let mut command = std::process::Command::new(bin.join(program));
    command
        .current_dir(project)
        .env("HOME", home)
        .env("PATH", path)
        .env("XDG_CACHE_HOME", cache)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env_remove("RUST_LOG");
    command
}

fn succeed(command: &mut std::process::Command) -> String {
    let output = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?}:\n{text}");
    text
}

/// The page's line that starts with `start`, split as the shell would, with
/// `$PWD` expanded to `project`.
fn page_command(page: &str, start: &str, project: &Path) -> Vec<String> {
    let line = page
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no `{start}` line"));
    let line = line.trim_end_matches('\\').trim_end();
    words(line)
        .into_iter()
        .map(|w| w.replace("$PWD", &project.to_string_lossy()))
        .collect()
}

/// Claude Code's own `claude` (from npm) writes the `.mcp.json` the book
/// shows from the book's command, and connects to toolcage through it, on
/// stdio and over HTTP with a token; the MCP Inspector's CLI lists and calls
/// the tools through the book's `mcpServers` snippet and command. Offline:
/// only `npm install` reaches a registry, once.
#[test]
fn the_clients_own_clis_take_the_books_configurations() {
    let dir = tempfile::tempdir().unwrap();
    let (home, project) = (dir.path().join("home"), dir.path().join("project"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let shown_path = |text: &str| text.replace(&*project.to_string_lossy(), "/home/me/project");
    // Warm the compile cache the clients' toolcage will use.
    assert!(
        client("claude", &project, &home)
            .arg("--version")
            .status()
            .unwrap()
            .success()
    );
    toolcage().arg("list").output().unwrap();

    let pages = pages();
    let page = &pages["clients/claude-code.md"];
    let add = page_command(
        page,
        "claude mcp add --scope project toolcage -- ",
        &project,
    );
    succeed(client("claude", &project, &home).args(&add[1..]));
    let written = std::fs::read_to_string(project.join(".mcp.json")).unwrap();
    let written: serde_json::Value = serde_json::from_str(&shown_path(&written)).unwrap();
    let shown = blocks(page).into_iter().find(|b| b.info == "json").unwrap();
    let shown: serde_json::Value = serde_json::from_str(&shown.text).unwrap();
    assert_eq!(written, shown, "clients/claude-code.md's .mcp.json");

    // The same server in the local scope (a project's servers wait for the
    // user's approval), and over HTTP with a token, connect.
    let mut local = add.clone();
    local[3..6].clone_from_slice(&["--scope".into(), "local".into(), "toolcage-stdio".into()]);
    succeed(client("claude", &project, &home).args(&local[1..]));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "0123456789abcdef0123456789abcdef";
    std::fs::write(dir.path().join("token"), token).unwrap();
    let mut server = toolcage()
        .args([
            "serve",
            "--http",
            &format!("127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(dir.path().join("token"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = page_command(
        page,
        "claude mcp add --transport http --scope project toolcage ",
        &project,
    );
    let mut http: Vec<String> = http
        .into_iter()
        .map(|w| {
            w.replace("8080", &port.to_string())
                .replace("${TOOLCAGE_TOKEN}", token)
        })
        .collect();
    http[6..8].clone_from_slice(&["local".into(), "toolcage-http".into()]);
    let next = page
        .lines()
        .skip_while(|l| !l.starts_with("claude mcp add --transport http"))
        .nth(1)
        .unwrap();
    http.extend(
        words(next)
            .into_iter()
            .map(|w| w.replace("${TOOLCAGE_TOKEN}", token)),
    );
    succeed(client("claude", &project, &home).args(&http[1..]));
    let list = succeed(client("claude", &project, &home).args(["mcp", "list"]));
    server.kill().unwrap();
    server.wait().unwrap();
    for name in ["toolcage-stdio", "toolcage-http"] {
        let line = list
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or("");
        assert!(
            line.contains("Connected") && !line.contains("Failed"),
            "{name}:\n{list}"
        );
    }

    // The Inspector's CLI, through the page's mcpServers snippet.
    let page = &pages["clients/inspector.md"];
    let snippet = blocks(page).into_iter().find(|b| b.info == "json").unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(
        &config,
        snippet
            .text
            .replace("/home/me/project", &project.to_string_lossy()),
    )
    .unwrap();
    let listed = succeed(
        client("mcp-inspector", &project, &home)
            .args(["--cli", "--config"])
            .arg(&config)
            .args(["--server", "toolcage", "--method", "tools/list"]),
    );
    assert!(listed.contains("\"read_file\""), "{listed}");
    let call = page_command(
        page,
        "npx @modelcontextprotocol/inspector --cli toolcage serve --method tools/call",
        &project,
    );
    let called = succeed(client("mcp-inspector", &project, &home).args(&call[2..]));
    assert!(called.contains("\"text\": \"1024\""), "{called}");
}
