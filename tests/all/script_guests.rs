//! Tools written in Python and JavaScript with the SDKs of
//! `guest-tools/python` and `guest-tools/js`, through the host: the example
//! tools (loaded from a tools directory, as an operator would) and the
//! `py_probe`/`js_probe` fixtures that misbehave on purpose.
//!
//! These components are big (12-18 MB) and take tens of seconds to compile,
//! so each language has one test that compiles each of its components once:
//! every registry of a test keeps the same memory limit, so they share the
//! runtime's compiled code while the first one is alive.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolcage::{ErrorKind, Grant, Limits, Mount, Registry};
use toolcage_tests::net::Server;
use toolcage_tests::{
    assert_error, assert_error_at_memory_limit, assert_loaded, builder, guests, quick_limits,
    registry,
};

/// 64 MiB, 2 s, 2 billion fuel: enough for an interpreter, quick to breach.
fn limits() -> Limits {
    quick_limits()
}

/// A tools directory holding only `example` (a copy, as an operator would
/// drop it there), and the registry that loaded it with `load_dir`.
async fn example_registry(example: &str, mount: &Path) -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let file = Path::new(example).file_name().unwrap();
    std::fs::copy(example, dir.path().join(file)).unwrap();
    let mut registry = builder()
        .limits(limits())
        .mount(Mount::read_only(mount, "/data"))
        .build()
        .unwrap();
    let reports = registry.load_dir(dir.path()).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_loaded(&reports[0]);
    (dir, registry)
}

fn details(result: &toolcage::CallResult) -> Value {
    result.details.clone().expect("the call has details")
}

/// The same component again, from a second directory: first wins, as for any
/// component.
async fn assert_first_wins(registry: &mut Registry, example: &str, tool: &str) {
    let again = tempfile::tempdir().unwrap();
    let copy = again.path().join("again.wasm");
    std::fs::copy(example, &copy).unwrap();
    let report = registry.load_file(&copy).await;
    assert_loaded(&report);
    assert!(report.registered.is_empty(), "{report:?}");
    assert_eq!(report.shadowed.len(), 1, "{report:?}");
    assert_eq!(report.shadowed[0].tool, tool);
    let owner = Path::new(example).file_stem().unwrap().to_string_lossy();
    assert_eq!(report.shadowed[0].owner, owner);
}

/// `tool` of `probe` (loaded without a grant) GETs a loopback server: it
/// fails with an error starting `refused` and the log saying why, and the
/// server sees nothing; `fixture` loaded again with a grant gets the page.
async fn assert_fetches_only_when_granted(
    probe: &Registry,
    fixture: &str,
    tool: &str,
    refused: &str,
) {
    let server = Server::http("127.0.0.1").await;
    let url = format!("http://{}/hello", server.authority());
    let result = probe.call(tool, json!({ "url": url })).await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(result.output.starts_with(refused), "{}", result.output);
    assert!(
        result
            .logs
            .stderr
            .contains("refused: the operator granted this tool no network access"),
        "{}",
        result.logs.stderr
    );
    assert_eq!(server.accepted(), 0);
    let mut granted = builder()
        .limits(limits())
        .allow_net(Grant::parse(&format!("http://{}", server.authority())).unwrap())
        .build()
        .unwrap();
    assert_loaded(&granted.load_file(fixture).await);
    let result = granted.call(tool, json!({ "url": url })).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        details(&result),
        json!({ "status": 200, "body": format!("hello from {}", server.authority()) })
    );
    assert_eq!(result.net.requests, 1);
}

/// The bundled tools, then the `probe` fixture: the probe's `read_file`
/// collides with the bundled one and is shadowed, as any component's would
/// be, and never runs.
async fn probe_registry(probe: &str) -> Registry {
    let mut registry = builder().limits(limits()).build().unwrap();
    registry.load_bundled().await;
    let report = registry.load_file(probe).await;
    assert_loaded(&report);
    let shadowed: Vec<_> = report
        .shadowed
        .iter()
        .map(|s| (s.tool.as_str(), s.owner.as_str()))
        .collect();
    assert_eq!(shadowed, [("read_file", "fs")], "{report:?}");
    assert!(!report.registered.iter().any(|t| t == "read_file"));
    assert_eq!(registry.tool("read_file").unwrap().component, "fs");
    let result = registry
        .call("read_file", json!({ "path": "/nowhere.txt" }))
        .await;
    assert!(!result.output.contains("hijacked"), "{}", result.output);
    registry
}

/// `fail` (a probe tool throwing its `message`): an exception of class
/// `class` becomes a `tool_error` saying `class: message`, and the SDK's
/// own `ToolError` gives its message and details as they are.
async fn assert_errors_become_outcomes(probe: &Registry, fail: &str, class: &str) {
    let result = probe.call(fail, json!({ "message": "bad input: x" })).await;
    assert_error(&result, ErrorKind::ToolError);
    assert_eq!(result.output, format!("{class}: bad input: x"));
    let result = probe
        .call(fail, json!({ "message": "use y instead", "typed": true }))
        .await;
    assert_error(&result, ErrorKind::ToolError);
    assert_eq!(result.output, "use y instead");
    assert_eq!(details(&result), json!({ "echo": "use y instead" }));
}

