//! The bundled file tools against planted names and oversized arguments
//! (issue 40, items 12 to 15), through the host: the tools neither hide nor
//! forge files, and every failure is one the model can correct from.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use toolcage::{CallResult, ErrorKind, Limits, Mount, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

/// A read-write directory mounted at /m, and the fs tools over it.
struct Mounted {
    dir: TempDir,
    registry: Registry,
}

impl Mounted {
    async fn new(limits: Limits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let builder = builder()
            .limits(limits)
            .mount(Mount::read_write(dir.path(), "/m"));
        let registry = registry(builder, &[guests::TOOLCAGE_FS]).await;
        Mounted { dir, registry }
    }

    /// Writes `content` to the file named by the raw bytes `name`.
    fn plant(&self, name: &[u8], content: &str) {
        std::fs::write(self.dir.path().join(OsStr::from_bytes(name)), content).unwrap();
    }

    async fn ok(&self, tool: &str, args: Value) -> CallResult {
        let result = self.registry.call(tool, args.clone()).await;
        assert!(
            !result.is_error,
            "{tool} {args}: {:?}: {}",
            result.error_kind, result.output
        );
        result
    }

    async fn fails(&self, tool: &str, args: Value, kind: ErrorKind) -> CallResult {
        let result = self.registry.call(tool, args).await;
        assert_eq!(result.error_kind, Some(kind), "{tool}: {}", result.output);
        result
    }
}

/// The note a walk adds for one name the sandbox cannot pass to the tools.
const ONE_BAD_NAME: &str = "[1 entry not shown: its name is not valid UTF-8, which the sandbox \
                            cannot pass to the tools. The other entries are all listed.]\n";

/// A directory holding a name that is not UTF-8 among ordinary files.
async fn with_a_bad_name() -> Mounted {
    let mounted = Mounted::new(quick_limits()).await;
    for name in ["a.txt", "m.txt", "z.txt"] {
        mounted.plant(name.as_bytes(), "needle\n");
    }
    mounted.plant(b"bad\xff.txt", "needle\n");
    mounted
}

#[tokio::test]
async fn list_dir_lists_the_siblings_of_a_name_that_is_not_utf8() {
    let mounted = with_a_bad_name().await;
    let result = mounted.ok("list_dir", json!({ "path": "/m" })).await;
    assert_eq!(
        result.output,
        format!("file 7 a.txt\nfile 7 m.txt\nfile 7 z.txt\n{ONE_BAD_NAME}")
    );
    let entries = &result.details.unwrap()["entries"];
    assert_eq!(entries.as_array().unwrap().len(), 3, "{entries}");
}

#[tokio::test]
async fn glob_finds_the_siblings_of_a_name_that_is_not_utf8() {
    let mounted = with_a_bad_name().await;
    let result = mounted.ok("glob", json!({ "pattern": "/m/*.txt" })).await;
    assert_eq!(
        result.output,
        format!("/m/a.txt\n/m/m.txt\n/m/z.txt\n{ONE_BAD_NAME}")
    );
}

#[tokio::test]
async fn grep_searches_the_siblings_of_a_name_that_is_not_utf8() {
    let mounted = with_a_bad_name().await;
    let result = mounted
        .ok("grep", json!({ "pattern": "needle", "path": "/m" }))
        .await;
    assert_eq!(
        result.output,
        format!("/m/a.txt:1:needle\n/m/m.txt:1:needle\n/m/z.txt:1:needle\n{ONE_BAD_NAME}")
    );
    assert_eq!(result.details.unwrap()["files_searched"], 3);
}

/// A directory holding names that would forge lines or drive a terminal.
async fn with_hostile_names() -> Mounted {
    let mounted = Mounted::new(quick_limits()).await;
    mounted.plant(b"a.txt", "needle\n");
    mounted.plant(b"x\nforged.txt:1:needle", "needle\n");
    mounted.plant(b"\x1b]0;owned\x07.txt", "needle \x1b[2J\n");
    mounted
}

/// Asserts that `output` holds no control character but newlines, and
/// exactly `lines` lines.
fn assert_clean(output: &str, lines: usize) {
    assert!(
        !output.chars().any(|c| c.is_control() && c != '\n'),
        "{output:?}"
    );
    assert_eq!(output.lines().count(), lines, "{output}");
}

