//! Upstream MCP servers' tools in the registry, against real servers over
//! stdio: the MCP project's own `server-everything` (from the npm
//! registry), and `tests/clients/upstream_server.py`, written with the
//! official Python SDK, whose hostile tools crash, flood, hang or declare a
//! broken schema. Every call takes the one path: validated, permission
//! checked, timed out, capped, redacted, and callable from code mode. A
//! server's progress and logs are its calls' events, its list changes swap
//! its tools in, and bubblewrap confines one (shown against the same
//! server unconfined).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::agent::{Permission, Permissions, Runner, ToolCall};
use toolcage::upstream::{Bubblewrap, EnvValue, McpServer};
use toolcage::{
    CallOptions, CallPolicy, CancelToken, Cidr, Elicitation, ElicitationRequest, ErrorKind, Grant,
    GuestEvent, LiveRegistry, Mount, Registry, Secret, Secrets,
};
use toolcage_tests::{
    assert_error, assert_loaded, builder, client_clis, clients_python, guests, toolcage,
};

/// `server-everything` over stdio, run by `node` itself: its environment
/// is empty, so a `#!/usr/bin/env node` script would find no `node`.
fn everything() -> McpServer {
    let script = std::fs::canonicalize(client_clis().join("mcp-server-everything"))
        .expect("server-everything is installed");
    McpServer::stdio("everything", "node")
        .unwrap()
        .args([script.to_string_lossy().into_owned(), "stdio".into()])
}

/// `tests/clients/upstream_server.py`, named `name`, on the clients'
/// Python.
fn hostile(name: &str) -> McpServer {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    McpServer::stdio(name, clients_python().to_string_lossy())
        .unwrap()
        .args([script.to_string_lossy().into_owned()])
}

async fn registry_with(server: &McpServer) -> Registry {
    let mut registry = builder().build().unwrap();
    assert_loaded(&registry.load_mcp_server(server).await);
    registry
}