/// `spin` (a probe tool that loops forever) is stopped by fuel, and with
/// fuel unlimited by the timeout; the probe then still answers `quick`.
async fn assert_loops_are_stopped(probe: &Registry, fixture: &str, spin: &str, quick: &str) {
    let result = probe.call(spin, json!({})).await;
    assert_error(&result, ErrorKind::OutOfFuel);
    let unlimited = Limits {
        fuel: None,
        timeout: Duration::from_millis(500),
        ..limits()
    };
    let timed = registry(builder().limits(unlimited), &[fixture]).await;
    let result = timed.call(spin, json!({})).await;
    assert_error(&result, ErrorKind::Timeout);
    let result = probe.call(quick, json!({})).await;
    assert!(!result.is_error, "{}", result.output);
}

#[tokio::test]
async fn python_tools_through_the_host() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("sales.csv"),
        "region,amount\nnorth,10\nsouth,30\nnorth,20\n",
    )
    .unwrap();
    let (_dir, mut examples) = example_registry(guests::CSV_SUMMARY, data.path()).await;

    // describe(): the declared descriptor, with the schema derived from the
    // type hints.
    let info = examples
        .tools()
        .find(|t| t.descriptor.name == "csv_summary")
        .expect("csv_summary is registered")
        .descriptor
        .clone();
    assert_eq!(info.title.as_deref(), Some("Summarise a CSV table"));
    assert!(info.description.starts_with("Summarises a CSV table"));
    assert!(info.hints.read_only && info.hints.idempotent && !info.hints.destructive);
    assert_eq!(
        info.input_schema,
        json!({
            "type": "object",
            "properties": {
                "path": { "anyOf": [{ "type": "string" }, { "type": "null" }], "default": null },
                "text": { "anyOf": [{ "type": "string" }, { "type": "null" }], "default": null },
                "delimiter": { "type": "string", "default": "," },
                "top": { "type": "integer", "default": 3 }
            },
            "additionalProperties": false
        })
    );

    // A call gives the right output and details, from text and from a mount.
    let result = examples
        .call("csv_summary", json!({ "path": "/data/sales.csv" }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.output,
        "3 rows, 2 columns\nregion: text, 2 distinct, most frequent: north (2), south (1)\namount: number, min 10, mean 20, max 30"
    );
    let d = details(&result);
    assert_eq!(d["rows"], 3);
    assert_eq!(d["columns"][1]["mean"], 20.0);
    assert_eq!(d["columns"][0]["top"], json!([["north", 2], ["south", 1]]));
    let result = examples
        .call(
            "csv_summary",
            json!({ "text": "a;b\n1;2\n", "delimiter": ";" }),
        )
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(details(&result)["columns"][1]["max"], 2.0);

    // The tool's own error, and bad arguments stopped by the host.
    let result = examples.call("csv_summary", json!({})).await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(
        result.output.starts_with("give exactly one of"),
        "{}",
        result.output
    );
    let result = examples
        .call("csv_summary", json!({ "top": "three" }))
        .await;
    assert_error(&result, ErrorKind::InvalidArguments);
    assert_eq!(result.fuel_used, 0, "the guest did not run");

    // Outside the mounts there is nothing: an exception, not a trap.
    let result = examples
        .call("csv_summary", json!({ "path": "/etc/passwd" }))
        .await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(
        result.output.starts_with("FileNotFoundError:"),
        "{}",
        result.output
    );

    assert_first_wins(&mut examples, guests::CSV_SUMMARY, "csv_summary").await;

    // The probe: exceptions, limits, the sandbox.
    let probe = probe_registry(guests::FIXTURE_PY_PROBE).await;
    assert_errors_become_outcomes(&probe, "py_fail", "ValueError").await;
    assert_loops_are_stopped(&probe, guests::FIXTURE_PY_PROBE, "py_spin", "py_env").await;

    let result = probe.call("py_hog", json!({})).await;
    assert_error_at_memory_limit(
        &result,
        ErrorKind::ToolError,
        "MemoryError: the tool ran out of memory",
    );
    let result = probe.call("py_hog", json!({ "catch": true })).await;
    assert_error_at_memory_limit(&result, ErrorKind::ToolError, "allocation failed");

    let result = probe.call("py_env", json!({})).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(details(&result), json!({}), "the environment is empty");
    let result = probe
        .call("py_read", json!({ "path": "/etc/hostname" }))
        .await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(
        result.output.starts_with("FileNotFoundError:"),
        "{}",
        result.output
    );

    // The SDK's http: refused without a grant, answered by a real server on
    // loopback with one.
    assert_fetches_only_when_granted(
        &probe,
        guests::FIXTURE_PY_PROBE,
        "py_fetch",
        "fetch failed (HttpRequestDenied): the request failed: the operator has not granted",
    )
    .await;
}

