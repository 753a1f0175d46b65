//! The one call path. Every call takes it: [`Registry::call`], a
//! [`Runner`](crate::agent::Runner)'s batches, the CLI, the MCP server, and
//! a tool calling a tool (`nested`). Its stages, each once:
//!
//! 1. **lookup**: the tool's entry and the permission rule that applies to
//!    it are resolved once ([`Call::look_up`]) and passed down, never looked
//!    up again;
//! 2. **parse**: JSON text is parsed once (text over [`MAX_ARGUMENT_BYTES`]
//!    is refused unparsed);
//! 3. **permission**: `deny` refuses whatever the arguments, `ask` asks the
//!    policy's [`Approver`] about the parsed arguments (before validation,
//!    so that the user sees the call the model made);
//! 4. **validate** against the tool's input schema;
//! 5. **cache**: a read-only, idempotent tool's result may come from the
//!    policy's [`ResultCache`];
//! 6. **sandbox**: a fresh instance under the component's grants;
//! 7. **outcome**: checked against the limits and the output schema, and
//!    redacted;
//! 8. **telemetry**: the call's span and metrics, from what the stages saw.
//!
//! What applies to every call (the permission rules, the approver, the cache,
//! telemetry) is a [`CallPolicy`]. A call given none (a plain
//! [`Registry::call`]) is the embedder's own: every tool is allowed, nothing
//! is cached or traced. That is a policy, not a side door: the same path
//! runs, with rules that allow everything.
//!
//! Threat model: the tool name and arguments come from a model, the outcome
//! from an untrusted component. Whatever either sends, the caller gets a
//! [`CallResult`], never a panic or an `Err`: an unknown name lists the real
//! ones, bad arguments list every schema error, a refusal says which rule
//! refused, a breached limit names the limit, and an outcome too large or
//! malformed is refused. Outcomes are checked against the tool's declared
//! output schema, so programs reading `details` can trust its shape.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tracing::Instrument;

pub(crate) mod cache;
mod nested;
mod options;
mod outcome;
mod policy;
mod trace;

pub use cache::ResultCache;
pub use nested::{MAX_LISTED_NESTED, NestedCall, NestedEvent, NestedUsage};
#[cfg(feature = "mcp")]
pub(crate) use nested::{Recorded, Replay};
pub use options::CallOptions;
pub use policy::CallPolicy;
pub(crate) use trace::{CallSpan, Timings, Tracer};

use crate::catalog::permissions::{Permission, Permissions};
use crate::catalog::registry::Registry;
use crate::catalog::schema;
use crate::catalog::table::{Entry, ToolInfo, ToolTable};
use crate::sandbox::net::NetUsage;
use crate::sandbox::outcome::{CancelToken, ErrorKind, Logs};
use crate::sandbox::{ToolCalls, human_bytes};

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
    /// The nested calls its tool made (a tool calling tools), at any depth,
    /// in the order they ended; at most [`MAX_LISTED_NESTED`]. Listed on
    /// the root call of a tree only; empty for a nested call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<NestedCall>,
    /// What its call tree used of its budget, for the root call of a tool
    /// that may call tools (its component imports `toolcage:tool/tools`);
    /// `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_usage: Option<NestedUsage>,
}

fn millis<S: serde::Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((duration.as_secs_f64() * 1e6).round() / 1e3)
}

/// A duration [`millis`] wrote; a negative or non-finite one is zero.
fn from_millis<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let millis = <f64 as serde::Deserialize>::deserialize(d)?;
    Ok(Duration::try_from_secs_f64(millis / 1e3).unwrap_or_default())
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
            nested: Vec::new(),
            nested_usage: None,
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

/// A call id unique in the process: `call-<n>`. Each thread takes its
/// numbers from the shared counter a block at a time, so that concurrent
/// callers do not contend for one counter on every call.
fn next_call_id() -> String {
    const BLOCK: u64 = 1024;
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    let n = NEXT.with(|next| {
        let (mut n, mut end) = next.get();
        if n == end {
            n = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed) * BLOCK + 1;
            end = n + BLOCK;
        }
        next.set((n + 1, end));
        n
    });
    format!("call-{n}")
}

