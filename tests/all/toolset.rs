//! The bundled standard toolset, through the host: each tool's happy path and
//! documented errors, the sandbox boundaries as the file tools meet them, and
//! the bundled names' protection against a dropped impostor.

use serde_json::{Value, json};
use tempfile::TempDir;
use toolcage::{CallResult, ErrorKind, Mount, Registry};
use toolcage_tests::{assert_loaded, builder, guests, registry};

/// `ws/` read-only at /workspace, `scratch/` read-write at /scratch, and
/// `secret.txt` outside both.
struct Sandbox {
    dir: TempDir,
    registry: Registry,
}

impl Sandbox {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (path, text) in [
            (
                "ws/src/main.rs",
                "fn main() {\n    println!(\"hello\");\n}\n",
            ),
            (
                "ws/src/lib.rs",
                "pub fn add(a: i32, b: i32) -> i32 {\n    a + b // TODO: overflow\n}\n",
            ),
            ("ws/README.md", "# demo\nTODO: write docs\n"),
            ("scratch/notes.txt", "alpha\nbeta\nalpha\n"),
            ("secret.txt", "top secret\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        std::fs::write(root.join("ws/blob.bin"), b"\x7fELF\0\0\x01binary TODO").unwrap();
        std::os::unix::fs::symlink(root.join("secret.txt"), root.join("ws/escape")).unwrap();
        let builder = builder()
            .mount(Mount::read_only(root.join("ws"), "/workspace"))
            .mount(Mount::read_write(root.join("scratch"), "/scratch"));
        let registry = registry(builder, &[guests::TOOLCAGE_FS, guests::TOOLCAGE_CALC]).await;
        Sandbox { dir, registry }
    }

    async fn call(&self, tool: &str, args: Value) -> CallResult {
        self.registry.call(tool, args).await
    }

    async fn ok(&self, tool: &str, args: Value) -> CallResult {
        let result = self.call(tool, args.clone()).await;
        assert!(
            !result.is_error,
            "{tool} {args}: {:?}: {}",
            result.error_kind, result.output
        );
        result
    }

    async fn fails(&self, tool: &str, args: Value, needle: &str) -> CallResult {
        let result = self.call(tool, args.clone()).await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::ToolError),
            "{tool} {args}: {}",
            result.output
        );
        assert!(
            result.output.contains(needle),
            "{tool} {args}: expected {needle:?} in {}",
            result.output
        );
        result
    }

    fn host(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

#[tokio::test]
async fn read_file_reads_text_with_details() {
    let sandbox = Sandbox::new().await;
    let result = sandbox
        .ok("read_file", json!({ "path": "/workspace/src/main.rs" }))
        .await;
    assert_eq!(result.output, "fn main() {\n    println!(\"hello\");\n}\n");
    assert_eq!(
        result.details,
        Some(
            json!({ "path": "/workspace/src/main.rs", "size": 37, "total_lines": 3, "first_line": 1, "last_line": 3, "truncated": false })
        )
    );
    let result = sandbox
        .ok(
            "read_file",
            json!({ "path": "/workspace/src/main.rs", "offset": 2, "limit": 1 }),
        )
        .await;
    assert!(
        result.output.starts_with("    println!(\"hello\");\n"),
        "{}",
        result.output
    );
    assert!(result.output.contains("offset=3"), "{}", result.output);
}

#[tokio::test]
async fn read_file_pages_through_a_file_past_the_cap() {
    let sandbox = Sandbox::new().await;
    let text: String = (1..=4500).map(|n| format!("line {n}\n")).collect();
    std::fs::write(sandbox.host("ws/long.txt"), text).unwrap();
    let mut offset = 1;
    let mut seen = Vec::new();
    loop {
        let result = sandbox
            .ok(
                "read_file",
                json!({ "path": "/workspace/long.txt", "offset": offset }),
            )
            .await;
        let details = result.details.clone().unwrap();
        assert_eq!(details["total_lines"], 4500);
        let last = details["last_line"].as_u64().unwrap();
        seen.extend(
            result
                .output
                .lines()
                .filter(|l| l.starts_with("line "))
                .map(String::from),
        );
        if details["truncated"] == false {
            assert_eq!(last, 4500);
            break;
        }
        assert_eq!(last - offset + 1, 2000, "a page is capped at 2000 lines");
        assert!(
            result.output.contains(&format!("offset={}", last + 1)),
            "says how to read on: {}",
            result.output
        );
        offset = last + 1;
    }
    assert_eq!(seen.len(), 4500);
    assert_eq!(seen[4499], "line 4500");
    sandbox
        .fails(
            "read_file",
            json!({ "path": "/workspace/long.txt", "offset": 9000 }),
            "4500",
        )
        .await;
}

#[tokio::test]
async fn read_file_errors() {
    let sandbox = Sandbox::new().await;
    sandbox
        .fails(
            "read_file",
            json!({ "path": "/workspace/blob.bin" }),
            "binary",
        )
        .await;
    sandbox
        .fails(
            "read_file",
            json!({ "path": "/workspace/missing.rs" }),
            "does not exist",
        )
        .await;
    sandbox
        .fails("read_file", json!({ "path": "src/main.rs" }), "absolute")
        .await;
    sandbox
        .fails(
            "read_file",
            json!({ "path": "/workspace/src" }),
            "directory",
        )
        .await;
    let result = sandbox
        .call(
            "read_file",
            json!({ "path": "/workspace/src/main.rs", "limit": 0 }),
        )
        .await;
    assert_eq!(result.error_kind, Some(ErrorKind::InvalidArguments));
}

#[tokio::test]
async fn reads_outside_the_mounts_are_denied() {
    let sandbox = Sandbox::new().await;
    let secret = sandbox.host("secret.txt").display().to_string();
    for path in [
        secret.as_str(),
        "/workspace/../secret.txt",
        "/workspace/escape",
        "/etc/passwd",
    ] {
        let result = sandbox.call("read_file", json!({ "path": path })).await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::ToolError),
            "{path}: {}",
            result.output
        );
        assert!(
            !result.output.contains("top secret"),
            "{path}: {}",
            result.output
        );
    }
    let result = sandbox.ok("grep", json!({ "pattern": "secret" })).await;
    assert!(
        !result.output.contains("top secret"),
        "grep over every mount: {}",
        result.output
    );
}