#[tokio::test]
async fn javascript_tools_through_the_host() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, mut examples) = example_registry(guests::MARKDOWN_OUTLINE, data.path()).await;

    let info = examples
        .tools()
        .find(|t| t.descriptor.name == "markdown_outline")
        .expect("markdown_outline is registered")
        .descriptor
        .clone();
    assert_eq!(info.title.as_deref(), Some("Outline a Markdown document"));
    assert!(info.hints.read_only && info.hints.idempotent && !info.hints.open_world);
    assert_eq!(info.input_schema["required"], json!(["text"]));
    assert!(info.output_schema.is_some());

    let text = "# Guide\n\nIntro\n\n## Install\n\n```sh\n# not a heading\n```\n\nUsage\n-----\n\n### Flags\n";
    let result = examples
        .call("markdown_outline", json!({ "text": text }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.output,
        "Guide (line 1)\n  Install (line 5)\n  Usage (line 11)\n    Flags (line 14)"
    );
    assert_eq!(
        details(&result),
        json!({
            "headings": [
                { "level": 1, "title": "Guide", "line": 1 },
                { "level": 2, "title": "Install", "line": 5 },
                { "level": 2, "title": "Usage", "line": 11 },
                { "level": 3, "title": "Flags", "line": 14 }
            ],
            "lines": 15
        })
    );
    let result = examples
        .call("markdown_outline", json!({ "text": text, "max_level": 1 }))
        .await;
    assert_eq!(result.output, "Guide (line 1)");

    let result = examples
        .call("markdown_outline", json!({ "text": "plain\ntext" }))
        .await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(
        result.output.starts_with("no headings found in 2 lines"),
        "{}",
        result.output
    );
    let result = examples
        .call("markdown_outline", json!({ "text": "# a", "max_level": 9 }))
        .await;
    assert_error(&result, ErrorKind::InvalidArguments);
    assert_eq!(result.fuel_used, 0, "the guest did not run");

    assert_first_wins(&mut examples, guests::MARKDOWN_OUTLINE, "markdown_outline").await;

    let probe = probe_registry(guests::FIXTURE_JS_PROBE).await;
    assert_errors_become_outcomes(&probe, "js_fail", "TypeError").await;
    let result = probe
        .call(
            "js_fail",
            json!({ "message": "just a string", "bare": true }),
        )
        .await;
    assert_error(&result, ErrorKind::ToolError);
    assert_eq!(result.output, "just a string");

    assert_loops_are_stopped(&probe, guests::FIXTURE_JS_PROBE, "js_spin", "js_env").await;
    let result = probe.call("js_hog", json!({})).await;
    assert_error_at_memory_limit(&result, ErrorKind::ToolError, "the tool ran out of memory");

    // No environment: StarlingMonkey has no `process` at all.
    let result = probe.call("js_env", json!({})).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        details(&result),
        json!({ "process": "undefined", "env": null })
    );

    // fetch(), awaited in an async `run`: refused without a grant, and
    // answered by a real server on loopback with one.
    assert_fetches_only_when_granted(&probe, guests::FIXTURE_JS_PROBE, "js_fetch", "fetch failed")
        .await;
}

/// A Python and a JavaScript tool calling a tool through their SDK's
/// `tools.call`: refused without a grant (a result, not an exception),
/// answered with one, exactly as the Rust SDK's.
#[tokio::test]
async fn python_and_javascript_tools_call_tools_within_their_grant() {
    for (fixture, tool, component) in [
        (guests::FIXTURE_PY_COMPOSE, "py_compose", "py_compose"),
        (guests::FIXTURE_JS_COMPOSE, "js_compose", "js_compose"),
    ] {
        let builder = builder()
            .limits(limits())
            .component_calls(component, "echo");
        let registry = registry(builder, &[fixture, guests::FIXTURE_ECHO]).await;
        let call = |callee: &str| json!({ "tool": callee, "arguments": { "text": "hi" } });
        let result = registry.call(tool, call("echo")).await;
        assert!(!result.is_error, "{tool}: {}", result.output);
        assert_eq!(result.output, "hi", "{tool}");
        assert_eq!(
            details(&result)["details"],
            json!({ "length": 2 }),
            "{tool}"
        );
        assert_eq!(result.nested.len(), 1, "{tool}");
        assert_eq!(
            details(&result)["call_id"],
            result.nested[0].call_id.as_str()
        );
        // Not granted: the refusal comes back as a result the tool reads.
        let result = registry.call(tool, call("counter")).await;
        assert!(!result.is_error, "{tool}: {}", result.output);
        assert_eq!(
            details(&result)["error_kind"],
            "permission_denied",
            "{tool}"
        );
        assert_eq!(details(&result)["is_error"], true, "{tool}");
    }
}
