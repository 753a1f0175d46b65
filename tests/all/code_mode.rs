//! Code mode: `run_code` runs a model's Python script in the real
//! interpreter component (Monty, built from source), and every tool the
//! script calls is a nested call on the one path, under the operator's
//! rules and the callee's grants. Hostile scripts each end in an error of
//! their own kind, and the host keeps serving.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcage::agent::{Approval, ApprovalRequest, Format, LiveRules, Permission, Permissions};
use toolcage::code_mode::{self, CodeMode};
use toolcage::{
    Arguments, CallOptions, CallPolicy, CallResult, CancelToken, ErrorKind, LimitOverrides, Limits,
    Mount, NestedEvent, Registry, RegistryBuilder,
};
use toolcage_tests::{assert_loaded, builder, guests, quick_limits};

/// The bundled tools (code mode on, as `code_mode` says), `echo` beside
/// them, and a tree of text files mounted at `/workspace`.
async fn code_registry(build: RegistryBuilder, tree: &Path) -> Registry {
    let mut registry = build
        .mount(Mount::read_only(tree, "/workspace"))
        .build()
        .expect("the registry builds");
    for report in registry.load_bundled().await {
        assert_loaded(&report);
    }
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
    registry
}

/// A tree of `n` small text files, two lines each, the second holding
/// "needle"; and one more under `sub/`.
fn tree(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        let text = format!("file {i} says alpha beta gamma\nthe needle is here, line two\n");
        std::fs::write(dir.path().join(format!("f{i:02}.txt")), text).unwrap();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/deep.txt"), "a needle deep down\n").unwrap();
    dir
}

async fn script(registry: &Registry, code: &str) -> CallResult {
    registry.call("run_code", json!({ "code": code })).await
}

async fn script_with(registry: &Registry, code: &str, options: CallOptions) -> CallResult {
    registry
        .call_with("run_code", json!({ "code": code }), options)
        .await
}

fn details(result: &CallResult) -> &Value {
    result.details.as_ref().expect("run_code has details")
}

/// A script that failed, and why, as its details say.
fn failed<'r>(result: &'r CallResult, kind: &str) -> &'r Value {
    assert!(result.is_error, "{}", result.output);
    let error = &details(result)["error"];
    assert_eq!(error["kind"], kind, "{}", result.output);
    error
}

fn ok(result: &CallResult) -> &Value {
    assert!(!result.is_error, "{}", result.output);
    &details(result)["result"]
}

const CHAIN: &str = r#"import asyncio
found = await glob(pattern="**/*.txt", path="/workspace")
paths = found["matches"]
texts = await asyncio.gather(*[read_file(path=p) for p in paths])
words = sum(len(t["output"].split()) for t in texts)
hits = await grep(pattern="needle", path="/workspace")
{"files": len(paths), "words": words, "needles": hits["match_count"]}"#;

