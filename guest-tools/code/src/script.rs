//! One script's run: Monty's loop of suspensions, each answered here.
//!
//! Threat model: the script is the model's, and may be wrong or hostile.
//! It reaches nothing but the tools the catalog lists, each call a real
//! call on the host's path with the callee's own grants. A name it has not
//! defined resolves only to a callable tool (or `search_tools` /
//! `describe_tool`), each a function of the prelude (see `prelude`); files,
//! the environment and the clock raise. Every tool is async: a call checks
//! its arguments and returns a coroutine, which runs only when awaited, and
//! the calls a script awaits together (`asyncio.gather`) go to the host as
//! one batch, which the host runs at once when every tool in it is
//! read-only. What bounds a script: the host's fuel, memory and time for
//! this call (shared with the calls it makes), the tree's nested-call
//! budget (a breach ends the script, and the host starts no later call of
//! its batch), the recursion depth, and `print_bytes` of printed text.

use std::time::Instant;

use monty::{MontyRepl, ReplProgress};

use crate::session::{self, Opened};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult,
    PrintWriter, ResourceLimits, ResourceTracker,
};
use serde_json::{Value, json};
use toolcage_code_mode::{DESCRIBE_TOOL, RUN_CODE, SEARCH_TOOLS};
use toolcage_guest::tools::{self, CallResult};

use crate::catalog::Catalog;
use crate::prelude;
use crate::values::{arguments, from_json, positional};

/// The deepest a script's own functions may recurse.
pub const MAX_RECURSION: usize = 200;
/// The script's file name, in its tracebacks.
pub const SCRIPT: &str = "script.py";

/// How a script ended.
pub enum Ended {
    /// It completed with this value (its last expression's).
    Value(MontyObject),
    /// It raised, and nothing caught it; `kind` names why, for the model
    /// and an auditor.
    Raised {
        exception: MontyException,
        kind: &'static str,
    },
}

/// A script's run: how it ended, what it printed, what it called.
pub struct Report {
    pub ended: Ended,
    pub printed: String,
    /// One entry per tool call that ran.
    pub log: Vec<Value>,
    /// Tool calls the script made but never awaited: they did not run.
    pub unawaited: usize,
    /// What became of its session, when it named one.
    pub session: Option<session::Kept>,
}

/// Runs `code` against `catalog`, keeping at most `print_bytes` printed,
/// in the session named `session` (its globals those the last run of it
/// left, and saved for the next) or, without one, afresh.
pub fn run(code: String, catalog: &Catalog, print_bytes: usize, session: Option<&str>) -> Report {
    let opened = match session {
        Some(name) => session::open(name),
        None => Opened::fresh(),
    };
    let repl = opened.repl.unwrap_or_else(fresh);
    let mut printed = String::new();
    let mut state = State {
        catalog,
        log: Vec::new(),
        queued: Vec::new(),
        failure: None,
        made: 0,
        started: 0,
    };
    let (repl, ended) = state.drive(repl, code, &mut printed, print_bytes);
    let ended = match ended {
        Ok(value) => Ended::Value(value),
        Err((exception, kind)) => {
            let exception = as_script(exception);
            let kind = kind.unwrap_or_else(|| state.classify(&exception, &printed, print_bytes));
            Ended::Raised { exception, kind }
        }
    };
    let session = session.map(|name| session::keep(name, opened.restored, &repl));
    Report {
        ended,
        printed,
        log: state.log,
        unawaited: state.made.saturating_sub(state.started),
        session,
    }
}

/// A new interpreter, under the limits every script runs under.
fn fresh() -> MontyRepl {
    MontyRepl::new(SCRIPT, tracker(), CompileOptions::default())
}

/// What bounds a script's interpreter: its recursion depth (the host's
/// fuel, memory and time bound the rest).
pub fn tracker() -> ResourceTracker {
    ResourceTracker::new(ResourceLimits {
        max_recursion_depth: MAX_RECURSION,
        ..ResourceLimits::default()
    })
}

