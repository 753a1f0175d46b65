//! Code mode: a model writes a short Python script that calls tools as
//! functions (`run_code`), and only what the script prints and returns
//! goes back into its context. This module renders what the model is shown
//! of it: the callable tools as Python stubs, generated from their JSON
//! Schemas, in `run_code`'s description. Embedders building a prompt of
//! their own use [`python_stubs`] and [`callable`].
//!
//! Threat model: the stubs show the model what its scripts may call, and
//! nothing else: a tool the operator's rules deny is neither callable nor
//! listed, and neither are tools outside code mode's
//! [`tools`](CodeMode::tools) patterns. The script runs in the `code`
//! component (Monty, pydantic's Python subset, built to WebAssembly), and
//! every tool it calls is a nested call on the one call path, so what is
//! listed here is only a view: the call path decides each call again.
//! Past [`MAX_LISTED_STUBS`] tools or [`MAX_STUB_BYTES`] of stubs, the
//! description lists names and one-line summaries only, so a large
//! catalog does not fill the model's context; the script then asks
//! `search_tools` and `describe_tool`.

use std::borrow::Cow;

pub use toolcage_code_mode::Detail;
use toolcage_code_mode::ToolSpec;

use crate::catalog::grants;
pub use crate::catalog::interpreter::{CodeMode, DEFAULT_PRINT_KIB, RUN_CODE, is_code_mode_tool};
use crate::catalog::permissions::Permissions;
use crate::catalog::registry::Registry;
use crate::catalog::table::ToolInfo;

/// The most tools whose full stubs `run_code`'s description shows.
pub const MAX_LISTED_STUBS: usize = 30;
/// The most bytes of stubs `run_code`'s description shows.
pub const MAX_STUB_BYTES: usize = 16 << 10;

/// The tools a `run_code` script may call under `permissions`, in load
/// order: those code mode's patterns (and any `calls` grant of the `code`
/// component) match, that the rules do not deny, other than code mode's
/// own: the one rule that nested calls are checked by.
/// Empty when code mode is off.
pub fn callable<'r>(registry: &'r Registry, permissions: &Permissions) -> Vec<&'r ToolInfo> {
    let Some(run_code) = registry
        .tool(RUN_CODE)
        .filter(|info| is_code_mode_tool(info))
    else {
        return Vec::new();
    };
    let patterns = registry.calls_of(&run_code.descriptor.name);
    registry
        .tools()
        .filter(|info| grants::callable(run_code, &patterns, Some(permissions), info))
        .collect()
}

fn spec<'a>(registry: &'a Registry, info: &'a ToolInfo) -> ToolSpec<'a> {
    let descriptor = &info.descriptor;
    ToolSpec {
        name: &descriptor.name,
        identifier: registry.table().identifier(&descriptor.name),
        description: &descriptor.description,
        input_schema: &descriptor.input_schema,
        output_schema: descriptor.output_schema.as_ref(),
        read_only: descriptor.hints.read_only,
    }
}

/// The Python stubs of the tools a script may call under `permissions`:
/// one module text, each tool an `async def` with keyword arguments, its
/// argument and result types, and its description as the docstring (all
/// of it, or its first sentence, as `detail` says).
pub fn python_stubs(registry: &Registry, permissions: &Permissions, detail: Detail) -> String {
    let specs: Vec<ToolSpec> = callable(registry, permissions)
        .into_iter()
        .map(|info| spec(registry, info))
        .collect();
    toolcage_code_mode::python_module(&specs, detail)
}

/// `run_code`'s description for the model: how a script is written, then
/// the callable tools, as stubs with brief docstrings while they fit
/// ([`MAX_LISTED_STUBS`], [`MAX_STUB_BYTES`]), otherwise as one line each;
/// either way `describe_tool` gives a script a tool's whole stub.
pub fn run_code_description(registry: &Registry, permissions: &Permissions) -> String {
    let base = registry
        .tool(RUN_CODE)
        .map(|info| info.descriptor.description.as_str())
        .unwrap_or_default();
    let tools = callable(registry, permissions);
    if tools.is_empty() {
        return format!("{base}\n\nNo tool is callable from a script now.");
    }
    let specs: Vec<ToolSpec> = tools.into_iter().map(|info| spec(registry, info)).collect();
    let stubs = toolcage_code_mode::python_module(&specs, Detail::Brief);
    if specs.len() <= MAX_LISTED_STUBS && stubs.len() <= MAX_STUB_BYTES {
        return format!("{base}\n\nThe tools a script can call:\n```python\n{stubs}```");
    }
    let lines: Vec<String> = specs.iter().map(toolcage_code_mode::one_line).collect();
    format!(
        "{base}\n\nThe {} tools a script can call, one line each (`await describe_tool(name)` shows one's signature, `await search_tools(query)` finds them):\n{}",
        specs.len(),
        lines.join("\n")
    )
}

/// `info` as the model is shown it under `permissions`: `run_code`'s with
/// the callable tools in its description, every other as it is.
pub fn shown<'a>(
    registry: &Registry,
    permissions: &Permissions,
    info: &'a ToolInfo,
) -> Cow<'a, ToolInfo> {
    if info.descriptor.name != RUN_CODE || !is_code_mode_tool(info) {
        return Cow::Borrowed(info);
    }
    let mut shown = info.clone();
    shown.descriptor.description = run_code_description(registry, permissions);
    Cow::Owned(shown)
}