/// What one call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Wall time of the call, serialized as `duration_ms` (milliseconds,
    /// with microsecond precision). For a cache hit, the time of the lookup.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// Fuel the guest consumed; 0 when no guest ran (a cache hit, a refused
    /// or cancelled call).
    pub fuel_used: u64,
    /// Whether the result came from the result cache.
    pub cached: bool,
}

/// A call's result and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    /// The result, with the call's id.
    pub result: CallResult,
    /// Its metrics, including whether it came from the cache.
    pub metrics: Metrics,
}

impl CallReport {
    fn new(result: CallResult, cached: bool) -> Self {
        let metrics = Metrics {
            duration: result.duration,
            fuel_used: result.fuel_used,
            cached,
        };
        CallReport { result, metrics }
    }

    /// The report of a call that did not run.
    pub(crate) fn refused(tool: &str, call_id: String, kind: ErrorKind, output: String) -> Self {
        CallReport::new(CallResult::error(tool, call_id, kind, output), false)
    }
}

/// What a call asks for: a tool by name, with arguments, under an id.
pub(crate) struct Request {
    pub id: String,
    pub name: String,
    pub arguments: Arguments,
}

impl Request {
    /// A request with a generated id (see [`CallOptions::call_id`]).
    fn new(name: &str, arguments: Arguments, options: &CallOptions) -> Self {
        Request {
            id: options.id().map_or_else(next_call_id, str::to_string),
            name: name.to_string(),
            arguments,
        }
    }
}

/// The arguments, parsed once.
enum Parsed {
    Value(Value),
    /// Text that is not JSON, and why.
    NotJson(String, serde_json::Error),
    /// Text longer than [`MAX_ARGUMENT_BYTES`], never parsed.
    TooLarge(String),
}

/// A call whose tool and permission rule are resolved: the first stages of
/// the path. [`run`](Self::run) takes it through the rest; a batch that
/// asks its approvals in order [`authorize`](Self::authorize)s its calls one by
/// one, then runs them concurrently.
pub(crate) struct Call<'r> {
    table: Cow<'r, Arc<ToolTable>>,
    entry: Option<Cow<'r, Arc<Entry>>>,
    id: String,
    name: String,
    arguments: Parsed,
    permission: Permission,
    /// A refusal its frontend decided before the permission stage.
    refusal: Option<(ErrorKind, String)>,
    /// For a nested call, the tool that made it.
    caller: Option<String>,
}

impl<'r> Call<'r> {
    /// Looks the tool up in `table` (a registry's) and resolves its rule
    /// in `rules` (none: allowed), once; parses the arguments, once.
    pub(crate) fn look_up(
        table: &'r Arc<ToolTable>,
        request: Request,
        rules: Option<&Permissions>,
    ) -> Self {
        let entry = table.get(&request.name).map(Cow::Borrowed);
        Call::resolve(Cow::Borrowed(table), entry, request, rules)
    }