/// `exception` as the script's author sees it: its frames in the prelude
/// (the tool functions) left out, and the script's named `script.py`
/// rather than the snippet name the interpreter gave it.
fn as_script(mut exception: MontyException) -> MontyException {
    let traceback = exception
        .traceback()
        .iter()
        .filter(|frame| !is_prelude(&frame.filename))
        .cloned()
        .map(|mut frame| {
            frame.filename = SCRIPT.to_string();
            frame
        })
        .collect();
    let data = exception.take_data();
    let message = exception.message().map(str::to_string);
    MontyException::with_traceback(exception.exc_type(), message, traceback).with_data(data)
}

/// Whether `filename` is a prelude's. Monty names a REPL's snippets
/// `<python-input-N>`, and each run feeds two: its prelude, then its
/// script; so in a session too, the preludes are the even ones.
fn is_prelude(filename: &str) -> bool {
    let number = filename
        .strip_prefix("<python-input-")
        .and_then(|rest| rest.strip_suffix('>'))
        .and_then(|n| n.parse::<u64>().ok());
    number.is_some_and(|n| n % 2 == 0)
}

/// A call the script made, waiting for it to await.
struct Queued {
    id: u32,
    work: Work,
}

enum Work {
    /// A tool's call, not sent yet.
    Tool { name: String, arguments: Value },
    /// Answered already (`search_tools`, `describe_tool`, a refusal).
    Done(ExtFunctionResult),
}

/// The last error a tool call raised into the script, to tell an uncaught
/// one from the script's own.
struct Failure {
    exc_type: ExcType,
    message: String,
    kind: &'static str,
}

struct State<'c> {
    catalog: &'c Catalog,
    log: Vec<Value>,
    queued: Vec<Queued>,
    failure: Option<Failure>,
    /// Tool calls the script made, awaited or not.
    made: usize,
    /// Tool calls the script awaited (or gathered): those sent.
    started: usize,
}

