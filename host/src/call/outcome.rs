//! The sandbox and outcome stages: running an authorized call in a fresh
//! sandbox, and turning what it returned into a [`CallResult`].
//!
//! Threat model: the outcome comes from an untrusted component. Output over
//! the tool's output limit is refused, details that are not JSON or break
//! the tool's own output schema are refused as a bug in the tool, and
//! nothing the tool hands back carries a secret of the operator's: output
//! and details are redacted before the caller sees them.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;

use super::{CallOptions, CallResult, MAX_ARGUMENT_BYTES, too_large};
use crate::catalog::component::Component;
use crate::catalog::elicit::{ElicitationRequest, Elicitor};
use crate::catalog::schema;
use crate::catalog::table::{Entry, Provider};
use crate::catalog::upstream::{UpstreamAnswer, UpstreamTool};
use crate::sandbox::outcome::{ErrorKind, with_stderr};
use crate::sandbox::secrets::redact::Redactor;
use crate::sandbox::{self, GuestReturn, Invocation, Observer, ToolCalls, human_bytes};

/// Runs the tool of `entry` with `arguments` (valid): a component's in a
/// fresh sandbox, an upstream server's through its link.
pub(super) async fn run(
    entry: &Entry,
    arguments: &Value,
    call_id: String,
    options: &CallOptions,
    tools: Option<Arc<dyn ToolCalls>>,
) -> CallResult {
    match &entry.provider {
        Provider::Component(component) => {
            in_sandbox(entry, component, arguments, call_id, options, tools).await
        }
        Provider::Upstream(tool) => upstream(entry, tool, arguments, call_id, options).await,
    }
}

/// Runs a component's tool in a fresh sandbox.
async fn in_sandbox(
    entry: &Entry,
    component: &Component,
    arguments: &Value,
    call_id: String,
    options: &CallOptions,
    tools: Option<Arc<dyn ToolCalls>>,
) -> CallResult {
    let name = entry.info.descriptor.name.as_str();
    let arguments = arguments.to_string();
    if arguments.len() > MAX_ARGUMENT_BYTES {
        let output = too_large(name, arguments.len());
        return CallResult::error(name, call_id, ErrorKind::InvalidArguments, output);
    }
    let invocation = Invocation::Call {
        tool: name.to_string(),
        arguments,
        tools,
        caller_deadline: options.nesting.as_ref().map(|n| n.caller_deadline),
        spent: options
            .replay
            .as_ref()
            .map_or(Duration::ZERO, |r| r.spent()),
    };
    let observer = Observer::new(options.events().cloned());
    let ran = sandbox::run(&component.sandbox, invocation, observer, options.cancel()).await;
    let mut result = CallResult::error(name, call_id, ErrorKind::ToolError, String::new());
    result.duration = ran.duration;
    result.fuel_used = ran.fuel_used;
    result.peak_memory_bytes = ran.peak_memory_bytes;
    result.slot_wait = ran.slot_wait;
    result.net = ran.net;
    match ran.result {
        Ok(GuestReturn::Outcome(returned)) => {
            let is_error = returned.is_err();
            let outcome = returned.unwrap_or_else(|outcome| outcome);
            let size = outcome.output.len() + outcome.details.as_ref().map_or(0, String::len);
            let limit = component.sandbox.grants.limits.output_bytes;
            if size > limit {
                result.error_kind = Some(ErrorKind::OutputLimit);
                result.output = too_much_output(size, limit);
            } else {
                accept(
                    entry,
                    is_error,
                    outcome.output,
                    outcome.details,
                    &mut result,
                );
            }
        }
        Ok(GuestReturn::Descriptors(_)) => unreachable!("call returns an outcome"),
        Err(stopped) => {
            result.error_kind = Some(stopped.kind);
            result.output = match stopped.kind {
                ErrorKind::Trap => with_stderr(stopped.message, &ran.logs.stderr),
                _ => stopped.message,
            };
        }
    }
    if result.is_error && result.error_kind != Some(ErrorKind::MemoryLimit) {
        explain_failure(component, ran.memory_refused, &mut result.output);
    }
    result.logs = ran.logs;
    redact(ran.redactor.as_deref(), &mut result);
    result
}