#[tokio::test]
async fn everythings_tools_are_registered_under_its_prefix_and_answer() {
    let registry = registry_with(&everything()).await;
    let echo = registry.tool("mcp__everything__echo").expect("echo");
    assert_eq!(echo.component, "mcp:everything");
    assert_eq!(echo.source.to_string(), "mcp:everything");
    assert!(echo.descriptor.hints.read_only && echo.descriptor.hints.idempotent);
    assert!(!echo.descriptor.hints.destructive);

    let result = registry
        .call("mcp__everything__echo", json!({ "message": "hi" }))
        .await;
    assert_eq!(result.output, "Echo: hi", "{result:?}");
    let result = registry
        .call("mcp__everything__get-sum", json!({ "a": 2, "b": 3 }))
        .await;
    assert_eq!(result.output, "The sum of 2 and 3 is 5.", "{result:?}");

    // Structured content is the details, checked against the tool's own
    // output schema.
    let result = registry
        .call(
            "mcp__everything__get-structured-content",
            json!({ "location": "Chicago" }),
        )
        .await;
    assert!(!result.is_error, "{result:?}");
    let details = result.details.expect("structured content");
    assert!(details["temperature"].is_number(), "{details}");

    // An image is named in the output and kept whole in the details.
    let result = registry
        .call("mcp__everything__get-tiny-image", json!({}))
        .await;
    assert!(
        result.output.contains("[image: image/png, "),
        "{}",
        result.output
    );
    let content = &result.details.expect("details")["content"];
    assert_eq!(content[0]["type"], "image", "{content}");

    // Its long-running operation's progress notifications are the call's
    // progress events.
    let progress = Arc::new(Mutex::new(Vec::new()));
    let sink = progress.clone();
    let options = CallOptions::new().on_event(move |event| {
        if let GuestEvent::Progress { fraction, .. } = event {
            sink.lock().unwrap().push(fraction);
        }
    });
    let result = registry
        .call_with(
            "mcp__everything__trigger-long-running-operation",
            json!({ "duration": 1, "steps": 4 }),
            options,
        )
        .await;
    assert!(!result.is_error, "{result:?}");
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 4, "{progress:?}");
    assert_eq!(progress.last(), Some(&Some(1.0)), "{progress:?}");

    // Bad arguments never reach the server: the model gets every error.
    let result = registry
        .call("mcp__everything__get-sum", json!({ "a": "two" }))
        .await;
    assert_error(&result, ErrorKind::InvalidArguments);
    assert!(
        result.output.contains("\"b\" is a required property"),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn a_long_call_is_cancelled_or_timed_out_and_the_server_keeps_serving() {
    let server = everything().timeout(Duration::from_millis(800));
    let registry = registry_with(&server).await;
    let long = json!({ "duration": 30, "steps": 30 });

    let cancel = CancelToken::new();
    let options = CallOptions::new().cancel_token(cancel.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let result = registry
        .call_with(
            "mcp__everything__trigger-long-running-operation",
            long.clone(),
            options,
        )
        .await;
    canceller.await.unwrap();
    assert_error(&result, ErrorKind::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(5));

    let result = registry
        .call("mcp__everything__trigger-long-running-operation", long)
        .await;
    assert_error(&result, ErrorKind::Timeout);
    assert!(
        result.output.contains("did not answer within"),
        "{}",
        result.output
    );

    let result = registry
        .call("mcp__everything__echo", json!({ "message": "still here" }))
        .await;
    assert_eq!(result.output, "Echo: still here", "{result:?}");
}

#[tokio::test]
async fn the_environment_is_empty_but_for_what_is_named_and_secrets_are_redacted() {
    const TOKEN: &str = "tok-0123456789-abcdef";
    let secrets = Secrets::new();
    secrets.set(Secret::new("token", TOKEN).unwrap());
    let server = hostile("h")
        .env("MARKER", EnvValue::Text("hello".into()))
        .unwrap()
        .env("TOKEN", EnvValue::Secret("token".into()))
        .unwrap();
    let mut registry = builder().secrets(secrets).build().unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);

    let result = registry.call("mcp__h__environment", json!({})).await;
    assert!(!result.is_error, "{result:?}");
    let names: Vec<&str> = result
        .output
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    // Python may add a variable or two of its own (LC_CTYPE), never
    // toolcage's.
    assert!(
        names.contains(&"MARKER") && names.contains(&"TOKEN"),
        "{names:?}"
    );
    for inherited in ["HOME", "PATH", "CARGO_MANIFEST_DIR", "RUST_TEST_THREADS"] {
        assert!(!names.contains(&inherited), "{inherited} leaked: {names:?}");
    }
    assert!(result.output.contains("MARKER=hello"), "{}", result.output);
    assert!(!result.output.contains(TOKEN), "{}", result.output);
    assert!(result.net.redactions > 0, "{result:?}");
    let details = result.details.expect("structured content").to_string();
    assert!(!details.contains(TOKEN), "{details}");

    // Nor through a question to the user.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question.message);
        async { Elicitation::Decline }
    });
    let result = registry
        .call_with("mcp__h__ask_with", json!({ "variable": "TOKEN" }), options)
        .await;
    assert_eq!(result.output, "decline", "{result:?}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        !asked[0].contains(TOKEN) && asked[0].ends_with(": what is your name?"),
        "{asked:?}"
    );

    // A secret that is not set is a start-up error naming it.
    let unset = hostile("u")
        .env("X", EnvValue::Secret("nope".into()))
        .unwrap();
    let report = registry.load_mcp_server(&unset).await;
    let error = report.error.expect("refused").to_string();
    assert!(error.contains("the secret `nope`"), "{error}");
}

#[tokio::test]
async fn first_wins_across_components_and_servers_and_survives_reloads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    let base = builder().build().unwrap();
    let (live, reports) = LiveRegistry::load(base, [dir.path()]).await.unwrap();
    assert_loaded(&reports[0]);

    // An empty prefix names the server's `echo` exactly like the
    // component's tool: the component keeps it.
    let server = hostile("h").prefix("").unwrap();
    let report = live.load_mcp_server(&server).await;
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(report.shadowed.len(), 1, "{report:?}");
    assert_eq!(report.shadowed[0].tool, "echo");
    assert_eq!(report.shadowed[0].owner, "echo");
    assert!(
        report.registered.contains(&"crash".to_string()),
        "{report:?}"
    );

    let registry = live.current();
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    assert_eq!(registry.tool("environment").unwrap().component, "mcp:h");

    // A component arriving later with a name the server owns does not take
    // it, and a reload keeps every owner.
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("zz_echo.wasm")).unwrap();
    live.reload().await;
    let registry = live.current();
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    assert_eq!(registry.tool("crash").unwrap().component, "mcp:h");
    let result = registry.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(result.output, "hi", "{result:?}");
}