#[tokio::test]
async fn a_script_chains_glob_read_and_grep_and_returns_only_its_summary() {
    let dir = tree(6);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    let result = script(&registry, CHAIN).await;
    assert_eq!(
        ok(&result),
        &json!({ "files": 7, "words": 6 * 12 + 4, "needles": 7 })
    );
    // The model reads the summary, not the files.
    assert_eq!(result.output, r#"{"files":7,"words":76,"needles":7}"#);
    assert!(!result.output.contains("alpha"));
    // The log: every nested call, in order, each ok.
    let calls = details(&result)["calls"].as_array().unwrap();
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    let mut expected = vec!["glob"];
    expected.extend(["read_file"; 7]);
    expected.push("grep");
    assert_eq!(tools, expected);
    assert!(
        calls
            .iter()
            .all(|c| c["ok"] == true && c["arguments_bytes"].as_u64() > Some(0))
    );
    // The host lists the same calls, children of the script's call.
    assert_eq!(result.nested.len(), 9);
    assert!(
        result
            .nested
            .iter()
            .all(|n| n.parent_call_id == result.call_id && n.depth == 1)
    );
    assert_eq!(result.nested_usage.unwrap().calls, 9);
}

#[tokio::test]
async fn run_codes_description_lists_the_callable_tools_as_stubs_that_parse() {
    let dir = tree(1);
    let mut registry = code_registry(builder(), dir.path()).await;
    for fixture in [
        guests::FIXTURE_SCHEMA_ZOO,
        guests::FIXTURE_COMPOSER,
        guests::FIXTURE_SETTINGS,
    ] {
        assert_loaded(&registry.load_file(fixture).await);
    }
    let everyone = Permissions::allow_all();
    let stubs = code_mode::python_stubs(&registry, &everyone, code_mode::Detail::Full);
    for tool in [
        "read_file",
        "grep",
        "calc",
        "fetch",
        "echo",
        "zoo",
        "compose",
    ] {
        assert!(
            stubs.contains(&format!("async def {tool}(")),
            "{tool}: {stubs}"
        );
    }
    for own in ["run_code", "search_tools", "describe_tool"] {
        assert!(
            !stubs.contains(&format!("def {own}(")),
            "{own} is not callable"
        );
    }
    assert_parses(&stubs);
    // As the model sees it, in every format.
    let description = code_mode::run_code_description(&registry, &everyone);
    assert!(
        description.contains("```python\nfrom typing import"),
        "{description}"
    );
    for format in [
        Format::OpenAi,
        Format::OpenAiResponses,
        Format::Anthropic,
        Format::Mcp,
    ] {
        let definitions = toolcage::agent::definitions(&registry, &everyone, format);
        let text = definitions.to_string();
        assert!(text.contains("async def read_file("), "{format:?}");
    }
}

/// Parses `stubs` with CPython's `ast.parse`, failing on any error.
fn assert_parses(stubs: &str) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), stubs).unwrap();
    let out = std::process::Command::new("python3")
        .args(["-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())"])
        .arg(file.path())
        .output()
        .expect("python3 runs (the tests need it)");
    assert!(
        out.status.success(),
        "{}\n{stubs}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_large_catalog_is_listed_one_line_per_tool_and_searched_from_a_script() {
    let dir = tree(1);
    // 40 more tools: past the stubs' cap.
    let many = builder().component_setting("fixture_many_tools", "count", "40");
    let mut registry = code_registry(many, dir.path()).await;
    assert_loaded(&registry.load_file(guests::FIXTURE_MANY_TOOLS).await);
    let everyone = Permissions::allow_all();
    let callable = code_mode::callable(&registry, &everyone).len();
    assert!(callable > code_mode::MAX_LISTED_STUBS, "{callable}");
    let description = code_mode::run_code_description(&registry, &everyone);
    assert!(!description.contains("```python"), "{description}");
    assert!(description.contains(&format!(
        "The {callable} tools a script can call, one line each"
    )));
    assert!(
        description.contains("\nread_file(path, limit=None, offset=None) - "),
        "{description}"
    );
    let result = script(
        &registry,
        "found = await search_tools(\"read file\")\nstub = await describe_tool(found[0][\"name\"])\n[found[0][\"name\"], stub]",
    )
    .await;
    let value = ok(&result);
    assert_eq!(value[0], "read_file");
    assert!(
        value[1]
            .as_str()
            .unwrap()
            .contains("async def read_file(\n    *,\n    path: str,"),
        "{value}"
    );
    // A search returns at most 20 tools: here 40 match.
    let found = script(&registry, "len(await search_tools(\"one of many\"))").await;
    assert_eq!(ok(&found), 20);
    let found = script(&registry, "len(await search_tools(\"tool_39\"))").await;
    assert_eq!(ok(&found), 1);
}

#[tokio::test]
async fn a_denied_tool_is_neither_listed_nor_callable() {
    let dir = tree(1);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    let rules = Permissions::allow_all()
        .rule("write_*", Permission::Deny)
        .unwrap();
    let listed: Vec<&str> = code_mode::callable(&registry, &rules)
        .iter()
        .map(|info| info.descriptor.name.as_str())
        .collect();
    assert!(
        listed.contains(&"read_file") && !listed.contains(&"write_file"),
        "{listed:?}"
    );
    assert!(
        !code_mode::python_stubs(&registry, &rules, code_mode::Detail::Brief)
            .contains("def write_file(")
    );
    let options = CallOptions::new().policy(CallPolicy::new(rules));
    let result = script_with(
        &registry,
        "await write_file(path=\"/workspace/x\", content=\"x\")",
        options,
    )
    .await;
    let error = failed(&result, "runtime_error");
    assert_eq!(error["type"], "NameError");
    assert!(
        result
            .output
            .contains("name 'write_file' is not defined. Callable tools: "),
        "{}",
        result.output
    );
    assert!(result.nested.is_empty(), "nothing ran");
}