/// Calls an upstream server's tool, within its timeout and output cap; a
/// cancellation drops the call, which cancels it upstream.
async fn upstream(
    entry: &Entry,
    tool: &UpstreamTool,
    arguments: &Value,
    call_id: String,
    options: &CallOptions,
) -> CallResult {
    let name = entry.info.descriptor.name.as_str();
    let started = Instant::now();
    let limits = &tool.limits;
    let events = options.events().cloned();
    // A question names the tool as its caller knows it, and the call's
    // arguments.
    let elicitor = options.elicitor().cloned().map(|ask| {
        let (name, called_with) = (name.to_string(), arguments.clone());
        Arc::new(move |mut question: ElicitationRequest| {
            question.tool = name.clone();
            question.arguments = called_with.clone();
            ask(question)
        }) as Elicitor
    });
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    let answer = tool
        .link
        .call(&tool.tool, arguments, limits.timeout, events, elicitor);
    let answer = match options.cancel() {
        Some(cancel) => tokio::select! {
            answer = answer => answer,
            () = cancel.cancelled() => UpstreamAnswer::Failed {
                kind: ErrorKind::Cancelled,
                output: format!("`{name}` was cancelled; the call was cancelled on its server too."),
            },
        },
        None => answer.await,
    };
    let mut result = CallResult::error(name, call_id, ErrorKind::ToolError, String::new());
    result.duration = started.elapsed();
    match answer {
        UpstreamAnswer::Failed { kind, output } => {
            result.error_kind = Some(kind);
            result.output = output;
        }
        UpstreamAnswer::Answered {
            output,
            details,
            is_error,
        } => {
            let size = output.len() + details.as_ref().map_or(0, json_len);
            if size > limits.output_bytes {
                result.error_kind = Some(ErrorKind::OutputLimit);
                result.output = too_much_output(size, limits.output_bytes);
            } else {
                accept_value(entry, is_error, output, details, &mut result);
            }
        }
    }
    let redactor = tool.secrets.current().redactor().cloned();
    redact(redactor.as_deref(), &mut result);
    result
}

/// Takes every secret of the operator's out of what a tool handed back.
fn redact(redactor: Option<&Redactor>, result: &mut CallResult) {
    let Some(redactor) = redactor else { return };
    let (output, mut count) = redactor.text(&result.output);
    if count > 0 {
        result.output = output.into_owned();
    }
    if let Some(details) = &mut result.details {
        count += redactor.json(details);
    }
    result.net.redactions += count;
}

fn too_much_output(size: usize, limit: usize) -> String {
    format!(
        "The tool returned {} of output, more than its limit of {}. Ask for less: a narrower query, a smaller range, or fewer results.",
        human_bytes(size),
        human_bytes(limit)
    )
}

/// Adds to a failed call's output what the host knows of the cause: a
/// refused memory growth, a mount whose directory was removed.
fn explain_failure(component: &Component, memory_refused: bool, output: &mut String) {
    let sandbox = &component.sandbox;
    if memory_refused {
        output.push_str(&format!(
            "\n(During this call the tool hit its memory limit of {}: a request for more memory was refused, which may be why it failed. Ask for less data at once.)",
            human_bytes(sandbox.grants.limits.memory_bytes)
        ));
    }
    for mount in sandbox.files.iter().flat_map(|files| files.removed()) {
        output.push_str(&format!(
            "\n(The mount at {} is gone: its host directory {} was removed while toolcage ran. Files there cannot be reached until the operator restores it and restarts toolcage.)",
            mount.guest(),
            mount.host().display()
        ));
    }
}

/// Fills `result` from a returned outcome whose size is within limits.
fn accept(
    entry: &Entry,
    is_error: bool,
    output: String,
    details: Option<String>,
    result: &mut CallResult,
) {
    let details = match details.map(|text| serde_json::from_str::<Value>(&text)) {
        None => None,
        Some(Ok(value)) => Some(value),
        Some(Err(e)) => {
            result.output = format!(
                "The tool returned details that are not valid JSON ({e}); this is a bug in the tool."
            );
            return;
        }
    };
    accept_value(entry, is_error, output, details, result);
}

/// Fills `result` from an outcome whose details are parsed: details that
/// break the tool's output schema make the call fail.
fn accept_value(
    entry: &Entry,
    is_error: bool,
    output: String,
    details: Option<Value>,
    result: &mut CallResult,
) {
    if !is_error && let Some(validator) = &entry.output {
        let instance = details.as_ref().unwrap_or(&Value::Null);
        if let Some(errors) = schema::errors(validator, instance) {
            result.output = format!(
                "The tool returned details that break its own output schema; this is a bug in the tool:\n{errors}"
            );
            return;
        }
    }
    result.is_error = is_error;
    result.error_kind = is_error.then_some(ErrorKind::ToolError);
    result.output = output;
    result.details = details;
}

/// The length of `value` as JSON text, counted without making the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