#[tokio::test]
async fn list_dir_escapes_hostile_names_one_entry_per_line() {
    let mounted = with_hostile_names().await;
    let result = mounted.ok("list_dir", json!({ "path": "/m" })).await;
    assert_eq!(
        result.output,
        "file 12 \\x1B]0;owned\\x07.txt\nfile 7 a.txt\nfile 7 x\\x0Aforged.txt:1:needle\n"
    );
    assert_clean(&result.output, 3);
    let details = result.details.unwrap();
    assert_eq!(details["entries"][0]["path"], "\\x1B]0;owned\\x07.txt");
    assert_eq!(details["entries"][2]["path"], "x\\x0Aforged.txt:1:needle");
}

#[tokio::test]
async fn glob_escapes_hostile_names_one_entry_per_line() {
    let mounted = with_hostile_names().await;
    let result = mounted.ok("glob", json!({ "pattern": "/m/*" })).await;
    assert_eq!(
        result.output,
        "/m/\\x1B]0;owned\\x07.txt\n/m/a.txt\n/m/x\\x0Aforged.txt:1:needle\n"
    );
    assert_clean(&result.output, 3);
}

#[tokio::test]
async fn grep_escapes_hostile_names_and_lines() {
    let mounted = with_hostile_names().await;
    let result = mounted
        .ok("grep", json!({ "pattern": "needle", "path": "/m" }))
        .await;
    assert_eq!(
        result.output,
        "/m/\\x1B]0;owned\\x07.txt:1:needle \\x1B[2J\n/m/a.txt:1:needle\n\
         /m/x\\x0Aforged.txt:1:needle:1:needle\n"
    );
    assert_clean(&result.output, 3);
    let details = result.details.unwrap();
    assert_eq!(details["match_count"], 3);
    assert_eq!(details["matches"][0]["text"], "needle \\x1B[2J");
}

#[tokio::test]
async fn file_messages_escape_hostile_paths() {
    let mounted = with_hostile_names().await;
    let result = mounted
        .ok(
            "edit_file",
            json!({ "path": "/m/\x1b]0;owned\x07.txt", "old_text": "needle", "new_text": "pin" }),
        )
        .await;
    assert!(
        result
            .output
            .starts_with("Replaced 1 occurrence in `/m/\\x1B]0;owned\\x07.txt`.\n"),
        "{}",
        result.output
    );
    // The diff shows the file's text as it is (as read_file does); its
    // header shows the path escaped.
    assert!(
        result
            .output
            .contains("\n--- /m/\\x1B]0;owned\\x07.txt\n+++ /m/\\x1B]0;owned\\x07.txt\n"),
        "{}",
        result.output
    );
    let result = mounted
        .ok(
            "write_file",
            json!({ "path": "/m/new\nfile", "content": "x" }),
        )
        .await;
    assert_eq!(result.output, "Created `/m/new\\x0Afile` (1 byte).");
    let result = mounted
        .fails(
            "read_file",
            json!({ "path": "/m/gone\x1b[2J" }),
            ErrorKind::ToolError,
        )
        .await;
    assert!(
        result
            .output
            .starts_with("Could not read `/m/gone\\x1B[2J`"),
        "{}",
        result.output
    );
}

/// The bytes and the names in `dir`.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn an_edit_that_runs_out_of_fuel_leaves_the_file_as_it_was() {
    // Every line changes, so the diff is most of the work.
    let text: String = (0..100_000).map(|n| format!("line {n}\n")).collect();
    let edit = json!({
        "path": "/m/big.txt", "old_text": "line", "new_text": "LINE", "replace_all": true
    });
    let generous = Limits {
        fuel: Some(50_000_000_000),
        timeout: Duration::from_secs(120),
        memory_bytes: 256 << 20,
        ..quick_limits()
    };

    // Measure what the whole edit takes, on a copy.
    let measure = Mounted::new(generous).await;
    std::fs::write(measure.dir.path().join("big.txt"), &text).unwrap();
    let done = measure.ok("edit_file", edit.clone()).await;
    assert_eq!(done.details.unwrap()["replacements"], 100_000);
    let needed = done.fuel_used;

    // Half of it stops the call inside the diff, before anything is written.
    let mounted = Mounted::new(Limits {
        fuel: Some(needed / 2),
        ..generous
    })
    .await;
    std::fs::write(mounted.dir.path().join("big.txt"), &text).unwrap();
    let before = contents(mounted.dir.path());
    mounted.fails("edit_file", edit, ErrorKind::OutOfFuel).await;
    assert!(
        contents(mounted.dir.path()) == before,
        "the file (or the directory) changed although the edit failed"
    );
}