#[tokio::test]
async fn two_tools_one_python_spelling_each_answer_to_their_own_identifier() {
    // `a-b` and `a_b`: the stubs, describe_tool and the calls agree that
    // `a_b` is `a_b` and `a-b` is `a_b_2`; with `a_b` denied, calling
    // `a_b` is a NameError, never `a-b`.
    let dir = tree(1);
    let named = builder().component_setting("fixture_many_tools", "names", "a-b,a_b");
    let mut registry = code_registry(named, dir.path()).await;
    assert_loaded(&registry.load_file(guests::FIXTURE_MANY_TOOLS).await);
    let everyone = Permissions::allow_all();
    let stubs = code_mode::python_stubs(&registry, &everyone, code_mode::Detail::Brief);
    assert!(
        stubs.contains("async def a_b(") && stubs.contains("# the tool \"a-b\"\nasync def a_b_2("),
        "{stubs}"
    );
    let code = "[await a_b(), await a_b_2(), await describe_tool(\"a-b\")]";
    let value = ok(&script(&registry, code).await).clone();
    assert_eq!(
        (&value[0], &value[1]),
        (&json!("a_b"), &json!("a-b")),
        "{value}"
    );
    assert!(value[2].as_str().unwrap().contains("def a_b_2("), "{value}");

    let rules = Permissions::allow_all()
        .rule("a_b", Permission::Deny)
        .unwrap();
    let options = CallOptions::new().policy(CallPolicy::new(rules.clone()));
    let result = script_with(&registry, "await a_b()", options).await;
    let error = failed(&result, "runtime_error");
    assert_eq!(error["type"], "NameError", "{}", result.output);
    assert!(result.nested.is_empty(), "nothing ran: {:?}", result.nested);
    let stubs = code_mode::python_stubs(&registry, &rules, code_mode::Detail::Brief);
    assert!(
        stubs.contains("async def a_b_2(") && !stubs.contains("async def a_b("),
        "{stubs}"
    );
}

#[tokio::test]
async fn code_mode_narrowed_or_off() {
    let dir = tree(1);
    let narrow = builder().code_mode(CodeMode::default().tools(["calc", "ec*"]));
    let registry = code_registry(narrow, dir.path()).await;
    let everyone = Permissions::allow_all();
    let listed: Vec<&str> = code_mode::callable(&registry, &everyone)
        .iter()
        .map(|info| info.descriptor.name.as_str())
        .collect();
    assert_eq!(listed, ["calc", "echo"]);
    let result = script(&registry, "await calc(expression=\"6 * 7\")").await;
    assert_eq!(ok(&result)["result"], 42.0);
    let result = script(&registry, "await read_file(path=\"/workspace/f00.txt\")").await;
    assert_eq!(failed(&result, "runtime_error")["type"], "NameError");
    assert!(
        result.output.contains("Callable tools: calc, echo."),
        "{}",
        result.output
    );

    let registry = code_registry(builder().code_mode(CodeMode::off()), dir.path()).await;
    assert!(registry.tool("run_code").is_none());
    assert!(registry.tool("search_tools").is_none());
    assert!(registry.tool("read_file").is_some());
    assert!(code_mode::callable(&registry, &everyone).is_empty());
}

#[tokio::test]
async fn ask_inside_a_script_is_asked_for_each_nested_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = builder()
        .limits(quick_limits())
        .mount(Mount::read_write(dir.path(), "/out"))
        .build()
        .unwrap();
    registry.load_bundled().await.iter().for_each(assert_loaded);
    let asks = Permissions::allow_all()
        .rule("write_file", Permission::Ask)
        .unwrap();
    let code = r#"
wrote = []
for name in ["yes.txt", "no.txt"]:
    try:
        await write_file(path="/out/" + name, content="hi")
        wrote.append(name)
    except PermissionError as e:
        wrote.append("refused " + name)
