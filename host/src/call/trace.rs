//! The telemetry stage's hook: the call path reports to a [`Tracer`]
//! without knowing what it exports to (the `telemetry` module, above the
//! path, implements it), so spans and metrics come from what the stages saw
//! rather than from looking the call up again.

use std::sync::Arc;
use std::time::SystemTime;

use super::CallResult;
use crate::catalog::permissions::Permission;
use crate::catalog::table::ToolInfo;
use crate::sandbox::limits::Limits;

/// Starts a span for each call.
pub(crate) trait Tracer: Send + Sync {
    /// Starts the span of a call to `tool` (`info` when the registry serves
    /// it) whose rule is `permission`; `arguments` renders the arguments,
    /// only when they are recorded.
    fn start(
        &self,
        tool: &str,
        info: Option<&ToolInfo>,
        arguments: &dyn Fn() -> String,
        permission: Permission,
    ) -> Box<dyn CallSpan>;
}

/// A call's span while it runs.
pub(crate) trait CallSpan: Send + Sync {
    /// Whether it records when the stages ran (child spans).
    fn timed(&self) -> bool;

    /// What starts the spans of the nested calls the call's tool makes, as
    /// children of this one.
    fn children(&self) -> Option<Arc<dyn Tracer>>;

    /// Ends it with `result` (`granted`: whether the permission stage let
    /// the call through), the tool's `limits`, and the stages' `timings`.
    fn finish(
        self: Box<Self>,
        info: Option<&ToolInfo>,
        limits: Option<&Limits>,
        result: &CallResult,
        granted: bool,
        timings: &Timings,
    );
}

/// When a call's stages ran (wall-clock times), when its span records them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timings {
    /// Validation's start and end, when the tool exists.
    pub validated: Option<(SystemTime, SystemTime)>,
    /// When the sandbox was asked for a slot, when the arguments were valid.
    pub sandbox_start: Option<SystemTime>,
}