#[tokio::test]
async fn write_file_creates_and_overwrites_in_a_read_write_mount() {
    let sandbox = Sandbox::new().await;
    let result = sandbox
        .ok(
            "write_file",
            json!({ "path": "/scratch/new.txt", "content": "hi\n" }),
        )
        .await;
    assert_eq!(
        result.details,
        Some(json!({ "path": "/scratch/new.txt", "bytes": 3, "created": true }))
    );
    let result = sandbox
        .ok(
            "write_file",
            json!({ "path": "/scratch/new.txt", "content": "bye" }),
        )
        .await;
    assert_eq!(result.details.unwrap()["created"], false);
    assert_eq!(
        std::fs::read_to_string(sandbox.host("scratch/new.txt")).unwrap(),
        "bye"
    );
    sandbox
        .fails(
            "write_file",
            json!({ "path": "/scratch/a/b.txt", "content": "x" }),
            "create_dirs",
        )
        .await;
    sandbox
        .ok(
            "write_file",
            json!({ "path": "/scratch/a/b.txt", "content": "x", "create_dirs": true }),
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(sandbox.host("scratch/a/b.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn writes_and_edits_in_a_read_only_mount_are_denied_and_change_nothing() {
    let sandbox = Sandbox::new().await;
    let before = std::fs::read_to_string(sandbox.host("ws/src/main.rs")).unwrap();
    sandbox
        .fails(
            "write_file",
            json!({ "path": "/workspace/src/main.rs", "content": "pwned" }),
            "read-only",
        )
        .await;
    sandbox
        .fails(
            "write_file",
            json!({ "path": "/workspace/new.rs", "content": "pwned" }),
            "read-only",
        )
        .await;
    let edit =
        json!({ "path": "/workspace/src/main.rs", "old_text": "hello", "new_text": "pwned" });
    sandbox.fails("edit_file", edit, "read-only").await;
    assert_eq!(
        std::fs::read_to_string(sandbox.host("ws/src/main.rs")).unwrap(),
        before
    );
    assert!(!sandbox.host("ws/new.rs").exists());
    let escape = json!({ "path": "/scratch/../secret.txt", "content": "pwned" });
    assert!(sandbox.call("write_file", escape).await.is_error);
    assert_eq!(
        std::fs::read_to_string(sandbox.host("secret.txt")).unwrap(),
        "top secret\n"
    );
}

#[tokio::test]
async fn edit_file_replaces_exact_text_and_returns_a_diff() {
    let sandbox = Sandbox::new().await;
    let result = sandbox
        .ok(
            "edit_file",
            json!({ "path": "/scratch/notes.txt", "old_text": "beta", "new_text": "gamma" }),
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(sandbox.host("scratch/notes.txt")).unwrap(),
        "alpha\ngamma\nalpha\n"
    );
    let details = result.details.unwrap();
    assert_eq!(details["replacements"], 1);
    let diff = details["diff"].as_str().unwrap();
    assert!(
        diff.contains("-beta\n") && diff.contains("+gamma\n") && diff.contains("@@"),
        "{diff}"
    );
}

#[tokio::test]
async fn edit_file_with_zero_or_two_matches_fails_and_says_how_many() {
    let sandbox = Sandbox::new().await;
    let path = "/scratch/notes.txt";
    sandbox
        .fails(
            "edit_file",
            json!({ "path": path, "old_text": "delta", "new_text": "x" }),
            "0 matches",
        )
        .await;
    sandbox
        .fails(
            "edit_file",
            json!({ "path": path, "old_text": "alpha", "new_text": "x" }),
            "found 2 times",
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(sandbox.host("scratch/notes.txt")).unwrap(),
        "alpha\nbeta\nalpha\n"
    );
    let all =
        json!({ "path": path, "old_text": "alpha", "new_text": "omega", "replace_all": true });
    let result = sandbox.ok("edit_file", all).await;
    assert_eq!(result.details.unwrap()["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(sandbox.host("scratch/notes.txt")).unwrap(),
        "omega\nbeta\nomega\n"
    );
}

#[tokio::test]
async fn list_dir_and_glob_are_sorted() {
    let sandbox = Sandbox::new().await;
    let result = sandbox
        .ok("list_dir", json!({ "path": "/workspace", "depth": 2 }))
        .await;
    let entries = result.details.unwrap()["entries"].clone();
    let paths: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "blob.bin",
            "escape",
            "src",
            "src/lib.rs",
            "src/main.rs"
        ]
    );
    assert_eq!(entries[3]["kind"], "dir");
    assert_eq!(entries[2]["kind"], "symlink");
    assert_eq!(entries[5]["size"], 37);

    let result = sandbox
        .ok(
            "glob",
            json!({ "pattern": "**/*.rs", "path": "/workspace" }),
        )
        .await;
    assert_eq!(
        result.details.unwrap()["matches"],
        json!(["/workspace/src/lib.rs", "/workspace/src/main.rs"])
    );
    let file = "/workspace/README.md";
    sandbox
        .fails("list_dir", json!({ "path": file }), "Use read_file")
        .await;
    sandbox
        .fails(
            "glob",
            json!({ "pattern": "*", "path": file }),
            "use read_file",
        )
        .await;
    let result = sandbox
        .ok(
            "glob",
            json!({ "pattern": "*.nothing", "path": "/workspace" }),
        )
        .await;
    assert!(
        result.output.contains("No paths match"),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn grep_finds_matches_and_skips_binaries() {
    let sandbox = Sandbox::new().await;
    let result = sandbox
        .ok("grep", json!({ "pattern": "TODO", "path": "/workspace" }))
        .await;
    assert_eq!(
        result
            .output
            .lines()
            .filter(|l| l.contains(":TODO") || l.contains("// TODO"))
            .count(),
        2,
        "{}",
        result.output
    );
    assert!(
        result
            .output
            .contains("/workspace/src/lib.rs:2:    a + b // TODO: overflow"),
        "{}",
        result.output
    );
    assert!(
        result
            .output
            .contains("/workspace/README.md:2:TODO: write docs"),
        "{}",
        result.output
    );
    assert!(
        !result.output.contains("blob.bin"),
        "binary files are skipped: {}",
        result.output
    );
    let details = result.details.unwrap();
    assert_eq!(details["match_count"], 2);
    assert_eq!(details["files_matched"], 2);
    assert_eq!(
        details["matches"][0],
        json!({ "path": "/workspace/README.md", "line": 2, "text": "TODO: write docs" })
    );

    let result = sandbox
        .ok("grep", json!({ "pattern": "todo", "path": "/workspace", "glob": "*.rs", "case_insensitive": true, "context": 1 }))
        .await;
    assert!(
        result.output.contains("/workspace/src/lib.rs-1-pub fn add"),
        "context line: {}",
        result.output
    );
    assert!(
        !result.output.contains("README"),
        "the glob filter: {}",
        result.output
    );

    sandbox
        .fails(
            "grep",
            json!({ "pattern": "(unclosed", "path": "/workspace" }),
            "regex",
        )
        .await;
}

#[tokio::test]
async fn calc_evaluates_safely() {
    let sandbox = Sandbox::new().await;
    for (expression, expected) in [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ^ 3 ^ 2", "512"),
        ("-2 ^ 2", "-4"),
        ("10 % 4 - 7 / 2", "-1.5"),
        ("sqrt(16) + abs(-3) + max(1, 5, 3) + min(2, 4)", "14"),
        ("round(2.5) + floor(2.7) + ceil(2.1)", "8"),
        ("ln(e) + log10(1000) + exp(0)", "5"),
        ("sin(0) + cos(0) + tan(0)", "1"),
        ("2 * pi", "6.28318530717959"),
    ] {
        let result = sandbox
            .ok("calc", json!({ "expression": expression }))
            .await;
        assert_eq!(result.output, expected, "{expression}");
    }
    let result = sandbox.ok("calc", json!({ "expression": "1 / 4" })).await;
    assert_eq!(
        result.details,
        Some(json!({ "expression": "1 / 4", "result": 0.25 }))
    );
}

#[tokio::test]
async fn calc_errors_name_the_problem() {
    let sandbox = Sandbox::new().await;
    sandbox
        .fails(
            "calc",
            json!({ "expression": "1 + * 2" }),
            "Syntax error at position 5",
        )
        .await;
    sandbox
        .fails("calc", json!({ "expression": "(1 + 2" }), "Syntax error")
        .await;
    sandbox
        .fails("calc", json!({ "expression": "1 / 0" }), "Division by zero")
        .await;
    sandbox
        .fails("calc", json!({ "expression": "5 % 0" }), "Division by zero")
        .await;
    sandbox
        .fails("calc", json!({ "expression": "10 ^ 400" }), "too large")
        .await;
    sandbox
        .fails("calc", json!({ "expression": "sqrt(-1)" }), "sqrt")
        .await;
    sandbox
        .fails("calc", json!({ "expression": "import os" }), "import")
        .await;
}

#[tokio::test]
async fn a_dropped_read_file_is_shadowed_by_the_bundled_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_HIJACK, dir.path().join("hijack.wasm")).unwrap();
    std::fs::write(dir.path().join("note.txt"), "real").unwrap();
    let mut registry = builder()
        .mount(Mount::read_only(dir.path(), "/d"))
        .build()
        .unwrap();
    for report in registry.load_bundled().await {
        assert_loaded(&report);
        assert_eq!(report.source, toolcage::Source::Bundled);
    }
    let reports = registry.load_dir(dir.path()).await.unwrap();
    assert_eq!(reports[0].registered, Vec::<String>::new());
    assert_eq!(
        reports[0].shadowed,
        [toolcage::Shadowed {
            tool: "read_file".into(),
            owner: "fs".into()
        }]
    );
    let result = registry
        .call("read_file", json!({ "path": "/d/note.txt" }))
        .await;
    assert_eq!(result.output.trim_end(), "real");
    assert_eq!(registry.tool("read_file").unwrap().component, "fs");
    let names: Vec<&str> = registry
        .tools()
        .map(|t| t.descriptor.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "glob",
            "grep",
            "calc",
            "fetch",
            "run_code",
            "search_tools",
            "describe_tool"
        ]
    );
}
