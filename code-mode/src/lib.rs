//! Python stubs of tools, for code mode.
//!
//! In code mode a model does not call tools one by one: it writes a Python
//! script that calls them as `async` functions (`await grep(pattern="x",
//! path=".")`, several at once with `asyncio.gather`), and the script runs
//! in a sandboxed interpreter. The stubs rendered here are the API the
//! model is shown; they are read, never executed, and always parse as
//! Python 3.11.
//!
//! Conventions of a stub:
//!
//! - Every tool is an `async def` with keyword-only arguments, required
//!   ones first, optional ones `= None` (or `= <default>` when the schema
//!   gives a scalar default). When a property name is not a Python
//!   identifier, the arguments are `**arguments: Unpack[ToolArguments]` (a
//!   functional `TypedDict`); with no properties, `**arguments: Any` (or
//!   none at all, when the schema admits none).
//! - JSON Schema types map to Python's (`list[T]`, `tuple[A, B]`,
//!   `dict[str, T]`, `A | B`, `Literal[...]`); objects with properties
//!   become `TypedDict`s named `<Tool><Property>` (`<Tool>Result` for the
//!   result), local `$ref`s are followed, and anything else (cycles too) is
//!   `Any`.
//! - A tool with an output schema returns its structured result (details)
//!   as Python values, typed by that schema, with its text output added
//!   under `"output"` when the result is an object that has no such key
//!   ([`adds_output`]); one without returns its text output, a `str`.
//! - A tool is called by its [`identifiers`] identifier: its name when that
//!   is a Python identifier, else a spelling of it (`read-file` →
//!   `read_file`, or `read_file_2` when a tool is named `read_file`), one to
//!   one over the whole registry, with the real name in a comment above
//!   the `def`. A tool with no identifier (`3d`, `class`) is only a
//!   comment: a script cannot call it.

mod ident;
mod listing;
mod stub;
mod text;
mod types;

pub use ident::{identifiers, python_identifier};

/// The tool that runs a script.
pub const RUN_CODE: &str = "run_code";
/// The tool (and the script's function) that finds tools by a query.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The tool (and the script's function) that shows one tool's stub.
pub const DESCRIBE_TOOL: &str = "describe_tool";
/// Printed text a script keeps by default, in KiB (`[code_mode]
/// print_kib`): the host's default setting and the interpreter's fallback.
pub const DEFAULT_PRINT_KIB: u64 = 64;
pub use listing::{one_line, search, summary};

use serde_json::Value;
use types::Shared;

/// One tool, as the stubs need it.
#[derive(Clone, Copy, Debug)]
pub struct ToolSpec<'a> {
    /// The tool's name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: &'a str,
    /// Its function's name in a script, from [`identifiers`] over the
    /// whole registry; `None` when it has none (it is then only a comment).
    pub identifier: Option<&'a str>,
    /// What the tool does, for the model: the stub's docstring.
    pub description: &'a str,
    /// The JSON Schema of the tool's arguments.
    pub input_schema: &'a Value,
    /// The JSON Schema of the tool's structured result, if it has one.
    pub output_schema: Option<&'a Value>,
    /// Whether the tool only reads (so its calls can run together).
    pub read_only: bool,
}

/// Whether a tool whose output schema is `output_schema` returns its
/// details with its text output added under `"output"`: when the schema is
/// an object's with `properties` and none named `output`. (A script's
/// interpreter applies the same rule to what it returns.)
pub fn adds_output(output_schema: &Value) -> bool {
    output_schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| !properties.contains_key(OUTPUT_KEY))
        && output_schema.get("type").is_none_or(|t| t == "object")
}

/// The key a tool's text output is added under.
pub const OUTPUT_KEY: &str = "output";

/// The Python stub of one tool: any helper types it needs (`TypedDict`s,
/// `Literal` aliases), then `async def name(...) -> R:` with a docstring and
/// `...` body. The `typing` imports it needs are left to
/// [`python_module`].
pub fn python_stub(tool: &ToolSpec) -> String {
    let mut shared = Shared::new();
    if let Some(name) = tool.identifier {
        shared.namer.reserve(name);
    }
    stub::stub(tool, &mut shared, Detail::Full)
}

/// How much of each tool's description a stub's docstring holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// All of it.
    Full,
    /// Its first sentence ([`summary`]), and no descriptions of result
    /// fields or constraints of arguments: the signatures of a catalog,
    /// whose full text a script reads with `describe_tool`.
    Brief,
}

/// The stubs of several tools as one Python module: the `typing` import of
/// the names they use, then each tool's stub, separated by a blank line,
/// its docstring as `detail` says. Helper type names are unique across the
/// module (and never a tool's).
pub fn python_module(tools: &[ToolSpec], detail: Detail) -> String {
    let mut shared = Shared::new();
    shared.brief = detail == Detail::Brief;
    for tool in tools {
        if let Some(name) = tool.identifier {
            shared.namer.reserve(name);
        }
    }
    let stubs: Vec<String> = tools
        .iter()
        .map(|t| stub::stub(t, &mut shared, detail))
        .collect();
    let mut out = String::new();
    if !shared.typing.is_empty() {
        let names: Vec<&str> = shared.typing.iter().copied().collect();
        out.push_str(&format!("from typing import {}\n\n", names.join(", ")));
    }
    out.push_str(&stubs.join("\n"));
    out
}

#[cfg(test)]
mod tests;