#[tokio::test]
async fn upstreams_that_never_start_are_reported_and_the_others_serve() {
    let silent = hostile("silent")
        .args(["silent"])
        .startup_timeout(Duration::from_millis(1500));
    let missing = McpServer::stdio("missing", "no-such-program-anywhere").unwrap();
    let server = hostile("h");
    let mut registry = builder().build().unwrap();
    let started = Instant::now();
    let reports = registry.load_mcp_servers(&[silent, missing, server]).await;
    // Started at once: the silent one costs its start-up timeout, once.
    assert!(started.elapsed() < Duration::from_secs(10));
    let error = reports[0].error.as_ref().expect("silent").to_string();
    assert!(error.contains("did not initialize within"), "{error}");
    let error = reports[1].error.as_ref().expect("missing").to_string();
    assert!(error.contains("is not on PATH"), "{error}");
    assert_loaded(&reports[2]);
    // The tool with a broken schema is skipped; the others load and serve.
    assert!(registry.tool("mcp__h__bad_schema").is_none());
    let result = registry.call("mcp__h__echo", json!({ "text": "x" })).await;
    assert_eq!(result.output, "x", "{result:?}");
}

#[tokio::test]
async fn a_flooding_hanging_or_crashing_upstream_fails_its_call_only() {
    let server = hostile("h")
        .timeout(Duration::from_secs(2))
        .output_bytes(1 << 20);
    let registry = registry_with(&server).await;

    let first = registry.call("mcp__h__pid", json!({})).await;
    assert!(!first.is_error, "{first:?}");
    let result = registry.call("mcp__h__hang", json!({})).await;
    assert_error(&result, ErrorKind::Timeout);
    let result = registry.call("mcp__h__pid", json!({})).await;
    assert_eq!(
        result.output, first.output,
        "the same process, still serving"
    );
    let result = registry.call("mcp__h__crash", json!({})).await;
    assert_error(&result, ErrorKind::Unavailable);
    let result = registry.call("mcp__h__echo", json!({ "text": "x" })).await;
    assert_error(&result, ErrorKind::Unavailable);
    assert!(
        result.output.contains("is not running") && result.output.contains("started again"),
        "{}",
        result.output
    );
    // After the pause it is started again: the call waits for that start.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = registry.call("mcp__h__pid", json!({})).await;
    assert!(!second.is_error, "{second:?}");
    assert_ne!(first.output, second.output, "a new process");
    // An answer over the output limit is refused. (Last: a call right after
    // a 4 MiB answer was seen to find the connection closed; see the note
    // on issue 37.)
    let result = registry
        .call("mcp__h__huge", json!({ "mebibytes": 2 }))
        .await;
    assert_error(&result, ErrorKind::OutputLimit);
}