wrote"#;
    // With no one to ask, each is refused, saying so.
    let options = CallOptions::new().policy(CallPolicy::new(asks.clone()));
    let result = script_with(&registry, code, options).await;
    assert_eq!(ok(&result), &json!(["refused yes.txt", "refused no.txt"]));
    let log = &details(&result)["calls"];
    assert_eq!(log[0]["error_kind"], "permission_denied");
    let refused = script_with(
        &registry,
        "await write_file(path=\"/out/a\", content=\"x\")",
        CallOptions::new().policy(CallPolicy::new(asks.clone())),
    )
    .await;
    failed(&refused, "tool_refused");
    assert!(
        refused.output.contains("no one can approve"),
        "{}",
        refused.output
    );
    // With an approver: asked once per nested call, naming it.
    let asked: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let noted = asked.clone();
    let policy = CallPolicy::new(asks).approver(move |request: ApprovalRequest| {
        let approve = request.arguments["path"] == "/out/yes.txt";
        noted.lock().unwrap().push(request);
        async move {
            match approve {
                true => Approval::Approve,
                false => Approval::Refuse { reason: None },
            }
        }
    });
    let result = script_with(&registry, code, CallOptions::new().policy(policy)).await;
    assert_eq!(ok(&result), &json!(["yes.txt", "refused no.txt"]));
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2, "one question per nested call");
    for (request, name) in asked.iter().zip(["yes.txt", "no.txt"]) {
        assert_eq!(request.tool, "write_file");
        assert_eq!(request.caller.as_deref(), Some("run_code"));
        assert_eq!(
            request.arguments,
            json!({ "path": format!("/out/{name}"), "content": "hi" })
        );
    }
    assert!(dir.path().join("yes.txt").exists());
    assert!(!dir.path().join("no.txt").exists());
}

#[tokio::test]
async fn tool_errors_reach_the_script_as_exceptions_it_can_catch() {
    let dir = tree(1);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    // A tool's failure: caught.
    let result = script(
        &registry,
        "try:\n    await read_file(path=\"/workspace/missing.txt\")\nexcept RuntimeError as e:\n    r = str(e)\nr",
    )
    .await;
    let caught = ok(&result).as_str().unwrap();
    assert!(
        caught.starts_with("read_file failed (tool_error): "),
        "{caught}"
    );
    // Uncaught, with a traceback into the script.
    let result = script(
        &registry,
        "x = 1\nawait read_file(path=\"/workspace/missing.txt\")",
    )
    .await;
    let error = failed(&result, "tool_error");
    assert_eq!(error["line"], 2);
    assert_eq!(
        error["source_line"],
        "await read_file(path=\"/workspace/missing.txt\")"
    );
    assert!(
        result.output.contains("File \"script.py\", line 2"),
        "{}",
        result.output
    );
    // Invalid arguments: every complaint.
    let result = script(&registry, "await read_file(pth=\"/x\", limit=0)").await;
    let error = failed(&result, "invalid_arguments");
    assert_eq!(error["type"], "ValueError");
    for complaint in [
        "'pth' was unexpected",
        "\"path\" is a required property",
        "limit",
    ] {
        assert!(
            result.output.contains(complaint),
            "{complaint}: {}",
            result.output
        );
    }
    // Positional arguments: a TypeError naming the form that works.
    let result = script(&registry, "await calc(\"1 + 1\")").await;
    assert!(
        result
            .output
            .contains("calc() takes keyword arguments only"),
        "{}",
        result.output
    );
    // An unknown function: the callable tools.
    let result = script(&registry, "await nosuch(x=1)").await;
    assert_eq!(failed(&result, "runtime_error")["type"], "NameError");
    assert!(
        result.output.contains(
            "Callable tools: bad_details, calc, counter, echo, edit_file, fail, fetch, glob"
        ),
        "{}",
        result.output
    );
    // A syntax error: where.
    let result = script(&registry, "x = 1\ny = (2 +\n").await;
    let error = failed(&result, "syntax_error");
    assert_eq!(error["type"], "SyntaxError");
    assert!(error["line"].as_u64().is_some());
    // A call never awaited never ran, and the result says so.
    let result = script(&registry, "calc(expression=\"1\")\n2").await;
    assert_eq!(ok(&result), 2);
    assert!(
        result.output.contains("1 tool call(s) were never awaited"),
        "{}",
        result.output
    );
    assert!(result.nested.is_empty());
}

