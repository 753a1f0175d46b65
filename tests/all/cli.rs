//! The `toolcage` command: its flags, output formats and exit statuses.
//!
//! The shape of its outputs, for people and with `--json`, is pinned by
//! golden files in `tests/golden/cli/`, one per command line: its exit
//! status, stdout and stderr, with the temporary and build directories
//! and the figures that vary from run to run (durations, fuel, memory)
//! masked. Run with `BLESS=1` to rewrite them after an intended change,
//! and review the diff.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};
use tempfile::TempDir;
use toolcage_tests::{guests, toolcage};

/// A tools directory holding the echo and twin fixtures.
fn tools_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    std::fs::copy(guests::FIXTURE_ECHO_TWIN, dir.path().join("twin.wasm")).unwrap();
    std::fs::copy(guests::FIXTURE_MISBEHAVE, dir.path().join("misbehave.wasm")).unwrap();
    dir
}

fn run(dir: &Path, args: &[&str]) -> Output {
    toolcage()
        .arg("--no-bundled")
        .arg("--tools")
        .arg(dir)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Like [`run`], with `input` on stdin.
fn run_with_stdin(dir: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = toolcage()
        .arg("--no-bundled")
        .arg("--tools")
        .arg(dir)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn list_prints_a_table_and_json() {
    let dir = tools_dir();
    let output = run(dir.path(), &["list"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("echo")
            && l.contains("read_only,idempotent")
            && l.contains("Repeats")),
        "{text}"
    );
    assert!(
        stderr(&output).contains("tool `echo` is already provided by `echo`; ignored (first wins)"),
        "{}",
        stderr(&output)
    );

    let output = run(dir.path(), &["list", "--json"]);
    let tools: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    let keys: Vec<&str> = echo
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "title",
            "description",
            "input_schema",
            "output_schema",
            "hints",
            "component",
            "source"
        ]
    );
    assert_eq!(
        echo["hints"],
        json!({ "read_only": true, "idempotent": true, "destructive": false, "open_world": false })
    );
    assert_eq!(echo["component"], "echo");
}