/// The process ids `starts` lists, one a start of the server.
fn starts(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_dead_upstream_is_started_again_in_the_background_with_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let failing = dir.path().join("starts.fail");
    let server = hostile("h")
        .env("STARTS", EnvValue::Text(file.to_string_lossy().into()))
        .unwrap();
    let registry = registry_with(&server).await;
    assert_eq!(starts(&file).len(), 1);

    // It dies, and every start fails for a while: the starts come after
    // pauses of 0.5, 1 and 2 s (and the next after 4 s), with no call made,
    // and a call meanwhile says it is unavailable.
    std::fs::write(&failing, "").unwrap();
    let result = registry.call("mcp__h__crash", json!({})).await;
    assert_error(&result, ErrorKind::Unavailable);
    tokio::time::sleep(Duration::from_millis(5000)).await;
    let tries = starts(&file).len() - 1;
    assert!((2..=4).contains(&tries), "{tries} starts in 5 s");
    let result = registry.call("mcp__h__echo", json!({ "text": "x" })).await;
    assert_error(&result, ErrorKind::Unavailable);
    assert!(
        result.output.contains("started again in"),
        "{}",
        result.output
    );

    // Once it can start, it is back by itself, after its pause: calls
    // meanwhile answer `unavailable` (a call waits for a start under way),
    // and the one that finds it serving finds the last process started.
    std::fs::remove_file(&failing).unwrap();
    let waited = Instant::now();
    let result = loop {
        let result = registry.call("mcp__h__pid", json!({})).await;
        if !result.is_error {
            break result;
        }
        assert_error(&result, ErrorKind::Unavailable);
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "not back in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started = starts(&file);
    assert_eq!(Some(&result.output), started.last(), "{result:?}");
    let result = registry.call("mcp__h__pid", json!({})).await;
    assert_eq!(Some(&result.output), started.last(), "{result:?}");
    assert_eq!(
        starts(&file),
        started,
        "no start for a call to a running server"
    );

    // Closed on purpose, it is not started again in the background; a call
    // starts it.
    registry.close_mcp_servers(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(starts(&file), started, "not started after a close");
    let result = registry.call("mcp__h__pid", json!({})).await;
    assert!(!result.is_error, "{result:?}");
    assert_eq!(starts(&file).len(), started.len() + 1);

    // Closed while dead, waiting out its pause: not started either.
    let result = registry.call("mcp__h__crash", json!({})).await;
    assert_error(&result, ErrorKind::Unavailable);
    registry.close_mcp_servers(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(
        starts(&file).len(),
        started.len() + 1,
        "started after a close"
    );
}

/// A live registry of one empty directory (kept while the second value
/// lives), following `server`.
async fn live_with(server: &McpServer) -> (LiveRegistry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (live, _) = LiveRegistry::load(builder().build().unwrap(), [dir.path()])
        .await
        .unwrap();
    assert!(live.load_mcp_server(server).await.error.is_none());
    (live, dir)
}

#[tokio::test]
async fn a_start_its_call_gave_up_on_leaves_a_closed_server_closed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let server = hostile("h")
        .env("STARTS", EnvValue::Text(file.to_string_lossy().into()))
        .unwrap()
        .timeout(Duration::from_millis(300));
    let registry = registry_with(&server).await;
    registry.close_mcp_servers(Duration::from_secs(2)).await;
    // The call starts it, and gives up at its timeout, before the server
    // has initialized: the process is ended, and nothing starts it again.
    let result = registry.call("mcp__h__pid", json!({})).await;
    assert_error(&result, ErrorKind::Unavailable);
    assert!(
        result
            .output
            .contains("did not start within the call's timeout of 300 ms"),
        "{}",
        result.output
    );
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let started = starts(&file);
    assert_eq!(started.len(), 2, "started in the background");
    assert!(!alive(&started[1]), "the given-up start's process runs on");
}

/// Whether process `pid` still runs (and is not a zombie).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

#[tokio::test]
async fn a_dropped_live_registry_ends_its_servers() {
    let (live, _dir) = live_with(&hostile("h")).await;
    let pid = live.current().call("mcp__h__pid", json!({})).await.output;
    assert!(alive(&pid), "{pid}");
    drop(live);
    let dropped = Instant::now();
    while alive(&pid) {
        assert!(
            dropped.elapsed() < Duration::from_secs(10),
            "{pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn permission_rules_and_code_mode_reach_upstream_tools() {
    let mut registry = builder().build().unwrap();
    for report in registry.load_bundled().await {
        assert_loaded(&report);
    }
    assert_loaded(&registry.load_mcp_server(&everything()).await);
    let registry = Arc::new(registry);

    let rules = Permissions::allow_all()
        .rule("mcp__everything__get-sum", Permission::Deny)
        .unwrap();
    let rules = Arc::new(rules);
    let runner = Runner::new(registry.clone()).permissions(rules.clone());
    let results = runner
        .run([
            ToolCall::new("c1", "mcp__everything__get-sum", json!({ "a": 1, "b": 2 })),
            ToolCall::new("c2", "mcp__everything__echo", json!({ "message": "ok" })),
        ])
        .await;
    assert_error(&results[0], ErrorKind::PermissionDenied);
    assert_eq!(results[1].output, "Echo: ok", "{:?}", results[1]);

    // A script calls upstream tools as functions (a kebab-case name with
    // `_`), through the same rules: a denied tool is not even there.
    let code = "a = await mcp__everything__echo(message='from a script')\n\
                w = await mcp__everything__get_structured_content(location='Chicago')\n\
                try:\n    await mcp__everything__get_sum(a=1, b=2)\n    c = 'ran'\n\
                except NameError:\n    c = 'hidden'\n\
                [a, 'temperature' in w, c]";
    let options = CallOptions::new().policy(CallPolicy::new(rules));
    let result = registry
        .call_with("run_code", json!({ "code": code }), options)
        .await;
    assert!(!result.is_error, "{result:?}");
    let value = &result.details.expect("details")["result"];
    assert_eq!(
        value,
        &json!(["Echo: from a script", true, "hidden"]),
        "{value}"
    );
}

#[tokio::test]
async fn progress_and_log_notifications_become_the_calls_events() {
    let registry = registry_with(&hostile("h")).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = CallOptions::new().on_event(move |event| sink.lock().unwrap().push(event));
    let result = registry
        .call_with("mcp__h__steps", json!({ "count": 3 }), options)
        .await;
    assert_eq!(result.output, "done", "{result:?}");
    let seen = seen.lock().unwrap();
    let progress: Vec<_> = seen
        .iter()
        .filter_map(|event| match event {
            GuestEvent::Progress { message, fraction } => Some((message.clone(), *fraction)),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        [1, 2, 3].map(|i| (format!("step {i}"), Some(i as f32 / 3.0))),
        "{seen:?}"
    );
    let logs = seen
        .iter()
        .filter(|event| matches!(event, GuestEvent::Log { message, .. } if message.contains("did step")))
        .count();
    assert_eq!(logs, 3, "{seen:?}");
}

#[tokio::test]
async fn a_servers_list_changed_swaps_its_tools_in_and_a_flood_costs_little() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    let (live, _) = LiveRegistry::load(builder().build().unwrap(), [dir.path()])
        .await
        .unwrap();
    // `echo` is the component's: the server's stays shadowed through every
    // change of its list.
    let server = hostile("h").prefix("").unwrap();
    assert!(live.load_mcp_server(&server).await.error.is_none());
    let mut changes = live.subscribe();
    let registry = live.current();
    assert!(registry.tool("added").is_none());

    let result = registry.call("change_tools", json!({ "add": true })).await;
    assert_eq!(result.output, "changed", "{result:?}");
    let change = tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert!(
        change.changes.iter().any(|c| c.tool == "added"),
        "{change:?}"
    );
    let registry = live.current();
    assert_eq!(registry.tool("added").unwrap().component, "mcp:h");
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    let result = registry.call("added", json!({})).await;
    assert_eq!(result.output, "added", "{result:?}");

    // A flood of notifications that change nothing: the server still
    // answers, and nothing in the registry changed.
    let started = Instant::now();
    let result = registry.call("flood", json!({ "count": 2000 })).await;
    assert_eq!(result.output, "flooded", "{result:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let result = live.current().call("pid", json!({})).await;
    assert!(!result.is_error, "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(changes.try_recv().is_err(), "no change from a flood");

    let result = registry.call("change_tools", json!({ "add": false })).await;
    assert_eq!(result.output, "changed", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert!(live.current().tool("added").is_none());
    assert_eq!(live.current().tool("echo").unwrap().component, "echo");
}

/// The hostile server confined by bubblewrap, with what it needs to run
/// (its script, the virtualenv and the Python it was made from) mounted
/// read-only, and nothing else of the host's.
fn confined(name: &str) -> McpServer {
    let python = clients_python();
    let venv = python
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let real = std::fs::canonicalize(&python).unwrap();
    let base = real.parent().and_then(Path::parent).unwrap().to_path_buf();
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    let mut bubblewrap = Bubblewrap::new();
    for dir in [venv, base, scripts] {
        let guest = dir.to_string_lossy().into_owned();
        bubblewrap = bubblewrap.mount(Mount::read_only(&dir, guest));
    }
    hostile(name).bubblewrap(bubblewrap)
}

#[tokio::test]
async fn bubblewrap_confines_a_server_and_unconfined_it_could_reach_out() {
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "the host's own file").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = secret.to_string_lossy().into_owned();

    let mut registry = builder().build().unwrap();
    let reports = registry
        .load_mcp_servers(&[hostile("open"), confined("boxed")])
        .await;
    for report in &reports {
        assert_loaded(report);
    }
    let read = |name: &str| format!("mcp__{name}__read_file");
    let connect = |name: &str| format!("mcp__{name}__connect");

    let open = registry.call(&read("open"), json!({ "path": path })).await;
    assert_eq!(open.output, "the host's own file", "{open:?}");
    let boxed = registry.call(&read("boxed"), json!({ "path": path })).await;
    assert!(boxed.output.starts_with("error: "), "{boxed:?}");

    let open = registry
        .call(&connect("open"), json!({ "port": port }))
        .await;
    assert_eq!(open.output, "connected", "{open:?}");
    let boxed = registry
        .call(&connect("boxed"), json!({ "port": port }))
        .await;
    assert!(boxed.output.starts_with("error: "), "{boxed:?}");

    let boxed = registry.call("mcp__boxed__environment", json!({})).await;
    assert!(!boxed.output.contains("HOME="), "{boxed:?}");
    assert!(!boxed.output.contains("CARGO"), "{boxed:?}");
    drop(listener);
}

/// `upstream_server.py` over Streamable HTTP on 127.0.0.1: its port, and
/// the process (killed when dropped).
struct Remote {
    port: u16,
    process: std::process::Child,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.process.kill().ok();
        self.process.wait().ok();
    }
}

fn remote() -> Remote {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    let process = std::process::Command::new(clients_python())
        .arg(script)
        .args(["http", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server listens within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Remote { port, process }
}

#[tokio::test]
async fn a_remote_server_is_reached_only_as_granted_and_its_secret_never_shows() {
    const TOKEN: &str = "tok-remote-0123456789";
    let remote = remote();
    let port = remote.port;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let grant = |pattern: String| Grant::parse(&pattern).unwrap();

    // Not granted: refused before anything is sent.
    let mut registry = builder().build().unwrap();
    let report = registry
        .load_mcp_server(&McpServer::http("r", &url).unwrap())
        .await;
    let error = report.error.expect("refused").to_string();
    assert!(error.contains("is not granted"), "{error}");

    // Granted by its address: its tools serve, the bearer token goes with
    // every request and never comes back.
    let secrets = Secrets::new();
    secrets.set(Secret::new("token", TOKEN).unwrap());
    let mut registry = builder()
        .secrets(secrets)
        .allow_net(grant(format!("http://127.0.0.1:{port}")))
        .build()
        .unwrap();
    let server = McpServer::http("r", &url)
        .unwrap()
        .header("Authorization", "Bearer {{ secrets.token }}")
        .unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);
    let result = registry
        .call("mcp__r__echo", json!({ "text": "over http" }))
        .await;
    assert_eq!(result.output, "over http", "{result:?}");
    let result = registry.call("mcp__r__authorization", json!({})).await;
    assert!(result.output.starts_with("Bearer "), "{result:?}");
    assert!(!result.output.contains(TOKEN), "{result:?}");
    assert!(!format!("{:?}", result.details).contains(TOKEN));
    assert!(result.net.redactions > 0, "{result:?}");
    let listed = serde_json::to_string(&registry.tools().collect::<Vec<_>>()).unwrap();
    assert!(!listed.contains(TOKEN));

    // A granted name that resolves into a private range is refused unless
    // `allow_private` lets names resolve there.
    let named = format!("http://mcp.test:{port}/mcp");
    let to_loopback = |name: &str| -> std::io::Result<Vec<std::net::IpAddr>> {
        match name {
            "mcp.test" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            _ => Err(std::io::ErrorKind::NotFound.into()),
        }
    };
    let mut registry = builder()
        .resolver(to_loopback)
        .allow_net(grant(format!("http://mcp.test:{port}")))
        .build()
        .unwrap();
    let server = McpServer::http("n", &named).unwrap();
    let error = registry
        .load_mcp_server(&server)
        .await
        .error
        .expect("refused");
    assert!(
        error.to_string().contains("resolves to 127.0.0.1"),
        "{error}"
    );
    let mut registry = builder()
        .resolver(to_loopback)
        .allow_net(grant(format!("http://mcp.test:{port}")))
        .allow_private("127.0.0.0/8".parse::<Cidr>().unwrap())
        .build()
        .unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);
    let result = registry
        .call("mcp__n__echo", json!({ "text": "by name" }))
        .await;
    assert_eq!(result.output, "by name", "{result:?}");
}

#[tokio::test]
async fn closing_ends_every_server_within_its_bound_and_a_later_call_restarts() {
    let mut registry = builder().build().unwrap();
    let reports = registry
        .load_mcp_servers(&[hostile("a"), hostile("b")])
        .await;
    for report in &reports {
        assert_loaded(report);
    }
    let pid = |result: &toolcage::CallResult| -> u32 { result.output.trim().parse().unwrap() };
    let a = pid(&registry.call("mcp__a__pid", json!({})).await);
    let b = pid(&registry.call("mcp__b__pid", json!({})).await);
    // `b` will not exit when its input ends: it is killed at the bound.
    let result = registry.call("mcp__b__linger", json!({})).await;
    assert_eq!(result.output, "lingering", "{result:?}");
    let started = Instant::now();
    registry.close_mcp_servers(Duration::from_millis(800)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for pid in [a, b] {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} still runs"
        );
    }
    // A later call starts the server again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = registry.call("mcp__a__pid", json!({})).await;
    assert!(!again.is_error, "{again:?}");
    assert_ne!(pid(&again), a);
}

#[tokio::test]
async fn a_servers_question_goes_to_the_callers_asker_or_is_declined_saying_so() {
    let registry = registry_with(&hostile("h")).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question);
        async { Elicitation::Accept(json!({ "name": "Ada" })) }
    });
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert_eq!(result.output, "hello Ada", "{result:?}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "mcp__h__ask");
    assert_eq!(asked[0].message, "What is your name?");
    assert_eq!(asked[0].schema["properties"]["name"]["type"], "string");

    // Nobody to ask: declined, and the call's events say why.
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let options = CallOptions::new().on_event(move |event| sink.lock().unwrap().push(event));
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert_eq!(result.output, "decline", "{result:?}");
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|event| matches!(event, GuestEvent::Log { message, .. }
            if message.contains("toolcage declined: its caller cannot ask the user"))),
        "{events:?}"
    );
}