#[tokio::test]
async fn oversized_glob_patterns_are_refused_with_an_error() {
    let mounted = Mounted::new(quick_limits()).await;
    mounted.plant(b"a.txt", "needle\n");
    // Over the schema's maxLength: the host refuses them before the guest
    // runs. They used to overflow the guest's stack or hit `unreachable`.
    let braces = format!("{}a{}", "{".repeat(5000), "}".repeat(5000));
    let huge = "*".repeat(1 << 20);
    for pattern in [&braces, &huge] {
        let result = mounted
            .fails(
                "glob",
                json!({ "pattern": pattern }),
                ErrorKind::InvalidArguments,
            )
            .await;
        assert!(result.output.contains("/pattern"), "{}", result.output);
        let result = mounted
            .fails(
                "grep",
                json!({ "pattern": "x", "glob": pattern }),
                ErrorKind::InvalidArguments,
            )
            .await;
        assert!(result.output.contains("/glob"), "{}", result.output);
    }
    // Short enough for the schema, too deep for the guest's ceiling.
    let deep = format!("{}a{}", "{x,".repeat(200), "}".repeat(200));
    let result = mounted
        .fails("glob", json!({ "pattern": deep }), ErrorKind::ToolError)
        .await;
    assert!(
        result.output.starts_with(
            "The glob pattern nests {…} alternatives 200 levels deep, over the limit of 10."
        ),
        "{}",
        result.output
    );
    let result = mounted
        .fails(
            "grep",
            json!({ "pattern": "x", "glob": deep }),
            ErrorKind::ToolError,
        )
        .await;
    assert!(result.output.contains("limit of 10"), "{}", result.output);
    // The tools still answer.
    mounted.ok("glob", json!({ "pattern": "/m/*.txt" })).await;
}

#[tokio::test]
async fn oversized_regular_expressions_are_refused_with_an_error() {
    let mounted = Mounted::new(quick_limits()).await;
    mounted.plant(b"a.txt", "needle\n");
    let huge = "a".repeat(1 << 20);
    let result = mounted
        .fails(
            "grep",
            json!({ "pattern": huge }),
            ErrorKind::InvalidArguments,
        )
        .await;
    assert!(result.output.contains("/pattern"), "{}", result.output);
    let deep = format!("{}a{}", "(".repeat(1000), ")".repeat(1000));
    let result = mounted
        .fails("grep", json!({ "pattern": deep }), ErrorKind::ToolError)
        .await;
    assert!(
        result.output.contains("Groups may nest up to 100 levels"),
        "{}",
        result.output
    );
    let result = mounted
        .fails(
            "grep",
            json!({ "pattern": r"\w{100}{100}" }),
            ErrorKind::ToolError,
        )
        .await;
    assert!(
        result
            .output
            .starts_with("The regular expression is too large once compiled"),
        "{}",
        result.output
    );
}

/// write_file and edit_file write only regular files (issue 52, item 9): a
/// FIFO and a Unix socket in a read-write mount are refused, saying what
/// they are, and stay what they were; a regular file beside them is still
/// written and edited.
#[tokio::test]
async fn writes_refuse_special_files_and_leave_them_untouched() {
    use std::os::unix::fs::FileTypeExt;
    let mounted = Mounted::new(quick_limits()).await;
    let fifo = mounted.dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let socket = mounted.dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    for name in ["fifo", "sock"] {
        let path = format!("/m/{name}");
        let write = json!({ "path": path, "content": "x" });
        let result = mounted
            .fails("write_file", write, ErrorKind::ToolError)
            .await;
        assert!(
            result.output.contains("not a regular file"),
            "{}",
            result.output
        );
        assert!(
            result.output.contains("a special file"),
            "{}",
            result.output
        );
        let edit = json!({ "path": path, "old_text": "a", "new_text": "b" });
        let result = mounted.fails("edit_file", edit, ErrorKind::ToolError).await;
        assert!(
            result.output.contains("not a regular file"),
            "{}",
            result.output
        );
    }
    let kinds = |path: &Path| std::fs::symlink_metadata(path).unwrap().file_type();
    assert!(kinds(&fifo).is_fifo(), "the FIFO is still a FIFO");
    assert!(kinds(&socket).is_socket(), "the socket is still a socket");
    mounted.plant(b"plain.txt", "a");
    let write = json!({ "path": "/m/plain.txt", "content": "a b" });
    mounted.ok("write_file", write).await;
    let edit = json!({ "path": "/m/plain.txt", "old_text": "b", "new_text": "c" });
    mounted.ok("edit_file", edit).await;
    let written = std::fs::read_to_string(mounted.dir.path().join("plain.txt")).unwrap();
    assert_eq!(written, "a c");
}