#[tokio::test]
async fn hostile_scripts_each_end_in_an_error_of_their_own_and_the_host_serves_on() {
    let dir = tree(2);
    let limits = Limits {
        nested_calls: 50,
        ..quick_limits()
    };
    let registry = code_registry(builder().limits(limits), dir.path()).await;
    let result = script(&registry, "while True:\n    pass").await;
    assert!(
        matches!(
            result.error_kind,
            Some(ErrorKind::OutOfFuel | ErrorKind::Timeout)
        ),
        "{:?}: {}",
        result.error_kind,
        result.output
    );
    let result = script(&registry, "x = \"a\" * (10 ** 9)\nlen(x)").await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::MemoryLimit),
        "{}",
        result.output
    );
    let result = script(&registry, "def f(n):\n    return f(n + 1)\nf(0)").await;
    failed(&result, "recursion_depth");
    assert!(result.output.contains("RecursionError"));
    let result = script(
        &registry,
        "for i in range(10 ** 6):\n    print(\"x\" * 100)",
    )
    .await;
    failed(&result, "print_limit");
    assert!(
        result.output.len() < (64 << 10) + 4096,
        "{}",
        result.output.len()
    );
    let result = script(
        &registry,
        "for i in range(10000):\n    try:\n        await calc(expression=\"1\")\n    except Exception:\n        pass",
    )
    .await;
    failed(&result, "nested_calls");
    let log = details(&result)["calls"].as_array().unwrap();
    assert_eq!(
        log.len(),
        51,
        "the 51st was refused, and the script stopped"
    );
    assert_eq!(log[50]["error_kind"], "nested_limit");
    assert_eq!(result.nested_usage.unwrap().calls, 50);
    let result = script(&registry, "await run_code(code=\"1\")").await;
    assert!(
        result.output.contains("A script cannot run a script"),
        "{}",
        result.output
    );
    for (code, message) in [
        (
            "import os\nos.getenv(\"HOME\")",
            "os.getenv: a script has no files",
        ),
        ("open(\"/etc/passwd\")", "a script has no files"),
        ("__import__(\"os\")", "name '__import__' is not defined"),
    ] {
        let result = script(&registry, code).await;
        assert!(
            result.is_error && result.output.contains(message),
            "{code}: {}",
            result.output
        );
    }
    // Source that is not UTF-8 never reaches the interpreter...
    let result = registry
        .call("run_code", Arguments::Json(r#"{"code": "\ud800"}"#.into()))
        .await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::InvalidArguments),
        "{}",
        result.output
    );
    // ...and neither does 1 MB of it.
    let huge = "x = 1\n".repeat((1 << 20) / 6);
    let result = script(&registry, &huge).await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::InvalidArguments),
        "{}",
        result.output
    );
    assert!(
        result.output.contains("longer than 100000"),
        "{}",
        result.output
    );
    // The host is unharmed.
    assert_eq!(ok(&script(&registry, "1 + 1").await), 2);
}

#[tokio::test]
async fn budgets_obeyed_and_breached() {
    let dir = tree(1);
    // Printed text: 1 KiB kept.
    let small = builder()
        .limits(quick_limits())
        .code_mode(CodeMode::default().print_kib(1));
    let registry = code_registry(small, dir.path()).await;
    let result = script(&registry, "print(\"x\" * 1000)\n1").await;
    assert_eq!(ok(&result), 1);
    let result = script(&registry, "print(\"x\" * 2000)\n1").await;
    failed(&result, "print_limit");
    // One print far past a larger cap is the print cap's breach too, not
    // the interpreter's memory.
    let sixteen = builder()
        .limits(quick_limits())
        .code_mode(CodeMode::default().print_kib(16));
    let registry_16 = code_registry(sixteen, dir.path()).await;
    let result = script(&registry_16, "print(\"z\" * 10 ** 7)\n1").await;
    failed(&result, "print_limit");
    let result = script(&registry_16, "print(\"z\" * 16000)\n1").await;
    assert_eq!(ok(&result), 1);
    // Nested calls per script: the `code` component's own limit.
    let three = builder().limits(quick_limits()).component_limits(
        "code",
        LimitOverrides {
            nested_calls: Some(3),
            ..LimitOverrides::default()
        },
    );
    let registry = code_registry(three, dir.path()).await;
    let calls = |n: usize| format!("for i in range({n}):\n    await calc(expression=\"1\")\n{n}");
    assert_eq!(ok(&script(&registry, &calls(3)).await), 3);
    failed(&script(&registry, &calls(4)).await, "nested_calls");
    // The script's deadline is its nested calls' too: a second for the
    // script, two for `echo`.
    let second = builder().limits(quick_limits()).component_limits(
        "code",
        LimitOverrides {
            timeout: Some(Duration::from_secs(1)),
            ..LimitOverrides::default()
        },
    );
    let registry = code_registry(second, dir.path()).await;
    let result = script(&registry, "await echo(text=\"z\", sleep_ms=500)\n1").await;
    assert_eq!(ok(&result), 1);
    let started = Instant::now();
    let result = script(&registry, "await echo(text=\"z\", sleep_ms=1800)\n1").await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::Timeout),
        "{}",
        result.output
    );
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