#[tokio::test]
async fn everythings_question_is_forwarded_to_the_asker_or_declined() {
    let registry = registry_with(&everything()).await;
    let tool = "mcp__everything__trigger-elicitation-request";
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question);
        async { Elicitation::Accept(json!({ "name": "Ada Lovelace", "check": true })) }
    });
    let result = registry.call_with(tool, json!({}), options).await;
    assert!(!result.is_error, "{result:?}");
    assert!(
        result.output.contains("- Name: Ada Lovelace") && result.output.contains("terms: true"),
        "{}",
        result.output
    );
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, tool);
    assert_eq!(asked[0].schema["required"], json!(["name"]));

    let result = registry.call(tool, json!({})).await;
    assert!(result.output.contains("User declined"), "{}", result.output);
}

/// Set when dropped.
struct Dropped(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_question_waits_at_most_the_calls_timeout_and_a_scripts_reaches_the_asker() {
    let mut registry = builder().build().unwrap();
    for report in registry.load_bundled().await {
        assert_loaded(&report);
    }
    let server = hostile("h").timeout(Duration::from_secs(2));
    assert_loaded(&registry.load_mcp_server(&server).await);

    // Nobody answers: the question is dropped at the call's timeout, and
    // the server serves the next call.
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = dropped.clone();
    let options = CallOptions::new().on_elicitation(move |_| {
        let guard = Dropped(flag.clone());
        async move {
            let _guard = guard;
            std::future::pending::<Elicitation>().await
        }
    });
    let started = Instant::now();
    let result = registry.call_with("mcp__h__ask", json!({}), options).await;
    assert!(result.is_error || result.output == "cancel", "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "{result:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the question still waits"
    );
    let result = registry
        .call("mcp__h__echo", json!({ "text": "after" }))
        .await;
    assert_eq!(result.output, "after", "{result:?}");

    // A script's call of an upstream tool: its question goes to the asker
    // of the script's call, naming the upstream tool.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question.tool);
        async { Elicitation::Accept(json!({ "name": "Ada" })) }
    });
    let code = "(await mcp__h__ask())['output']";
    let result = registry
        .call_with("run_code", json!({ "code": code }), options)
        .await;
    assert!(!result.is_error, "{result:?}");
    assert_eq!(result.details.expect("details")["result"], "hello Ada");
    assert_eq!(*asked.lock().unwrap(), ["mcp__h__ask"]);
}