#[test]
fn inspect_shows_the_whole_descriptor() {
    let dir = tools_dir();
    let output = run(dir.path(), &["inspect", "echo"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("title:       Echo") && text.contains("\"maxLength\": 100000"),
        "{text}"
    );
    let output = run(dir.path(), &["inspect", "echo", "--json"]);
    let tool: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(tool["input_schema"]["required"], json!(["text"]));
    let output = run(dir.path(), &["inspect", "nope"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no tool named `nope`; available: echo"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn call_prints_the_output_and_exits_by_outcome() {
    let dir = tools_dir();
    let output = run(
        dir.path(),
        &["call", "echo", r#"{"text": "hi", "repeat": 2}"#],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "hihi\n");

    let output = run(
        dir.path(),
        &["call", "echo", "--arg", "text=ho", "--arg", "repeat=2"],
    );
    assert_eq!(stdout(&output), "hoho\n", "{}", stderr(&output));
    // `7` parses as JSON, so it is a number, which `text` does not accept.
    let output = run(dir.path(), &["call", "echo", "--arg", "text=7"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains(r#"- /text: 7 is not of type "string""#),
        "{}",
        stdout(&output)
    );

    let output = run(dir.path(), &["call", "fail"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("`fail` failed: tool_error"),
        "{}",
        stderr(&output)
    );

    let output = run(dir.path(), &["call", "echo", "{not json"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).contains("not valid JSON"));

    let output = run(dir.path(), &["call", "nope"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("Available tools: echo, counter"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn call_reads_arguments_from_stdin() {
    let dir = tools_dir();
    let output = run_with_stdin(
        dir.path(),
        &["call", "echo", "-"],
        r#"{"text": "from stdin"}"#,
    );
    assert_eq!(stdout(&output), "from stdin\n", "{}", stderr(&output));
}

#[test]
fn call_json_has_every_field() {
    let dir = tools_dir();
    let output = run(dir.path(), &["--json", "call", "echo", r#"{"text": "x"}"#]);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    for key in [
        "tool",
        "is_error",
        "error_kind",
        "output",
        "details",
        "duration_ms",
        "fuel_used",
        "peak_memory_bytes",
        "slot_wait_ms",
        "net",
        "logs",
    ] {
        assert!(result.get(key).is_some(), "{key} missing: {result}");
    }
    assert_eq!(result["error_kind"], Value::Null);
    assert_eq!(result["details"], json!({ "length": 1 }));
    assert!(
        result["peak_memory_bytes"].as_u64().unwrap() > 0,
        "{result}"
    );

    let output = run(
        dir.path(),
        &[
            "--timeout-ms",
            "200",
            "call",
            "misbehave",
            r#"{"mode": "sleep"}"#,
            "--json",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["error_kind"], "timeout");
}

#[test]
fn limit_flags_apply() {
    let dir = tools_dir();
    for (flag, value, args, kind) in [
        ("--fuel", "1000000", r#"{"mode": "loop"}"#, "out_of_fuel"),
        ("--memory-mib", "32", r#"{"mode": "hog"}"#, "memory_limit"),
        (
            "--output-kib",
            "1",
            r#"{"mode": "huge_output", "amount": 2000}"#,
            "output_limit",
        ),
        ("--timeout-ms", "200", r#"{"mode": "sleep"}"#, "timeout"),
    ] {
        let output = run(
            dir.path(),
            &[flag, value, "--json", "call", "misbehave", args],
        );
        assert_eq!(output.status.code(), Some(1), "{flag}");
        let result: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(result["error_kind"], kind, "{flag}");
    }
    let output = run(dir.path(), &["--fuel", "lots", "list"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn mounts_from_flags() {
    let dir = tools_dir();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("note.txt"), "mounted").unwrap();
    let mount = format!("{}:/data", data.path().display());
    let args = [r#"{"mode": "read", "path": "/data/note.txt"}"#];
    let output = run(
        dir.path(),
        &["--mount", &mount, "call", "misbehave", args[0]],
    );
    assert_eq!(stdout(&output), "mounted\n", "{}", stderr(&output));
    let output = run(
        dir.path(),
        &[
            "--mount",
            &mount,
            "call",
            "misbehave",
            r#"{"mode": "write", "path": "/data/x", "content": "y"}"#,
        ],
    );
    assert_eq!(output.status.code(), Some(1), "read-only by default");
    let rw = format!("{mount}:rw");
    let output = run(
        dir.path(),
        &[
            "--mount",
            &rw,
            "call",
            "misbehave",
            r#"{"mode": "write", "path": "/data/x", "content": "y"}"#,
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert_eq!(std::fs::read_to_string(data.path().join("x")).unwrap(), "y");
    let output = run(dir.path(), &["--mount", "/no/such/dir:/data", "list"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("/no/such/dir"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_reports_each_file() {
    let output = toolcage()
        .args(["check", guests::FIXTURE_ECHO, guests::FIXTURE_BAD_SCHEMA])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.contains("ok    ") && text.contains("echo, counter, fail, bad_details"),
        "{text}"
    );
    assert!(
        text.contains("FAIL  ") && text.contains("bad_schema"),
        "{text}"
    );

    let output = toolcage()
        .args(["check", "--json", guests::FIXTURE_ECHO])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reports[0]["ok"], true);
    assert_eq!(reports[0]["tools"][0]["name"], "echo");
}

#[test]
fn the_config_file_sets_directories_limits_and_mounts() {
    let dir = tools_dir();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("note.txt"), "from config").unwrap();
    let config = format!(
        "tools = [\"{}\"]\nbundled = false\n[limits]\ntimeout_ms = 200\n[[mounts]]\nhost = \"{}\"\nguest = \"/data\"\n",
        dir.path().display(),
        data.path().display()
    );
    let config_path = data.path().join("toolcage.toml");
    std::fs::write(&config_path, config).unwrap();
    let call = |args: &str| {
        toolcage()
            .current_dir(data.path())
            .args(["--json", "call", "misbehave", args])
            .output()
            .unwrap()
    };
    // Found as ./toolcage.toml.
    let output = call(r#"{"mode": "read", "path": "/data/note.txt"}"#);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["output"], "from config", "{}", stderr(&output));
    let output = call(r#"{"mode": "sleep"}"#);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["error_kind"], "timeout");

    std::fs::write(&config_path, "[limits]\ntimeout = 5\n").unwrap();
    let output = toolcage()
        .arg("--config")
        .arg(&config_path)
        .arg("list")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("unknown field `timeout`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = toolcage().args(["call"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let output = toolcage()
        .args(["--mount", "nocolon", "list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let output = toolcage()
        .args(["call", "echo", "{}", "--arg", "a=b"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn definitions_in_every_format() {
    let dir = tools_dir();
    for (format, key) in [
        ("openai", "function"),
        ("openai-responses", "parameters"),
        ("anthropic", "input_schema"),
        ("mcp", "inputSchema"),
    ] {
        let output = run(dir.path(), &["definitions", "--format", format]);
        assert!(output.status.success(), "{format}: {}", stderr(&output));
        let definitions: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(definitions.len(), 6, "{format}");
        assert!(
            definitions[0].get(key).is_some(),
            "{format}: {}",
            definitions[0]
        );
    }
    // `strict` is explicit, and true only for the schema strict mode takes
    // as it is: twin_only's, which has no arguments.
    let output = run(dir.path(), &["definitions", "--format", "openai-responses"]);
    let definitions: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let strict: Vec<(&str, &Value)> = definitions
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), &d["strict"]))
        .collect();
    for (name, strict) in strict {
        assert_eq!(strict, &json!(name == "twin_only"), "{name}");
    }
    let output = run(dir.path(), &["definitions", "--format", "gemini"]);
    assert_eq!(output.status.code(), Some(2));
}

/// An Anthropic message asking for two calls.
fn anthropic_response() -> String {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude",
        "content": [
            { "type": "text", "text": "Let me check." },
            { "type": "tool_use", "id": "toolu_1", "name": "echo", "input": { "text": "one" } },
            { "type": "tool_use", "id": "toolu_2", "name": "fail", "input": {} }
        ],
        "stop_reason": "tool_use"
    })
    .to_string()
}

#[test]
fn run_calls_answers_in_the_same_format() {
    let dir = tools_dir();
    let response = dir.path().join("response.json");
    std::fs::write(&response, anthropic_response()).unwrap();
    let output = run(dir.path(), &["run-calls", response.to_str().unwrap()]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "one call fails: {}",
        stderr(&output)
    );
    let message: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(message["role"], "user");
    assert_eq!(
        message["content"][0],
        json!({ "type": "tool_result", "tool_use_id": "toolu_1", "content": "one", "is_error": false })
    );
    assert_eq!(message["content"][1]["is_error"], true);

    let output = run(
        dir.path(),
        &[
            "--json",
            "run-calls",
            response.to_str().unwrap(),
            "--format",
            "anthropic",
        ],
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["format"], "anthropic");
    assert_eq!(report["calls"][0]["details"], json!({ "length": 3 }));
    assert!(report["calls"][0]["metrics"]["fuel_used"].as_u64().unwrap() > 0);
    assert_eq!(report["calls"][1]["error_kind"], "tool_error");

    std::fs::write(&response, "{ not json").unwrap();
    let output = run(dir.path(), &["run-calls", response.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn run_calls_with_no_tool_calls_prints_an_empty_list() {
    let dir = tools_dir();
    let final_answers = [
        (
            json!({ "object": "chat.completion", "choices": [{ "index": 0, "finish_reason": "stop",
                "message": { "role": "assistant", "content": "Done." } }] }),
            json!([]),
        ),
        (
            json!({ "object": "response", "output": [{ "type": "message", "role": "assistant",
                "content": [{ "type": "output_text", "text": "Done." }] }] }),
            json!([]),
        ),
        (
            json!({ "type": "message", "role": "assistant",
                "content": [{ "type": "text", "text": "Done." }], "stop_reason": "end_turn" }),
            json!({ "role": "user", "content": [] }),
        ),
    ];
    for (document, expected) in final_answers {
        let output = run_with_stdin(dir.path(), &["run-calls"], &document.to_string());
        assert_eq!(
            output.status.code(),
            Some(0),
            "{document}: {}",
            stderr(&output)
        );
        let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(printed, expected, "{document}");
    }
    let output = run_with_stdin(dir.path(), &["run-calls", "--format", "mcp"], "[]");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        serde_json::from_slice::<Value>(&output.stdout).unwrap(),
        json!([])
    );
}

#[test]
fn run_calls_answers_a_custom_tool_call_with_an_error_of_its_own() {
    let dir = tools_dir();
    let response = json!({ "object": "response", "output": [
        { "type": "custom_tool_call", "call_id": "call_custom", "name": "patch", "input": "free text" },
        { "type": "function_call", "call_id": "call_fn", "name": "echo", "arguments": "{\"text\":\"hi\"}" }
    ] });
    let output = run_with_stdin(
        dir.path(),
        &["--json", "run-calls", "-"],
        &response.to_string(),
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["format"], "openai-responses");
    assert_eq!(
        report["results"][0]["type"], "custom_tool_call_output",
        "{report}"
    );
    assert_eq!(report["results"][0]["call_id"], "call_custom");
    assert_eq!(report["calls"][0]["error_kind"], "unsupported");
    assert_eq!(
        report["results"][1],
        json!({ "type": "function_call_output", "call_id": "call_fn", "output": "hi" })
    );
    assert_eq!(report["calls"][1]["is_error"], false);
}

#[test]
fn run_calls_applies_the_config_permissions() {
    let dir = tools_dir();
    std::fs::write(
        dir.path().join("toolcage.toml"),
        "[permissions]\necho = \"deny\"\n\"f*\" = \"ask\"\n",
    )
    .unwrap();
    let output = run_with_stdin(
        dir.path(),
        &["--json", "run-calls", "-"],
        &anthropic_response(),
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["calls"][0]["error_kind"], "permission_denied",
        "{report}"
    );
    // `ask` with no terminal to ask on refuses.
    assert_eq!(
        report["calls"][1]["error_kind"], "permission_denied",
        "{report}"
    );
    let text = report["results"]["content"][1]["content"].as_str().unwrap();
    assert!(text.contains("no terminal"), "{text}");
}

#[test]
fn network_flags_grant_and_proxies_are_ignored() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(toolcage_tests::net::Server::http("127.0.0.1"));
    // A "proxy" the environment names: toolcage must never send to it.
    let proxy = runtime.block_on(toolcage_tests::net::Server::http("127.0.0.2"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_NETPROBE, dir.path().join("netprobe.wasm")).unwrap();
    let authority = server.authority();
    let arguments = json!({ "requests": [
        { "scheme": "http", "authority": authority, "path": "/hello" }
    ] })
    .to_string();
    let proxy_url = format!("http://{}", proxy.authority());
    let output = toolcage()
        .args(["--no-bundled", "--tools"])
        .arg(dir.path())
        .args([
            "--allow-net",
            &format!("http://{authority}"),
            "--net-requests",
            "3",
        ])
        .args(["--json", "call", "netprobe", &arguments])
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["details"][0]["status"], 200, "{result}");
    assert_eq!(
        result["net"],
        json!({ "requests": 1, "denied": 0, "bytes_out": result["net"]["bytes_out"],
                "bytes_in": format!("hello from {authority}").len(), "redactions": 0 })
    );
    assert_eq!(server.seen().len(), 1);
    assert_eq!(proxy.accepted(), 0, "a request went to the proxy");

    // Without the flag, the same call is refused, and says so.
    let output = run(dir.path(), &["--json", "call", "netprobe", &arguments]);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        result["details"][0]["error"]
            .as_str()
            .unwrap()
            .contains("HttpRequestDenied")
    );
    assert!(
        result["logs"]["stderr"]
            .as_str()
            .unwrap()
            .contains("the operator granted this tool no network access"),
        "{result}"
    );

    // A bad pattern is an error at start that names it.
    let output = run(dir.path(), &["--allow-net", "ftp://x.test", "list"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--allow-net: network grant `ftp://x.test`: the scheme must be"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn arguments_past_their_ceiling_on_stdin_exit_2() {
    use std::io::Write;
    let dir = tools_dir();
    let mut child = toolcage()
        .args(["--no-bundled", "--tools"])
        .arg(dir.path())
        .args(["call", "echo", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunk = vec![b' '; 1 << 20];
    // The reader stops at the ceiling: the pipe breaks under the writer.
    for _ in 0..(toolcage::MAX_ARGUMENT_BYTES >> 20) + 2 {
        if stdin.write_all(&chunk).is_err() {
            break;
        }
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("the arguments on stdin are larger than the 16 MiB toolcage takes"),
        "{}",
        stderr(&output)
    );
    // Within it, read whole.
    let output = run_with_stdin(dir.path(), &["call", "echo", "-"], r#"{"text": "hi"}"#);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn a_fifo_as_a_mount_exits_2_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    // The binary is built on first use: not timed.
    let mut command = toolcage();
    let started = std::time::Instant::now();
    let output = command
        .arg("--mount")
        .arg(format!("{}:/m", fifo.display()))
        .arg("list")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("not a directory"),
        "{}",
        stderr(&output)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// The fields whose numbers vary from run to run (or from one build of the
/// guests to the next), masked in golden files.
const VARYING_FIELDS: [&str; 4] = [
    "duration_ms",
    "slot_wait_ms",
    "fuel_used",
    "peak_memory_bytes",
];

/// `text` with each varying field's number (`"duration_ms": 12`) as `<n>`.
fn mask_varying(text: &str) -> String {
    let mut text = text.to_string();
    for field in VARYING_FIELDS {
        let key = format!("\"{field}\":");
        let mut masked = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(&key) {
            let (before, after) = rest.split_at(at + key.len());
            masked.push_str(before);
            let spaces = after.len() - after.trim_start().len();
            masked.push_str(&after[..spaces]);
            let after = &after[spaces..];
            let digits = after
                .find(|c: char| !c.is_ascii_digit() && c != '.')
                .unwrap_or(after.len());
            masked.push_str(if digits > 0 { "\"<n>\"" } else { "" });
            rest = &after[digits..];
        }
        masked.push_str(rest);
        text = masked;
    }
    text
}

/// Compares a run of `toolcage ARGS` with the golden file `name`
/// (`tests/golden/cli/NAME.txt`), or rewrites it under `BLESS=1`. The
/// temporary directory `dir` reads `$TOOLS`, the guests' build directory
/// `$GUESTS`.
fn golden(name: &str, dir: &Path, args: &[&str], output: &Output) {
    let guests_dir = Path::new(guests::FIXTURE_ECHO).parent().unwrap();
    let mask = |text: String| {
        let text = text
            .replace(&dir.display().to_string(), "$TOOLS")
            .replace(&guests_dir.display().to_string(), "$GUESTS");
        mask_varying(&text)
    };
    let args: Vec<String> = args.iter().map(|arg| mask(arg.to_string())).collect();
    let text = format!(
        "$ toolcage {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        output
            .status
            .code()
            .map_or("signal".into(), |c| c.to_string()),
        mask(stdout(output)),
        mask(toolcage_tests::without_slow_load_notes(&stderr(output))),
    );
    toolcage_tests::assert_golden(&format!("golden/cli/{name}.txt"), &text);
}

/// Runs `toolcage --no-bundled --tools DIR ARGS` in `dir` and compares it
/// with the golden file `name`.
fn golden_run(name: &str, dir: &Path, args: &[&str]) {
    let output = run(dir, args);
    let mut shown = vec!["--no-bundled", "--tools", "$TOOLS"];
    shown.extend_from_slice(args);
    golden(name, dir, &shown, &output);
}

#[test]
fn list_and_inspect_match_the_golden_files() {
    let dir = tools_dir();
    golden_run("list", dir.path(), &["list"]);
    golden_run("list.json", dir.path(), &["list", "--json"]);
    golden_run("inspect", dir.path(), &["inspect", "echo"]);
    golden_run("inspect.json", dir.path(), &["inspect", "echo", "--json"]);
    golden_run("inspect.unknown", dir.path(), &["inspect", "nope"]);
}

#[test]
fn call_matches_the_golden_files() {
    let dir = tools_dir();
    let hi = r#"{"text": "hi", "repeat": 2}"#;
    golden_run("call", dir.path(), &["call", "echo", hi]);
    golden_run("call.json", dir.path(), &["--json", "call", "echo", hi]);
    let bad = r#"{"text": 7}"#;
    golden_run("call.invalid", dir.path(), &["call", "echo", bad]);
    golden_run(
        "call.invalid.json",
        dir.path(),
        &["--json", "call", "echo", bad],
    );
    golden_run("call.failed", dir.path(), &["call", "fail"]);
    golden_run("call.failed.json", dir.path(), &["--json", "call", "fail"]);
    golden_run("call.unknown", dir.path(), &["call", "nope"]);
    golden_run("call.unknown.json", dir.path(), &["--json", "call", "nope"]);
}

#[test]
fn definitions_match_the_golden_files() {
    let dir = tools_dir();
    for format in ["openai", "openai-responses", "anthropic", "mcp"] {
        golden_run(
            &format!("definitions.{format}"),
            dir.path(),
            &["definitions", "--format", format],
        );
    }
}

#[test]
fn check_matches_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    for (name, json) in [("check", None), ("check.json", Some("--json"))] {
        let mut args = vec!["check"];
        args.extend(json);
        args.extend([guests::FIXTURE_ECHO, guests::FIXTURE_BAD_SCHEMA]);
        let output = toolcage()
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        golden(name, dir.path(), &args, &output);
    }
}