    /// The call, in `table`, of `entry`, the tool `request` names as its
    /// caller already looked it up (`None`: no tool has the name), to run
    /// on another task.
    pub(crate) fn found(
        table: &Arc<ToolTable>,
        entry: Option<Arc<Entry>>,
        request: Request,
        rules: Option<&Permissions>,
    ) -> Call<'static> {
        let table = Cow::Owned(table.clone());
        Call::resolve(table, entry.map(Cow::Owned), request, rules)
    }

    fn resolve(
        table: Cow<'r, Arc<ToolTable>>,
        entry: Option<Cow<'r, Arc<Entry>>>,
        request: Request,
        rules: Option<&Permissions>,
    ) -> Self {
        let permission = match (rules, &entry) {
            (Some(rules), Some(_)) => rules.permission_for(&request.name),
            _ => Permission::Allow,
        };
        let arguments = match request.arguments {
            Arguments::Value(value) => Parsed::Value(value),
            Arguments::Json(text) if text.len() > MAX_ARGUMENT_BYTES => Parsed::TooLarge(text),
            Arguments::Json(text) => match serde_json::from_str(&text) {
                Ok(value) => Parsed::Value(value),
                Err(e) => Parsed::NotJson(text, e),
            },
        };
        Call {
            table,
            entry,
            id: request.id,
            name: request.name,
            arguments,
            permission,
            refusal: None,
            caller: None,
        }
    }

    /// Marks the call as made by the tool `caller` (a nested call), for
    /// whoever approves it.
    pub(crate) fn called_by(&mut self, caller: &str) {
        self.caller = Some(caller.to_string());
    }

    /// The tool that made the call, for a nested call.
    pub(crate) fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    /// Refuses the call at its permission stage, before the rules are
    /// consulted: for a frontend's own reasons (a batch's custom-tool call,
    /// or the rest of a batch after a refusal). It is still traced.
    pub(crate) fn refuse_first(&mut self, kind: ErrorKind, output: String) {
        self.refusal = Some((kind, output));
    }

    /// The tool, when the registry serves it.
    pub(crate) fn info(&self) -> Option<&ToolInfo> {
        self.entry.as_ref().map(|entry| &entry.info)
    }

    /// The rule that applies to it.
    pub(crate) fn permission(&self) -> Permission {
        self.permission
    }

    /// The call's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The tool's name, as called.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The arguments, when they parsed.
    #[cfg(feature = "mcp")]
    pub(crate) fn parsed(&self) -> Option<&Value> {
        match &self.arguments {
            Parsed::Value(value) => Some(value),
            _ => None,
        }
    }

    /// The arguments as the model sent them: parsed, or the text that is not JSON.
    pub(crate) fn arguments(&self) -> Value {
        match &self.arguments {
            Parsed::Value(value) => value.clone(),
            Parsed::NotJson(text, _) | Parsed::TooLarge(text) => Value::String(text.clone()),
        }
    }

    fn arguments_text(&self) -> String {
        match &self.arguments {
            Parsed::Value(value) => value.to_string(),
            Parsed::NotJson(text, _) | Parsed::TooLarge(text) => text.clone(),
        }
    }

    /// The same call, owning its entry (one reference count), to run on
    /// another task.
    pub(crate) fn into_shared(self) -> Call<'static> {
        Call {
            table: Cow::Owned(self.table.into_owned()),
            entry: self.entry.map(|entry| Cow::Owned(entry.into_owned())),
            id: self.id,
            name: self.name,
            arguments: self.arguments,
            permission: self.permission,
            refusal: self.refusal,
            caller: self.caller,
        }
    }

    /// Takes the call through the whole path. The call is borrowed by each
    /// stage rather than moved from one to the next: a call's future stays
    /// small, and cheap to move (the `calls` bench prints its size).
    pub(crate) async fn run(mut self, options: CallOptions) -> CallReport {
        let span = self.start_span(&options);
        match self.permit(&options).await {
            Ok(()) => self.execute(&options, span).await,
            Err(refusal) => self.refused(refusal, span),
        }
    }

    /// The permission stage: starts the call's span, then refuses a
    /// cancelled call or one the rules (or the approver) refuse.
    pub(crate) async fn authorize(
        mut self,
        options: &CallOptions,
    ) -> Result<Authorized<'r>, CallReport> {
        let span = self.start_span(options);
        match self.permit(options).await {
            Ok(()) => Ok(Authorized { call: self, span }),
            Err(refusal) => Err(self.refused(refusal, span)),
        }
    }

    /// The call's span, when it is traced.
    fn start_span(&self, options: &CallOptions) -> Option<Box<dyn CallSpan>> {
        options.tracer().map(|tracer| {
            tracer.start(
                &self.name,
                self.info(),
                &|| self.arguments_text(),
                self.permission,
            )
        })
    }

    /// Whether the call may run: not refused by its frontend, not
    /// cancelled, and allowed by the policy's rules (or its approver).
    async fn permit(&mut self, options: &CallOptions) -> Result<(), (ErrorKind, String)> {
        if let Some(refusal) = self.refusal.take() {
            return Err(refusal);
        }
        match (options.cancel(), options.policy_ref()) {
            (Some(token), _) if token.is_cancelled() => Err((ErrorKind::Cancelled, not_started())),
            (cancel, Some(policy)) => policy.permit(self, cancel).await,
            (_, None) => Ok(()),
        }
    }

    /// The report of a call the permission stage refused, its span finished.
    fn refused(
        &self,
        (kind, output): (ErrorKind, String),
        span: Option<Box<dyn CallSpan>>,
    ) -> CallReport {
        let report = CallReport::refused(&self.name, self.id.clone(), kind, output);
        if let Some(span) = span {
            let limits = self.entry.as_ref().map(|e| e.limits());
            span.finish(
                self.info(),
                limits,
                &report.result,
                false,
                &Timings::default(),
            );
        }
        report
    }

    /// Validates, then serves the call from the cache or runs it in a
    /// sandbox, and reports it.
    async fn execute(&self, options: &CallOptions, span: Option<Box<dyn CallSpan>>) -> CallReport {
        let component = self.info().map_or("", |info| info.component.as_str());
        let tracing_span = tracing::info_span!(
            "call",
            tool = %self.name,
            component = %component,
            call_id = %self.id,
            duration_ms = tracing::field::Empty,
            fuel_used = tracing::field::Empty,
            error_kind = tracing::field::Empty,
        );
        let mut timings = Timings::default();
        let timed = span.as_ref().is_some_and(|span| span.timed());
        let stages = self.stages(options, timed.then_some(&mut timings), span.as_deref());
        // Without a subscriber (an embedder's plain call), the stages'
        // future is awaited where it is, not moved into the span's.
        let report = match tracing_span.is_disabled() {
            true => stages.await,
            false => stages.instrument(tracing_span.clone()).await,
        };
        let result = &report.result;
        tracing_span.record("duration_ms", result.duration.as_millis() as u64);
        tracing_span.record("fuel_used", result.fuel_used);
        tracing_span.record(
            "error_kind",
            result.error_kind.map_or("none", ErrorKind::as_str),
        );
        tracing_span.in_scope(|| tracing::debug!(is_error = result.is_error, "call finished"));
        if let Some(span) = span {
            let limits = self.entry.as_ref().map(|e| e.limits());
            span.finish(self.info(), limits, result, true, &timings);
        }
        report
    }
}