#[test]
fn the_cli_reaches_a_remote_server_and_its_token_shows_in_no_output_or_log() {
    const TOKEN: &str = "tok-cli-0123456789abcdef";
    let remote = remote();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolcage.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\nallow = [\"http://127.0.0.1:{port}\"]\n[secrets.token]\nenv = \"REMOTE_TOKEN\"\n[mcp_servers.r]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{ secrets.token }}}}\" }}\n",
            port = remote.port
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = toolcage()
            .arg("--config")
            .arg(&config)
            .args(["--no-bundled", "--log-level", "trace"])
            .args(args)
            .env("REMOTE_TOKEN", TOKEN)
            .output()
            .expect("toolcage runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "{stdout}\n{stderr}"
        );
        (output.status.success(), stdout)
    };
    let (ok, listed) = run(&["list"]);
    assert!(ok && listed.contains("mcp__r__authorization"), "{listed}");
    let (ok, shown) = run(&["inspect", "mcp__r__echo"]);
    assert!(ok && shown.contains("mcp:r"), "{shown}");
    let (ok, answer) = run(&["call", "mcp__r__authorization", "{}"]);
    assert!(ok && answer.contains("Bearer "), "{answer}");
    // The same server from the command line alone.
    let url = format!("r=http://127.0.0.1:{}/mcp", remote.port);
    let grant = format!("http://127.0.0.1:{}", remote.port);
    let output = toolcage()
        .args(["--no-bundled", "--allow-net", &grant, "--mcp-server", &url])
        .args(["call", "mcp__r__echo", r#"{"text": "flag"}"#])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "flag",
        "{output:?}"
    );
}

#[tokio::test]
async fn a_remote_servers_list_changed_swaps_its_tools_in_too() {
    let remote = remote();
    let port = remote.port;
    let base = builder()
        .allow_net(Grant::parse(&format!("http://127.0.0.1:{port}")).unwrap())
        .build()
        .unwrap();
    let live = LiveRegistry::from(base);
    let server = McpServer::http("r", &format!("http://127.0.0.1:{port}/mcp")).unwrap();
    assert!(live.load_mcp_server(&server).await.error.is_none());
    let mut changes = live.subscribe();
    let result = live
        .current()
        .call("mcp__r__change_tools", json!({ "add": true }))
        .await;
    assert_eq!(result.output, "changed", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    let result = live.current().call("mcp__r__added", json!({})).await;
    assert_eq!(result.output, "added", "{result:?}");
}

#[tokio::test]
async fn a_server_offers_at_most_its_cap_of_tools() {
    use toolcage::upstream::MAX_TOOLS_PER_SERVER;
    // 300 more tools than its own: refused whole, saying how to narrow it.
    let flooding = hostile("many").args(["many", "300"]);
    let mut registry = builder().build().unwrap();
    let report = registry.load_mcp_server(&flooding).await;
    let error = report.error.as_ref().expect("refused").to_string();
    assert!(
        error.contains(&format!("at most {MAX_TOOLS_PER_SERVER}"))
            && error.contains("`tools` or `exclude_tools`"),
        "{error}"
    );
    assert!(registry.tool("mcp__many__echo").is_none());

    // Narrowed by its patterns under the cap: it loads and serves.
    let narrowed = hostile("many")
        .args(["many", "300"])
        .exclude_tools(["many_2*"])
        .unwrap();
    let offered = registry.load_mcp_server(&narrowed).await;
    assert_loaded(&offered);
    assert!(offered.registered.len() <= MAX_TOOLS_PER_SERVER);
    let result = registry
        .call("mcp__many__echo", json!({ "text": "x" }))
        .await;
    assert_eq!(result.output, "x", "{result:?}");
}

#[tokio::test]
async fn a_list_grown_past_the_cap_keeps_the_tools_it_had() {
    let (live, _dir) = live_with(&hostile("h")).await;
    let mut changes = live.subscribe();
    let before = live.current().tools().len();

    // Within the cap: the new tools come in.
    let result = live
        .current()
        .call("mcp__h__grow", json!({ "count": 5 }))
        .await;
    assert_eq!(result.output, "grown", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert_eq!(live.current().tools().len(), before + 5);

    // Past it: no change, and the server's tools still answer.
    let result = live
        .current()
        .call("mcp__h__grow", json!({ "count": 400 }))
        .await;
    assert_eq!(result.output, "grown", "{result:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(changes.try_recv().is_err(), "no change past the cap");
    let registry = live.current();
    assert_eq!(registry.tools().len(), before + 5);
    assert!(registry.tool("mcp__h__many_004").is_some());
    let result = registry.call("mcp__h__echo", json!({ "text": "y" })).await;
    assert_eq!(result.output, "y", "{result:?}");
}