#[tokio::test]
async fn gathered_read_only_calls_run_at_once() {
    let dir = tree(1);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    let code = "import asyncio\nr = await asyncio.gather(*[echo(text=str(i), sleep_ms=300) for i in range(4)])\n[x[\"output\"] for x in r]";
    let started = Instant::now();
    let result = script(&registry, code).await;
    let took = started.elapsed();
    assert_eq!(ok(&result), &json!(["0", "1", "2", "3"]));
    assert!(took < Duration::from_millis(1_000), "{took:?}");
    // Awaited in turn, they take their time one after another.
    let code = "r = []\nfor i in range(4):\n    r.append((await echo(text=str(i), sleep_ms=300))[\"output\"])\nr";
    let started = Instant::now();
    assert_eq!(
        ok(&script(&registry, code).await),
        &json!(["0", "1", "2", "3"])
    );
    assert!(started.elapsed() >= Duration::from_millis(1_200));
}

#[tokio::test]
async fn cancelling_a_script_stops_it_and_its_sleeping_call_at_once() {
    let dir = tree(1);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    let token = CancelToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let result = script_with(
        &registry,
        "await echo(text=\"z\", sleep_ms=1900)\n1",
        CallOptions::new().cancel_token(token),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        result.output
    );
    assert!(took < Duration::from_millis(700), "{took:?}");
    assert_eq!(ok(&script(&registry, "1 + 1").await), 2);
}

#[tokio::test]
async fn a_component_named_code_from_a_directory_gets_none_of_code_modes_grant() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_COMPOSER, dir.path().join("code.wasm")).unwrap();
    let mut registry = builder().limits(quick_limits()).build().unwrap();
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
    let reports = registry.load_dir(dir.path()).await.unwrap();
    assert_loaded(&reports[0]);
    assert_eq!(reports[0].component, "code");
    let calls = json!({ "calls": [{ "tool": "echo", "arguments": { "text": "x" } }] });
    let result = registry.call("compose", calls).await;
    assert!(!result.is_error, "{}", result.output);
    let seen = &result.details.as_ref().unwrap()["results"][0];
    assert_eq!(seen["error_kind"], "permission_denied", "{seen}");
}

/// A result nested deeper than the host reads is the script's own error,
/// `result_too_deep`, with its log of calls kept (issue 52, item 4); one
/// level less comes back whole.
#[tokio::test]
async fn a_result_too_deep_keeps_the_log() {
    let dir = tree(1);
    let registry = code_registry(builder().limits(quick_limits()), dir.path()).await;
    let nest = |levels: usize| {
        format!(
            "await calc(expression=\"1 + 1\")\nx = 1\nfor i in range({levels}):\n    x = [x]\nx"
        )
    };
    let result = script(&registry, &nest(131)).await;
    let error = failed(&result, "result_too_deep");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("deeper than 100"),
        "{error}"
    );
    let calls = details(&result)["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the calc call is in the script's log");
    assert_eq!(result.nested.len(), 1, "and in the host's record");
    let result = script(&registry, &nest(99)).await;
    let mut value = ok(&result);
    for _ in 0..99 {
        value = &value[0];
    }
    assert_eq!(value, 1);
}

/// A registry of the bundled tools with `/out` writable, under `limits`.
async fn writing_registry(dir: &Path, limits: Limits) -> Registry {
    let mut registry = builder()
        .limits(limits)
        .mount(Mount::read_write(dir, "/out"))
        .build()
        .unwrap();
    registry.load_bundled().await.iter().for_each(assert_loaded);
    registry
}