/// A call the permission stage let through: what is left of the path.
pub(crate) struct Authorized<'r> {
    call: Call<'r>,
    span: Option<Box<dyn CallSpan>>,
}

impl Authorized<'_> {
    /// Validates, then serves the call from the cache or runs it in a
    /// sandbox, and reports it.
    pub(crate) async fn execute(self, options: CallOptions) -> CallReport {
        let Authorized { call, span } = self;
        call.execute(&options, span).await
    }
}

impl Call<'_> {
    /// Validation, the cache and the sandbox; `span` is the call's, when
    /// it is traced (the nested calls its tool makes are its children).
    async fn stages(
        &self,
        options: &CallOptions,
        mut timings: Option<&mut Timings>,
        span: Option<&dyn CallSpan>,
    ) -> CallReport {
        let started = Instant::now();
        // Authorized, then cancelled while it waited (for a batch's slot).
        if options.cancel().is_some_and(CancelToken::is_cancelled) {
            let (id, kind) = (self.id.clone(), ErrorKind::Cancelled);
            return CallReport::refused(&self.name, id, kind, not_started());
        }
        let Some(entry) = &self.entry else {
            let output = unknown_tool(&self.table, &self.name);
            return CallReport::refused(&self.name, self.id.clone(), ErrorKind::NotFound, output);
        };
        let validating = timings.as_ref().map(|_| SystemTime::now());
        let checked = self.validate(entry);
        if let (Some(timings), Some(start)) = (timings.as_deref_mut(), validating) {
            timings.validated = Some((start, SystemTime::now()));
        }
        let arguments = match checked {
            Ok(arguments) => arguments,
            Err(result) => return CallReport::new(*result, false),
        };
        let cache = options
            .policy_ref()
            .and_then(|policy| policy.cache.as_ref());
        // A tool that calls tools is never served from the cache: its
        // nested calls must be checked (and approved) every time.
        let key = cache
            .filter(|_| cache::cacheable(&entry.info) && !entry.imports_tools())
            .map(|_| cache::key(&entry.info, arguments));
        if let (Some(cache), Some(key)) = (cache, &key)
            && let Some(result) = cache.get(key)
        {
            return CallReport::new(self.cached(result, started), true);
        }
        if let Some(timings) = timings {
            timings.sandbox_start = Some(SystemTime::now());
        }
        let caller = nested::caller(&self.table, entry, &self.id, options, span);
        let tools = caller
            .as_ref()
            .map(|(caller, _)| caller.clone() as Arc<dyn ToolCalls>);
        let id = self.id.clone();
        let mut result = outcome::run(entry, arguments, id, options, tools).await;
        if let Some((_, Some(tree))) = caller {
            let (listed, usage) = tree.take_listed();
            result.nested = listed;
            result.nested_usage = Some(usage);
            if let Some(diverged) = tree.diverged() {
                result.is_error = true;
                result.error_kind = Some(ErrorKind::ToolError);
                result.output = diverged;
                result.details = None;
            }
        }
        if let (Some(cache), Some(key)) = (cache, key)
            && !result.is_error
        {
            cache.insert(key, result.clone());
        }
        CallReport::new(result, false)
    }

    /// The parsed arguments, when they match the tool's input schema.
    fn validate(&self, entry: &Entry) -> Result<&Value, Box<CallResult>> {
        let name = &self.name;
        let refuse = |output: String| {
            let kind = ErrorKind::InvalidArguments;
            Box::new(CallResult::error(name, self.id.clone(), kind, output))
        };
        let arguments = match &self.arguments {
            Parsed::Value(value) => value,
            Parsed::TooLarge(text) => return Err(refuse(too_large(name, text.len()))),
            Parsed::NotJson(_, e) => {
                return Err(refuse(format!(
                    "The arguments for `{name}` are not valid JSON ({e}). Send a JSON object that matches the tool's input schema."
                )));
            }
        };
        if let Some(errors) = schema::errors(&entry.input, arguments) {
            let mut result = refuse(format!(
                "The arguments for `{name}` do not match its input schema:\n{errors}\nFix these and call `{name}` again."
            ));
            result.details =
                Some(serde_json::json!({ "input_schema": entry.info.descriptor.input_schema }));
            return Err(result);
        }
        Ok(arguments)
    }

    /// A cached result, as this call's.
    fn cached(&self, mut result: CallResult, started: Instant) -> CallResult {
        result.call_id = self.id.clone();
        result.duration = started.elapsed();
        result.fuel_used = 0;
        result.peak_memory_bytes = 0;
        result.slot_wait = Duration::ZERO;
        result.net = NetUsage::default();
        result.nested = Vec::new();
        result.nested_usage = None;
        result
    }
}

