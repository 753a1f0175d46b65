//! Calling other tools from a tool, through `toolcage:tool/tools`.
//!
//! ```no_run
//! use toolcage_guest::{json, tools};
//!
//! let page = tools::call("fetch", &json!({ "url": "https://example.com" }));
//! if page.is_error {
//!     // Refused or failed: `output` says why, for the model.
//! }
//! // Read-only tools started together run at once.
//! let [a, b] = tools::call_all(&[
//!     ("read_file", json!({ "path": "/workspace/a.txt" })),
//!     ("read_file", json!({ "path": "/workspace/b.txt" })),
//! ])
//! .try_into()
//! .unwrap();
//! ```
//!
//! Each call takes the host's one call path, exactly as a call from the
//! model: it is validated, checked against the operator's allow/ask/deny
//! rules, and runs in a sandbox of its own with the *callee's* grants. A
//! component may call only the tools its operator granted it (`calls` in
//! its configuration); every other call comes back refused. One call tree
//! shares a budget (a number of nested calls, a depth and the bytes
//! passed), a call ends when its caller must, and a breach is a refusal
//! too: nothing here traps, short of requests larger than the call's
//! transfer limit (its output limit and 64 KiB).

use serde_json::Value;

use crate::bindings::toolcage::tool::tools as wit;

/// What a call returned, or why it did not run.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call's id, as the host's events and traces name it.
    pub call_id: String,
    /// Whether it failed or was refused.
    pub is_error: bool,
    /// Why, when it did: `permission_denied`, `not_found`,
    /// `invalid_arguments`, `tool_error`, `timeout`, `nested_limit`…
    pub error_kind: Option<String>,
    /// Concise text; on failure, what to do next.
    pub output: String,
    /// Structured JSON, when the tool returned some.
    pub details: Option<Value>,
}

impl From<wit::CallResult> for CallResult {
    fn from(result: wit::CallResult) -> Self {
        CallResult {
            call_id: result.call_id,
            is_error: result.is_error,
            error_kind: result.error_kind,
            output: result.output,
            details: result
                .details
                .map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text))),
        }
    }
}

/// Calls tool `name` with `arguments` (a JSON object) and waits for its
/// result.
pub fn call(name: &str, arguments: &Value) -> CallResult {
    wit::call(name, &arguments.to_string()).into()
}

/// Calls every `(name, arguments)` and waits for them all: together when
/// every tool named is read-only, otherwise one at a time in order. The
/// results come back in the order of `calls`.
pub fn call_all(calls: &[(&str, Value)]) -> Vec<CallResult> {
    let requests: Vec<wit::Request> = calls
        .iter()
        .map(|(name, arguments)| wit::Request {
            name: name.to_string(),
            arguments: arguments.to_string(),
        })
        .collect();
    wit::call_all(&requests)
        .into_iter()
        .map(CallResult::from)
        .collect()
}

/// A tool this component may call, as [`callable`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Callable {
    /// The tool's name.
    pub name: String,
    /// The Python identifier a script calls it by (code mode): one to one
    /// over every tool of the registry, so that no name reaches a tool
    /// other than its own; `None` when none fits (`3d`, `class`).
    pub identifier: Option<String>,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// JSON Schema of its `details` on success, when it promises one.
    pub output_schema: Option<Value>,
    /// Whether it only reads, so that [`call_all`] runs such calls together.
    pub read_only: bool,
}

/// The tools this component may call: those its grant names that the
/// operator's rules do not deny, sorted by name. Listing is free; it is
/// empty while the component describes itself.
pub fn callable() -> Vec<Callable> {
    let schema = |text: String| serde_json::from_str(&text).unwrap_or(Value::Bool(true));
    wit::callable_identified()
        .into_iter()
        .map(|wit::Identified { entry, identifier }| Callable {
            name: entry.name,
            identifier,
            description: entry.description,
            input_schema: schema(entry.input_schema),
            output_schema: entry.output_schema.map(schema),
            read_only: entry.read_only,
        })
        .collect()
}