#[tokio::test]
async fn a_call_never_awaited_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let registry = writing_registry(dir.path(), quick_limits()).await;
    let code = r#"x = write_file(path="/out/x.txt", content="x")
plan = [write_file(path="/out/a.txt", content="a"), write_file(path="/out/b.txt", content="b")]
await plan[0]
await calc(expression="1+1")
"done""#;
    let result = script(&registry, code).await;
    assert_eq!(ok(&result), "done");
    assert!(dir.path().join("a.txt").exists(), "the awaited call ran");
    assert!(!dir.path().join("x.txt").exists(), "never awaited");
    assert!(!dir.path().join("b.txt").exists(), "never awaited");
    let tools: Vec<&Value> = details(&result)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| &call["tool"])
        .collect();
    assert_eq!(tools, ["write_file", "calc"]);
    assert_eq!(result.nested.len(), 2, "{:?}", result.nested);
    assert!(
        result.output.contains("2 tool call(s) were never awaited"),
        "{}",
        result.output
    );
    // A wrong call still raises where it is made, awaited or not.
    let result = script(
        &registry,
        "try:\n    write_file(\"/out/p\")\nexcept TypeError as e:\n    r = str(e)\nr",
    )
    .await;
    assert!(
        ok(&result)
            .as_str()
            .unwrap()
            .contains("keyword arguments only"),
        "{}",
        result.output
    );
    assert!(!dir.path().join("p").exists());
}

#[tokio::test]
async fn a_breach_stops_the_rest_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        nested_bytes: 2 << 10,
        ..quick_limits()
    };
    let registry = writing_registry(dir.path(), limits).await;
    let code = r#"import asyncio
await asyncio.gather(write_file(path="/out/a.txt", content="a" * 3000), write_file(path="/out/b.txt", content="b"))"#;
    let result = script(&registry, code).await;
    failed(&result, "nested_calls");
    assert!(!dir.path().join("a.txt").exists());
    assert!(!dir.path().join("b.txt").exists(), "after the breach");
    let log = details(&result)["calls"].as_array().unwrap().clone();
    assert_eq!(
        log.len(),
        result.nested.len(),
        "{log:?} {:?}",
        result.nested
    );
    assert!(
        log.iter().all(|call| call["error_kind"] == "nested_limit"),
        "{log:?}"
    );
    assert!(
        result
            .nested
            .iter()
            .all(|call| call.error_kind == Some(ErrorKind::NestedLimit))
    );
    // Within the budget, both run.
    let code = r#"import asyncio
await asyncio.gather(write_file(path="/out/a.txt", content="a"), write_file(path="/out/b.txt", content="b"))
1"#;
    assert_eq!(ok(&script(&registry, code).await), 1);
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
}

#[tokio::test]
async fn rules_changed_while_a_script_runs_refuse_its_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let registry = writing_registry(dir.path(), quick_limits()).await;
    let rules = LiveRules::new(Permissions::allow_all());
    let changed = rules.clone();
    // The rules deny write_file once the first nested call has ended.
    let options = CallOptions::new()
        .policy(CallPolicy::following(rules))
        .on_nested(move |event| {
            if let NestedEvent::Result { .. } = event {
                changed.set(
                    Permissions::allow_all()
                        .rule("write_file", Permission::Deny)
                        .unwrap(),
                );
            }
        });
    let code = r#"wrote = 0
refused = 0
for i in range(5):
    try:
        await write_file(path=f"/out/{i}.txt", content="x")
        wrote += 1
    except PermissionError:
        refused += 1
[wrote, refused]"#;
    let result = script_with(&registry, code, options).await;
    assert_eq!(ok(&result), &json!([1, 4]), "{}", result.output);
    assert!(dir.path().join("0.txt").exists());
    assert!(!dir.path().join("1.txt").exists());
    // Fixed rules stay those the call started with.
    let fixed = LiveRules::new(Permissions::allow_all());
    let options = CallOptions::new()
        .policy(CallPolicy::new(fixed.current()))
        .on_nested(move |_| fixed.set(Permissions::deny_all()));
    let result = script_with(&registry, code.replace("/out/", "/out/f").as_str(), options).await;
    assert_eq!(ok(&result), &json!([5, 0]), "{}", result.output);
}