/// The answer to a call of `name`, which `table` does not serve.
fn unknown_tool(table: &ToolTable, name: &str) -> String {
    let available: Vec<&str> = table.tools().map(|t| t.descriptor.name.as_str()).collect();
    if available.is_empty() {
        format!("There is no tool named `{name}`, and no tools are available.")
    } else {
        format!(
            "There is no tool named `{name}`. Available tools: {}.",
            available.join(", ")
        )
    }
}

fn not_started() -> String {
    "The call was cancelled before it started.".into()
}

impl Registry {
    /// Calls tool `name` with `arguments` and default options: as the
    /// embedder, so every tool is allowed (see [`CallPolicy`]).
    pub async fn call(&self, name: &str, arguments: impl Into<Arguments>) -> CallResult {
        self.call_with(name, arguments, CallOptions::default())
            .await
    }

    /// Calls tool `name` with `arguments` through the one call path: looks
    /// the tool up, parses the arguments, checks the permission rules of
    /// the options' [`CallPolicy`] (none: allowed), validates the
    /// arguments, then serves the call from the policy's cache or runs it
    /// in a fresh sandbox.
    pub async fn call_with(
        &self,
        name: &str,
        arguments: impl Into<Arguments>,
        options: CallOptions,
    ) -> CallResult {
        self.call_report(name, arguments.into(), options)
            .await
            .result
    }

    /// Like [`call_with`](Self::call_with), with the call's metrics
    /// (whether it came from the cache).
    pub async fn call_report(
        &self,
        name: &str,
        arguments: impl Into<Arguments>,
        options: CallOptions,
    ) -> CallReport {
        let request = Request::new(name, arguments.into(), &options);
        let rules = options.policy_ref().map(|policy| policy.permissions());
        Call::look_up(self.table(), request, rules)
            .run(options)
            .await
    }
}

#[cfg(test)]
mod tests {
    //! The path's stages that need no guest; the integration tests
    //! (`tests/all/`) run every stage against real components.

    use std::sync::Mutex;

    use super::*;

    fn empty() -> Registry {
        Registry::builder().build().expect("an empty registry")
    }

