//! Code mode's interpreter among the catalog's components: which component
//! it is (the bundled `code`, with `run_code`, `search_tools` and
//! `describe_tool`), and its settings: whether it is registered, what its
//! scripts may call, and how much of what they print is kept.
//!
//! Threat model: a script is the model's, so it may ask for anything.
//! Code mode grants nothing a direct call would not get: its calls are
//! nested calls, each checked against the operator's rules and run with the
//! callee's own grants, so by default a script may call every tool (`*`),
//! and [`tools`](CodeMode::tools) narrows that further. What it prints is
//! capped so that a print loop cannot fill the interpreter's memory or the
//! model's context.

use super::component::Source;
use super::table::ToolInfo;

/// The component that runs scripts, among the bundled ones.
pub(crate) const COMPONENT: &str = "code";

/// Whether `component` from `source` is code mode's interpreter: the
/// bundled `code` component, never a directory's of the same name.
pub(crate) fn is_interpreter(component: &str, source: &Source) -> bool {
    component == COMPONENT && *source == Source::Bundled
}

/// Whether `info` is code mode's own tool (`run_code`, `search_tools` or
/// `describe_tool`): a tool of the interpreter.
pub fn is_code_mode_tool(info: &ToolInfo) -> bool {
    is_interpreter(&info.component, &info.source)
}

pub use toolcage_code_mode::{DEFAULT_PRINT_KIB, RUN_CODE};

/// Code mode's settings. Default: on, scripts may call every tool the
/// operator's rules allow (`*`), 64 KiB of printed text kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeMode {
    enabled: bool,
    tools: Vec<String>,
    print_kib: u64,
}

impl Default for CodeMode {
    fn default() -> Self {
        CodeMode {
            enabled: true,
            tools: vec!["*".to_string()],
            print_kib: DEFAULT_PRINT_KIB,
        }
    }
}

impl CodeMode {
    /// Code mode off: the `code` component is not registered.
    pub fn off() -> Self {
        CodeMode {
            enabled: false,
            ..CodeMode::default()
        }
    }

    /// Lets scripts call only the tools whose names match one of
    /// `patterns` (`*` for any run of characters), under the operator's
    /// rules still. Default: `["*"]`.
    pub fn tools<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.tools = patterns.into_iter().map(Into::into).collect();
        self
    }

    /// Keeps at most `kib` KiB of what a script prints; printing more
    /// raises `MemoryError` in the script (kind `print_limit`). Default: 64.
    pub fn print_kib(mut self, kib: u64) -> Self {
        self.print_kib = kib;
        self
    }

    /// Whether the `code` component is registered.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The patterns of the tools scripts may call.
    pub fn tool_patterns(&self) -> &[String] {
        &self.tools
    }

    /// The printed text kept, in KiB.
    pub fn print_limit_kib(&self) -> u64 {
        self.print_kib
    }
}