type Raised = (MontyException, Option<&'static str>);

impl State<'_> {
    /// Runs `code` in `repl`: how it ended, and the interpreter it left.
    fn drive(
        &mut self,
        mut repl: MontyRepl,
        code: String,
        printed: &mut String,
        print_bytes: usize,
    ) -> (MontyRepl, Result<MontyObject, Raised>) {
        let mut print = PrintWriter::CollectString(printed, Some(print_bytes));
        let functions = prelude::prelude(&code, |name| self.callable(name));
        if let Err(e) = repl.feed_run(&functions, vec![], print.reborrow()) {
            return (repl, Err((e, Some("runtime_error"))));
        }
        let mut progress = match repl.feed_start(&code, vec![], print.reborrow()) {
            Ok(progress) => progress,
            Err(e) => return (e.repl, Err((e.error, None))),
        };
        loop {
            let next = match progress {
                ReplProgress::Complete { repl, value } => return (repl, Ok(value)),
                ReplProgress::NameLookup(lookup) => {
                    let found = self.look_up(&lookup.name);
                    lookup.resume(found, print.reborrow())
                }
                ReplProgress::FunctionCall(call) => {
                    let (name, args) = match call.args.split_first() {
                        Some((MontyObject::String(name), args)) => (name.as_str(), args),
                        _ => ("", &[][..]),
                    };
                    match call.function_name.as_str() {
                        prelude::CHECK => {
                            let checked = self.check(name, args);
                            call.resume(checked, print.reborrow())
                        }
                        prelude::CALL => match self.queue(call.call_id, name, args, &call.kwargs) {
                            Some(refused) => call.resume(refused, print.reborrow()),
                            None => call.resume_pending(print.reborrow()),
                        },
                        other => {
                            let undefined = self.undefined(other);
                            call.resume(undefined, print.reborrow())
                        }
                    }
                }
                ReplProgress::ResolveFutures(pending) => {
                    match self.resolve(pending.pending_call_ids()) {
                        Ok(answers) => pending.resume(answers, print.reborrow()),
                        Err(stop) => {
                            let kind = stop.kind;
                            let exception = MontyException::new(stop.exc_type, Some(stop.message));
                            return match pending.abort(exception, print.reborrow()) {
                                Err(e) => (e.repl, Err((e.error, Some(kind)))),
                                Ok(progress) => (
                                    progress.into_repl(),
                                    Err((
                                        MontyException::runtime_error("the script was stopped"),
                                        Some(kind),
                                    )),
                                ),
                            };
                        }
                    }
                }
                ReplProgress::OsCall(call) => {
                    let function: &'static str = (&call.function_call).into();
                    let refused = MontyException::new(
                        ExcType::PermissionError,
                        Some(format!(
                            "{function}: a script has no files, environment, network or clock; the tools it calls do"
                        )),
                    );
                    call.resume(refused, print.reborrow())
                }
            };
            progress = match next {
                Ok(progress) => progress,
                Err(e) => return (e.repl, Err((e.error, None))),
            };
        }
    }

    /// What a name neither the script nor the prelude defined is: one of
    /// the prelude's two host functions, or undefined, saying what is
    /// callable (every tool the script names is the prelude's).
    fn look_up(&self, name: &str) -> NameLookupResult {
        match name {
            prelude::CHECK | prelude::CALL => NameLookupResult::Value(MontyObject::Function {
                name: name.to_string(),
                docstring: None,
            }),
            _ => NameLookupResult::Error(self.undefined(name)),
        }
    }

    /// Checks a call of `name` as the script makes it, before it is
    /// awaited: the exception it raises at once for a name that is no
    /// tool's or a positional argument. Its keyword arguments are converted
    /// once, when it is awaited.
    fn check(&mut self, name: &str, args: &[MontyObject]) -> ExtFunctionResult {
        if !self.callable(name) {
            return ExtFunctionResult::Error(self.undefined(name));
        }
        if HELPERS.contains(&name) {
            return ExtFunctionResult::Return(MontyObject::None);
        }
        self.made += 1;
        match positional(name, args) {
            None => ExtFunctionResult::Return(MontyObject::None),
            Some(message) => error(ExcType::TypeError, message),
        }
    }

    /// Whether the script may call `name`: a tool of the catalog, or one
    /// of the helpers.
    fn callable(&self, name: &str) -> bool {
        self.catalog.get(name).is_some() || HELPERS.contains(&name)
    }

    /// The `NameError` of a name that is neither the script's nor
    /// callable, saying what is.
    fn undefined(&self, name: &str) -> MontyException {
        let hint = match name {
            "open" | "__import__" | "exec" | "eval" | "compile" | "input" => {
                " A script has no files, imports or environment: it works through the tools it calls."
                    .to_string()
            }
            RUN_CODE => " A script cannot run a script: write the code here.".to_string(),
            module if MODULES.contains(&module) => format!(" Import it first: `import {module}`."),
            _ => format!(" Callable tools: {}.", self.catalog.names().join(", ")),
        };
        MontyException::new(
            ExcType::NameError,
            Some(format!("name '{name}' is not defined.{hint}")),
        )
    }

    /// Queues call `id` of `name`, which the script awaits now, for the
    /// batch it awaits; or the exception it raises.
    fn queue(
        &mut self,
        id: u32,
        name: &str,
        args: &[MontyObject],
        kwargs: &[(MontyObject, MontyObject)],
    ) -> Option<MontyException> {
        if !self.callable(name) {
            return Some(self.undefined(name));
        }
        let work = match name {
            SEARCH_TOOLS | DESCRIBE_TOOL => Work::Done(self.helper(name, args, kwargs)),
            _ => match arguments(name, args, kwargs) {
                Ok(arguments) => {
                    self.started += 1;
                    Work::Tool {
                        name: self.catalog.get(name).map_or(name, |t| &t.name).to_string(),
                        arguments,
                    }
                }
                Err(message) => {
                    return Some(MontyException::new(ExcType::TypeError, Some(message)));
                }
            },
        };
        self.queued.push(Queued { id, work });
        None
    }

    /// `search_tools(query)` or `describe_tool(name)`, answered here.
    fn helper(
        &self,
        name: &str,
        args: &[MontyObject],
        kwargs: &[(MontyObject, MontyObject)],
    ) -> ExtFunctionResult {
        let text = match (args, kwargs) {
            ([MontyObject::String(text)], []) => text.clone(),
            ([], [(_, MontyObject::String(text))]) => text.clone(),
            _ => {
                let usage = match name {
                    SEARCH_TOOLS => "search_tools(query: str)",
                    _ => "describe_tool(name: str)",
                };
                return error(ExcType::TypeError, format!("usage: await {usage}"));
            }
        };
        if name == SEARCH_TOOLS {
            return ExtFunctionResult::Return(from_json(&self.catalog.search(&text)));
        }
        match self.catalog.describe(&text) {
            Some(stub) => ExtFunctionResult::Return(MontyObject::String(stub)),
            None => error(
                ExcType::NameError,
                format!(
                    "no callable tool is named '{text}'. Callable tools: {}.",
                    self.catalog.names().join(", ")
                ),
            ),
        }
    }

    /// Answers the calls the script awaits now: its tools' calls as one
    /// batch. A breached budget or a cancelled call stops the script.
    fn resolve(&mut self, pending: &[u32]) -> Result<Vec<(u32, ExtFunctionResult)>, Failure> {
        let (now, later): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut self.queued)
            .into_iter()
            .partition(|queued| pending.contains(&queued.id));
        self.queued = later;
        let mut answers = Vec::with_capacity(now.len());
        let mut batch = Vec::new();
        for queued in now {
            match queued.work {
                Work::Done(answer) => answers.push((queued.id, answer)),
                Work::Tool { name, arguments } => batch.push((queued.id, name, arguments)),
            }
        }
        if batch.is_empty() && answers.is_empty() {
            return Err(Failure {
                exc_type: ExcType::RuntimeError,
                message: "the script awaits something no tool call will resolve".into(),
                kind: "runtime_error",
            });
        }
        // Every answer is logged, so the log and the host's record agree on
        // a batch stopped at a breach (whose later calls the host refused).
        let mut stop = None;
        for ((id, name, arguments), result) in batch.iter().zip(self.send(&batch)) {
            match self.answer(name, arguments, &result) {
                Ok(answer) => answers.push((*id, answer)),
                Err(failure) => {
                    stop.get_or_insert(failure);
                }
            }
        }
        match stop {
            Some(failure) => Err(failure),
            None => Ok(answers),
        }
    }

    /// Sends `batch` to the host: one call, or all of them together.
    fn send(&mut self, batch: &[(u32, String, Value)]) -> Vec<(CallResult, f64)> {
        let started = Instant::now();
        let results = match batch {
            [] => Vec::new(),
            [(_, name, arguments)] => vec![tools::call(name, arguments)],
            _ => {
                let requests: Vec<(&str, Value)> = batch
                    .iter()
                    .map(|(_, name, arguments)| (name.as_str(), arguments.clone()))
                    .collect();
                tools::call_all(&requests)
            }
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        results.into_iter().map(|result| (result, ms)).collect()
    }

    /// What `result` of `name` is to the script: its value, or the
    /// exception it raises; a breach of the tree's budget or a
    /// cancellation stops the script instead.
    fn answer(
        &mut self,
        name: &str,
        arguments: &Value,
        (result, ms): &(CallResult, f64),
    ) -> Result<ExtFunctionResult, Failure> {
        self.log.push(json!({
            "tool": name,
            "call_id": result.call_id,
            "arguments_bytes": arguments.to_string().len(),
            "ok": !result.is_error,
            "error_kind": result.error_kind,
            "ms": (ms * 1000.0).round() / 1000.0,
        }));
        if !result.is_error {
            let schema = self
                .catalog
                .get(name)
                .and_then(|t| t.output_schema.as_ref());
            return Ok(ExtFunctionResult::Return(returned(schema, result)));
        }
        let kind = result.error_kind.as_deref().unwrap_or("tool_error");
        let message = format!("{name}: {}", result.output);
        let (exc_type, kind) = match kind {
            "nested_limit" | "cancelled" => {
                let kind = if kind == "cancelled" {
                    "cancelled"
                } else {
                    "nested_calls"
                };
                return Err(Failure {
                    exc_type: ExcType::RuntimeError,
                    message,
                    kind,
                });
            }
            "permission_denied" => (ExcType::PermissionError, "tool_refused"),
            "invalid_arguments" => (ExcType::ValueError, "invalid_arguments"),
            "not_found" => (ExcType::NameError, "tool_refused"),
            "timeout" => (ExcType::TimeoutError, "timeout"),
            _ => (ExcType::RuntimeError, "tool_error"),
        };
        let message = match exc_type {
            ExcType::RuntimeError => format!("{name} failed ({kind}): {}", result.output),
            _ => message,
        };
        self.failure = Some(Failure {
            exc_type,
            message: message.clone(),
            kind,
        });
        Ok(error(exc_type, message))
    }

    /// Why an uncaught `exception` ended the script, in one word.
    fn classify(
        &self,
        exception: &MontyException,
        printed: &str,
        print_bytes: usize,
    ) -> &'static str {
        if let Some(failure) = &self.failure
            && failure.exc_type == exception.exc_type()
            && exception.message() == Some(failure.message.as_str())
        {
            return failure.kind;
        }
        match exception.exc_type() {
            ExcType::MemoryError if is_print_breach(exception, printed, print_bytes) => {
                "print_limit"
            }
            ExcType::MemoryError => "memory",
            ExcType::RecursionError => "recursion_depth",
            ExcType::SyntaxError => "syntax_error",
            ExcType::TimeoutError => "timeout",
            _ => "runtime_error",
        }
    }
}

