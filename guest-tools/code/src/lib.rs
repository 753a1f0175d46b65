//! toolcage's code mode: `run_code` runs a model's Python script, in which
//! the tools the model could call directly are async functions, and only
//! what the script prints and returns goes back to the model. With it,
//! `search_tools` and `describe_tool`, which a script has too.
//!
//! The interpreter is pydantic's Monty, a Python subset written in Rust,
//! built into this component: an interpreter bug or abort is a trap of one
//! call. Each tool a script calls is a nested call on the host's one path
//! (`toolcage:tool/tools`): validated, checked against the operator's
//! rules, run in a sandbox of its own with its own grants, within the
//! budget of this call's tree. The script itself has no files, network,
//! environment or secrets. See `script` for what bounds it.

mod catalog;
mod prelude;
mod script;
mod session;
mod values;

use monty_types::MontyObject;
use script::{Ended, Report};
use serde_json::{Value, json};
use toolcage_code_mode::{DEFAULT_PRINT_KIB, DESCRIBE_TOOL, RUN_CODE, SEARCH_TOOLS};
use toolcage_guest::{Descriptor, Outcome, Tool, config, parse_args};

use catalog::Catalog;

/// The longest script, in bytes.
const MAX_CODE_BYTES: usize = 100_000;
/// How a script is written, for the model. The host appends the callable
/// tools' stubs.
pub const DESCRIPTION: &str = "Runs a Python script that calls tools as functions; only what it prints and its last expression's value come back. Use it to chain tool calls, or to filter, count or join their results, in one step.\n\
Language: Monty, a subset of Python 3 (functions, loops, comprehensions, f-strings, try/except; modules asyncio, json, re, math, datetime, collections, itertools, functools, typing, dataclasses). No class inheritance, no other modules, no files, network or environment: only the tools below reach the world, each under its own permissions.\n\
Tools are async and take keyword arguments: `r = await read_file(path=\"/a.txt\")`; `await asyncio.gather(...)` runs several at once. A failed call raises PermissionError (refused), ValueError (invalid arguments), NameError (no such tool), TimeoutError or RuntimeError (the tool failed, its kind in brackets). `await search_tools(query)` and `await describe_tool(name)` look tools up.\n\
End with an expression: its value is the result.\n\
Name a `session` to keep a run's globals for the next run of that name (yours alone, bounded, lapsing when idle).";

/// The longest session name.
const MAX_SESSION_NAME: usize = 64;

#[derive(serde::Deserialize)]
struct RunArgs {
    code: String,
    session: Option<String>,
}

/// `run_code`.
struct RunCode;

impl Tool for RunCode {
    fn descriptor() -> Descriptor {
        Descriptor::new(RUN_CODE, DESCRIPTION)
            .title("Run a Python script that calls tools")
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "description": "The Python script. Its last expression is the result.",
                        "minLength": 1,
                        "maxLength": MAX_CODE_BYTES
                    },
                    "session": {
                        "type": "string",
                        "description": "Starts from the globals the last run of this name left, and keeps this run's for the next. Omit for a run of its own.",
                        "pattern": "^[A-Za-z0-9_.-]+$",
                        "minLength": 1,
                        "maxLength": MAX_SESSION_NAME
                    }
                },
                "required": ["code"],
                "additionalProperties": false
            }))
            .output_schema(json!({
                "type": "object",
                "properties": {
                    "result": { "description": "The script's last expression, as JSON." },
                    "calls": {
                        "type": "array",
                        "description": "Every tool call the script made, in order.",
                        "items": { "type": "object" }
                    },
                    "error": {
                        "type": "object",
                        "description": "Why the script failed, when it did."
                    },
                    "session": {
                        "type": "object",
                        "description": "Whether the session was restored and saved, or why not."
                    }
                },
                "required": ["calls"]
            }))
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: RunArgs = parse_args(args)?;
        let code_text = args.code.clone();
        let catalog = Catalog::load();
        let session = args.session.as_deref();
        let report = script::run(args.code, &catalog, print_bytes()?, session);
        outcome(report, &code_text)
    }
}

/// The printed text kept per script: the `print_kib` setting, 64 KiB
/// unless the operator set another.
fn print_bytes() -> Result<usize, Outcome> {
    let setting = config::get("print_kib").map_err(|e| Outcome::text(e.to_string()))?;
    match setting {
        None => Ok((DEFAULT_PRINT_KIB as usize) << 10),
        Some(text) => text
            .trim()
            .parse::<usize>()
            .map(|kib| kib.saturating_mul(1024))
            .map_err(|_| Outcome::text(format!("the setting print_kib is `{text}`, not a number of KiB: the operator must fix it"))),
    }
}

