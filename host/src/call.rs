//! The one call path: lookup → parse → validate → sandbox → outcome.
//!
//! Threat model: the tool name and arguments come from a model, the outcome
//! from an untrusted component. Whatever either sends, the caller gets a
//! [`CallResult`], never a panic or an `Err`: an unknown name lists the real
//! ones, bad arguments list every schema error, a breached limit names the
//! limit, and an outcome too large or malformed is refused. Outcomes are
//! checked against the tool's declared output schema, so programs reading
//! `details` can trust its shape.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tracing::Instrument;

use crate::catalog::registry::{Entry, Registry, with_stderr};
use crate::catalog::schema;
use crate::sandbox::outcome::{CancelToken, GuestEvent, Logs};
use crate::sandbox::{self, GuestReturn, Invocation, Observer, human_bytes};
use crate::{ErrorKind, NetUsage};

/// The largest arguments a call takes, as JSON text: 16 MiB. Larger ones
/// are refused as [`ErrorKind::InvalidArguments`] before they are parsed,
/// so that a model (or a script) cannot make the host hold many times their
/// size in parsed values and copies before the tool's memory limit would
/// refuse them.
pub const MAX_ARGUMENT_BYTES: usize = 16 << 20;

/// A call's arguments: JSON text as a model wrote it, or a parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON text, parsed by the call (malformed text is an
    /// [`ErrorKind::InvalidArguments`] outcome).
    Json(String),
    /// An already parsed value.
    Value(Value),
}

impl From<&str> for Arguments {
    fn from(text: &str) -> Self {
        Arguments::Json(text.to_string())
    }
}

impl From<String> for Arguments {
    fn from(text: String) -> Self {
        Arguments::Json(text)
    }
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Self {
        Arguments::Value(value)
    }
}

/// Options of one call. By default: a generated call id, no event callback,
/// no cancellation.
#[derive(Clone, Default)]
pub struct CallOptions {
    call_id: Option<String>,
    events: Option<Arc<dyn Fn(GuestEvent) + Send + Sync>>,
    cancel: Option<CancelToken>,
    /// Where the call notes when its phases ran, for its spans.
    pub(crate) timings: Option<Arc<std::sync::Mutex<Timings>>>,
}

/// When a call's phases ran (wall-clock times, for spans).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timings {
    /// Validation's start and end, when the tool exists.
    pub validated: Option<(SystemTime, SystemTime)>,
    /// When the sandbox was asked for a slot, when the arguments were valid.
    pub sandbox_start: Option<SystemTime>,
}

impl CallOptions {
    /// Options with every default.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// Tags the call (its tracing span and result) with `id`, such as the
    /// model's tool-call id. Default: `call-<n>`, unique in the process.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// Receives the guest's log lines and progress reports as they happen.
    pub fn on_event(mut self, events: impl Fn(GuestEvent) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(events));
        self
    }

    /// Lets `token` cancel the call.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// The result of a call, successful or not.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CallResult {
    /// The tool's name, as called.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// Why it failed; `None` on success.
    pub error_kind: Option<ErrorKind>,
    /// Text for the model.
    pub output: String,
    /// Structured JSON for programs and user interfaces.
    pub details: Option<Value>,
    /// Wall time of the call.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// Fuel the guest consumed. Exact when the guest returned or ran out of
    /// fuel; a lower bound when a timeout or a cancellation stopped it, since
    /// wasmtime only writes the fuel counter back at calls, not at the epoch
    /// checks where such a call is stopped.
    pub fuel_used: u64,
    /// The most linear memory the guest held, in bytes: how close the call
    /// came to its memory limit.
    pub peak_memory_bytes: u64,
    /// How long the call waited for a free sandbox slot (all of them busy
    /// with other calls), part of its wall time; zero when one was free.
    #[serde(rename = "slot_wait_ms", serialize_with = "millis")]
    pub slot_wait: Duration,
    /// What the call used of the network: requests sent and refused, bytes
    /// each way, and the first network budget it breached.
    pub net: NetUsage,
    /// What the guest printed.
    pub logs: Logs,
}

fn millis<S: serde::Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((duration.as_secs_f64() * 1e6).round() / 1e3)
}

impl CallResult {
    fn error(tool: &str, call_id: String, kind: ErrorKind, output: String) -> Self {
        CallResult {
            tool: tool.to_string(),
            call_id,
            is_error: true,
            error_kind: Some(kind),
            output,
            details: None,
            duration: Duration::ZERO,
            fuel_used: 0,
            peak_memory_bytes: 0,
            slot_wait: Duration::ZERO,
            net: NetUsage::default(),
            logs: Logs::default(),
        }
    }
}

/// Why arguments of `len` bytes are refused.
fn too_large(name: &str, len: usize) -> String {
    format!(
        "The arguments for `{name}` are {}, more than the {} a call takes. Send less: pass a path or a reference to the data rather than the data itself.",
        human_bytes(len),
        human_bytes(MAX_ARGUMENT_BYTES)
    )
}