    fn request(name: &str, arguments: impl Into<Arguments>) -> Request {
        Request {
            id: "id-1".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn call_ids_are_unique_across_threads() {
        let ids: Vec<String> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..3000).map(|_| next_call_id()).collect::<Vec<_>>()))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        assert!(ids.iter().all(|id| id.starts_with("call-")));
    }

    #[tokio::test]
    async fn an_unknown_tool_is_not_found_and_says_none_are_available() {
        let result = empty().call("nope", "{}").await;
        assert_eq!(result.error_kind, Some(ErrorKind::NotFound));
        assert!(
            result.output.contains("no tools are available"),
            "{}",
            result.output
        );
        assert_eq!(result.duration, Duration::ZERO);
    }

    #[test]
    fn arguments_are_parsed_once_at_lookup_and_oversized_text_never() {
        let registry = empty();
        let call = Call::look_up(registry.table(), request("t", r#"{"a": 1}"#), None);
        assert_eq!(call.arguments(), serde_json::json!({ "a": 1 }));
        let call = Call::look_up(registry.table(), request("t", "{not json"), None);
        assert!(matches!(call.arguments, Parsed::NotJson(..)));
        assert_eq!(call.arguments(), Value::String("{not json".into()));
        let huge = "x".repeat(MAX_ARGUMENT_BYTES + 1);
        let call = Call::look_up(registry.table(), request("t", huge), None);
        assert!(matches!(call.arguments, Parsed::TooLarge(_)));
    }

    #[test]
    fn without_rules_or_a_tool_the_permission_is_allow() {
        let registry = empty();
        let deny = Permissions::deny_all();
        // No entry: nothing to refuse, the call ends as not found.
        let call = Call::look_up(registry.table(), request("t", "{}"), Some(&deny));
        assert_eq!(call.permission(), Permission::Allow);
        assert!(call.info().is_none());
    }

    #[tokio::test]
    async fn a_call_cancelled_before_it_starts_does_not_start() {
        let token = CancelToken::new();
        token.cancel();
        let options = CallOptions::new()
            .cancel_token(token)
            .policy(CallPolicy::new(Permissions::allow_all()));
        let result = empty().call_with("nope", "{}", options).await;
        assert_eq!(result.error_kind, Some(ErrorKind::Cancelled));
        assert_eq!(result.output, not_started());
    }

    /// What a span saw: the tool, the rule, whether it was granted, the kind.
    type Seen = Arc<Mutex<Vec<(String, &'static str, bool, Option<ErrorKind>)>>>;

    /// A tracer that notes what each span saw.
    #[derive(Default)]
    struct Notes(Seen);

    struct Noted(Seen, String, &'static str);

    impl Tracer for Notes {
        fn start(
            &self,
            tool: &str,
            _: Option<&ToolInfo>,
            _: &dyn Fn() -> String,
            permission: Permission,
        ) -> Box<dyn CallSpan> {
            Box::new(Noted(self.0.clone(), tool.into(), permission.as_str()))
        }
    }

    impl CallSpan for Noted {
        fn timed(&self) -> bool {
            true
        }

        fn children(&self) -> Option<Arc<dyn Tracer>> {
            None
        }

        fn finish(
            self: Box<Self>,
            _: Option<&ToolInfo>,
            _: Option<&crate::sandbox::limits::Limits>,
            result: &CallResult,
            granted: bool,
            _: &Timings,
        ) {
            self.0
                .lock()
                .unwrap()
                .push((self.1, self.2, granted, result.error_kind));
        }
    }

    #[tokio::test]
    async fn every_call_is_traced_once_refused_or_not() {
        let notes = Notes::default();
        let seen = notes.0.clone();
        let mut policy = CallPolicy::new(Permissions::deny_all());
        policy.tracer = Some(Arc::new(notes));
        let policy = Arc::new(policy);
        let registry = empty();
        let options = || CallOptions::new().policy(policy.clone());
        registry.call_with("nope", "{}", options()).await;
        let mut call = Call::look_up(registry.table(), request("other", "{}"), None);
        call.refuse_first(ErrorKind::Unsupported, "not a function call".into());
        let report = call.run(options()).await;
        assert_eq!(report.result.output, "not a function call");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                ("nope".into(), "allow", true, Some(ErrorKind::NotFound)),
                ("other".into(), "allow", false, Some(ErrorKind::Unsupported)),
            ]
        );
    }
}