/// What the model reads of a script's run.
fn outcome(report: Report, code: &str) -> Result<Outcome, Outcome> {
    let Report {
        ended,
        mut printed,
        log,
        unawaited,
        session,
    } = report;
    if unawaited > 0 {
        printed.push_str(&format!(
            "\n[{unawaited} tool call(s) were never awaited, so they did not run: tools are async, write `await tool(...)`.]\n"
        ));
    }
    let raised = matches!(ended, Ended::Raised { .. });
    if let Some(note) = session.as_ref().and_then(|kept| kept.note(raised)) {
        if !printed.is_empty() && !printed.ends_with('\n') {
            printed.push('\n');
        }
        printed.push_str(&note);
        printed.push('\n');
    }
    let with_session = |mut outcome: Outcome| {
        if let (Some(kept), Some(Value::Object(details))) = (&session, outcome.details.as_mut()) {
            details.insert("session".to_string(), kept.details());
        }
        outcome
    };
    outcome_of(ended, printed, log, code)
        .map(&with_session)
        .map_err(&with_session)
}

/// What the model reads of how a script ended.
fn outcome_of(
    ended: Ended,
    printed: String,
    log: Vec<Value>,
    code: &str,
) -> Result<Outcome, Outcome> {
    match ended {
        Ended::Value(value) => {
            let Ok(result) = values::to_json(&value) else {
                return Err(too_deep(printed, log));
            };
            let mut output = printed;
            if !matches!(value, MontyObject::None) {
                output.push_str(&result.to_string());
            }
            Ok(Outcome::text(output).with_details(json!({ "result": result, "calls": log })))
        }
        Ended::Raised { exception, kind } => {
            let mut output = printed;
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&exception.to_string());
            let frame = exception.traceback().last();
            let line = frame.map(|f| f.start.line);
            let source_line = line
                .and_then(|n| code.lines().nth((n as usize).saturating_sub(1)))
                .map(str::to_string);
            Err(Outcome::text(output).with_details(json!({
                "error": {
                    "kind": kind,
                    "type": exception.exc_type().to_string(),
                    "message": exception.message(),
                    "line": line,
                    "column": frame.map(|f| f.start.column),
                    "source_line": source_line,
                    "traceback": exception.to_string(),
                },
                "calls": log,
            })))
        }
    }
}

/// A script whose result nests too deep for the host: a script error of
/// its own, its printed text and its calls kept.
fn too_deep(mut output: String, log: Vec<Value>) -> Outcome {
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    let message = format!(
        "the script's result nests deeper than {} levels of lists and dicts, more than the host takes: return something flatter, or its json.dumps() text",
        values::MAX_DEPTH
    );
    output.push_str(&format!("ValueError: {message}"));
    Outcome::text(output).with_details(json!({
        "error": { "kind": "result_too_deep", "type": "ValueError", "message": message },
        "calls": log,
    }))
}

/// `search_tools`.
struct SearchTools;

#[derive(serde::Deserialize)]
struct SearchArgs {
    query: String,
}

impl Tool for SearchTools {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            SEARCH_TOOLS,
            "Finds the tools a `run_code` script can call: those whose name or description holds every word of the query, best first, each with a one-line summary. Then `describe_tool` shows one's Python signature. To reuse what a script fetched in a later script, give both `run_code` calls the same `session`.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": { "query": { "type": "string", "description": "Words to look for, e.g. \"read file\"." } },
            "required": ["query"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: SearchArgs = parse_args(args)?;
        let found = Catalog::load().search(&args.query);
        let lines: Vec<String> = found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["summary"].as_str().map(str::to_string))
            .collect();
        let text = match lines.is_empty() {
            true => format!("No callable tool matches `{}`.", args.query),
            false => lines.join("\n"),
        };
        Ok(Outcome::text(text).with_details(json!({ "tools": found })))
    }
}

/// `describe_tool`.
struct DescribeTool;

#[derive(serde::Deserialize)]
struct DescribeArgs {
    name: String,
}

impl Tool for DescribeTool {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            DESCRIBE_TOOL,
            "Shows how a `run_code` script calls one tool: its Python signature, with argument and result types and its documentation. A script's globals last to its next run only when both name the same `session` (a `run_code` argument).",
        )
        .input_schema(json!({
            "type": "object",
            "properties": { "name": { "type": "string", "description": "The tool's name." } },
            "required": ["name"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: DescribeArgs = parse_args(args)?;
        let catalog = Catalog::load();
        match catalog.describe(&args.name) {
            Some(stub) => Ok(Outcome::text(stub)),
            None => Err(Outcome::text(format!(
                "No tool a script can call is named `{}`. Callable tools: {}.",
                args.name,
                catalog.names().join(", ")
            ))),
        }
    }
}

toolcage_guest::export_tools!(RunCode, SearchTools, DescribeTool);