fn next_call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("call-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Registry {
    /// Calls tool `name` with `arguments` and default options.
    pub async fn call(&self, name: &str, arguments: impl Into<Arguments>) -> CallResult {
        self.call_with(name, arguments, CallOptions::default())
            .await
    }

    /// Calls tool `name` with `arguments`: looks the tool up, parses and
    /// validates the arguments, then runs it in a fresh sandbox.
    pub async fn call_with(
        &self,
        name: &str,
        arguments: impl Into<Arguments>,
        options: CallOptions,
    ) -> CallResult {
        let call_id = options.call_id.clone().unwrap_or_else(next_call_id);
        let component = self
            .entry(name)
            .map(|e| e.component.name.as_str())
            .unwrap_or("");
        let span = tracing::info_span!(
            "call",
            tool = %name,
            component = %component,
            call_id = %call_id,
            duration_ms = tracing::field::Empty,
            fuel_used = tracing::field::Empty,
            error_kind = tracing::field::Empty,
        );
        let result = self
            .call_in_span(name, arguments.into(), call_id, options)
            .instrument(span.clone())
            .await;
        span.record("duration_ms", result.duration.as_millis() as u64);
        span.record("fuel_used", result.fuel_used);
        span.record(
            "error_kind",
            result.error_kind.map_or("none", ErrorKind::as_str),
        );
        span.in_scope(|| tracing::debug!(is_error = result.is_error, "call finished"));
        result
    }

    async fn call_in_span(
        &self,
        name: &str,
        arguments: Arguments,
        call_id: String,
        options: CallOptions,
    ) -> CallResult {
        let Some(entry) = self.entry(name) else {
            let available: Vec<&str> = self.tools().map(|t| t.descriptor.name.as_str()).collect();
            let output = if available.is_empty() {
                format!("There is no tool named `{name}`, and no tools are available.")
            } else {
                format!(
                    "There is no tool named `{name}`. Available tools: {}.",
                    available.join(", ")
                )
            };
            return CallResult::error(name, call_id, ErrorKind::NotFound, output);
        };
        let validating = options.timings.as_ref().map(|_| SystemTime::now());
        let validated = |options: &CallOptions| {
            if let (Some(timings), Some(start)) = (&options.timings, validating) {
                let mut timings = timings.lock().unwrap_or_else(|e| e.into_inner());
                timings.validated = Some((start, SystemTime::now()));
            }
        };
        let arguments = match arguments {
            Arguments::Value(value) => value,
            Arguments::Json(text) if text.len() > MAX_ARGUMENT_BYTES => {
                validated(&options);
                let output = too_large(name, text.len());
                return CallResult::error(name, call_id, ErrorKind::InvalidArguments, output);
            }
            Arguments::Json(text) => match serde_json::from_str(&text) {
                Ok(value) => value,
                Err(e) => {
                    validated(&options);
                    let output = format!(
                        "The arguments for `{name}` are not valid JSON ({e}). Send a JSON object that matches the tool's input schema."
                    );
                    return CallResult::error(name, call_id, ErrorKind::InvalidArguments, output);
                }
            },
        };
        let errors = schema::errors(&entry.input, &arguments);
        validated(&options);
        if let Some(errors) = errors {
            let output = format!(
                "The arguments for `{name}` do not match its input schema:\n{errors}\nFix these and call `{name}` again."
            );
            let mut result = CallResult::error(name, call_id, ErrorKind::InvalidArguments, output);
            result.details =
                Some(serde_json::json!({ "input_schema": entry.info.descriptor.input_schema }));
            return result;
        }
        self.run(entry, arguments, call_id, options).await
    }

    async fn run(
        &self,
        entry: &Entry,
        arguments: Value,
        call_id: String,
        options: CallOptions,
    ) -> CallResult {
        let component = &entry.component;
        let name = entry.info.descriptor.name.as_str();
        let arguments = arguments.to_string();
        if arguments.len() > MAX_ARGUMENT_BYTES {
            let output = too_large(name, arguments.len());
            return CallResult::error(name, call_id, ErrorKind::InvalidArguments, output);
        }
        let invocation = Invocation::Call {
            tool: name.to_string(),
            arguments,
        };
        if let Some(timings) = &options.timings {
            let mut timings = timings.lock().unwrap_or_else(|e| e.into_inner());
            timings.sandbox_start = Some(SystemTime::now());
        }
        let observer = Observer::new(options.events);
        let ran = sandbox::run(
            &component.sandbox,
            invocation,
            observer,
            options.cancel.as_ref(),
        )
        .await;
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
                    result.output = format!(
                        "The tool returned {} of output, more than its limit of {}. Ask for less: a narrower query, a smaller range, or fewer results.",
                        human_bytes(size),
                        human_bytes(limit)
                    );
                } else {
                    self.accept_outcome(
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
            self.explain_failure(entry, ran.memory_refused, &mut result.output);
        }
        result.logs = ran.logs;
        // Nothing the tool hands back carries a secret of the operator's.
        if let Some(redactor) = &ran.redactor {
            let (output, mut count) = redactor.text(&result.output);
            if count > 0 {
                result.output = output.into_owned();
            }
            if let Some(details) = &mut result.details {
                count += redactor.json(details);
            }
            result.net.redactions += count;
        }
        result
    }

    /// Adds to a failed call's output what the host knows of the cause: a
    /// refused memory growth, a mount whose directory was removed.
    fn explain_failure(&self, entry: &Entry, memory_refused: bool, output: &mut String) {
        let sandbox = &entry.component.sandbox;
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
    fn accept_outcome(
        &self,
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
        if !is_error && let Some(validator) = &entry.output {
            let instance = details.clone().unwrap_or(Value::Null);
            if let Some(errors) = schema::errors(validator, &instance) {
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
}