/// Whether a `MemoryError` is the print cap's: Monty's collecting writer
/// raises it naming the cap (`… > {print_bytes} bytes`), whatever the size
/// of the one print that breached it; the interpreter itself has no memory
/// cap of its own (the sandbox's is a trap).
fn is_print_breach(exception: &MontyException, printed: &str, print_bytes: usize) -> bool {
    let names_the_cap = exception
        .message()
        .is_some_and(|message| message.ends_with(&format!("> {print_bytes} bytes")));
    names_the_cap || printed.len() + 4096 >= print_bytes
}

/// What a successful call returns to the script, as its stub says: a tool
/// with an output schema its details (with its text output under
/// `output`, when that schema's object has no such key), any other its
/// text output.
fn returned(schema: Option<&Value>, result: &CallResult) -> MontyObject {
    let (Some(schema), Some(details)) = (schema, &result.details) else {
        return MontyObject::String(result.output.clone());
    };
    match details {
        Value::Object(map) if toolcage_code_mode::adds_output(schema) => {
            let mut map = map.clone();
            map.insert(
                toolcage_code_mode::OUTPUT_KEY.to_string(),
                Value::String(result.output.clone()),
            );
            from_json(&Value::Object(map))
        }
        details => from_json(details),
    }
}

/// The standard modules a script may import.
pub const MODULES: [&str; 10] = [
    "asyncio",
    "json",
    "re",
    "math",
    "datetime",
    "collections",
    "itertools",
    "functools",
    "typing",
    "dataclasses",
];

/// The helpers every script has, beside its tools.
const HELPERS: [&str; 2] = [SEARCH_TOOLS, DESCRIBE_TOOL];

fn error(exc_type: ExcType, message: String) -> ExtFunctionResult {
    ExtFunctionResult::Error(MontyException::new(exc_type, Some(message)))
}
