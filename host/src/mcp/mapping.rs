//! Between toolcage's types and MCP's: a registered tool as an MCP `Tool`,
//! a [`CallResult`] as a `CallToolResult`, a guest's log level and progress
//! as MCP's. Pure functions, so the mapping is tested on its own.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, LoggingLevel, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::call::CallResult;
use crate::catalog::table::ToolInfo;
use crate::sandbox::outcome::LogLevel;

/// The `_meta` key under which every call result carries toolcage's own
/// figures: `{"error_kind", "duration_ms", "fuel_used", "peak_memory_bytes",
/// "slot_wait_ms", "net"}`, `net` being `{"requests", "denied",
/// "bytes_out", "bytes_in", "redactions"}` and `"limit"` when a network
/// budget was breached, and `"nested"` when the tool called tools: a list
/// of `{"tool", "call_id", "parent_call_id", "depth", "is_error",
/// "error_kind", "duration_ms", "fuel_used"}`, and `"nested_usage"` when it
/// may: `{"calls", "depth", "bytes"}` of its tree's budget.
pub const CALL_META_KEY: &str = "dev.toolcage/call";

/// The `_meta` key by which a tool raises Claude Code's cap on the size of
/// its results (50,000 characters by default, at most
/// [`MAX_RESULT_SIZE_CHARS`]; <https://code.claude.com/docs/en/mcp>, "Raise
/// the limit for a specific tool"). Above the cap, Claude Code saves a
/// result to a file and shows the model a preview.
pub const MAX_RESULT_SIZE_KEY: &str = "anthropic/maxResultSizeChars";
/// The most that key may declare.
pub const MAX_RESULT_SIZE_CHARS: usize = 500_000;

/// A registered tool as `tools/list` shows it. All four hints are explicit:
/// MCP reads a missing `destructiveHint` or `openWorldHint` as true. Its
/// `_meta` declares the largest result it can return, from its output limit
/// (a byte is at most a character), so that a client with a smaller
/// default cap takes it whole.
pub fn tool(info: &ToolInfo, limits: Option<&crate::sandbox::limits::Limits>) -> Tool {
    let descriptor = &info.descriptor;
    let mut annotations = ToolAnnotations::new()
        .read_only(descriptor.hints.read_only)
        .destructive(descriptor.hints.destructive)
        .idempotent(descriptor.hints.idempotent)
        .open_world(descriptor.hints.open_world);
    annotations.title = descriptor.title.clone();
    let mut tool = Tool::new(
        descriptor.name.clone(),
        descriptor.description.clone(),
        object(&descriptor.input_schema),
    );
    tool.title = descriptor.title.clone();
    tool.output_schema = descriptor.output_schema.as_ref().map(object);
    tool.annotations = Some(annotations);
    if let Some(limits) = limits {
        let mut meta = rmcp::model::JsonObject::new();
        let chars = limits.output_bytes.min(MAX_RESULT_SIZE_CHARS);
        meta.insert(MAX_RESULT_SIZE_KEY.into(), chars.into());
        tool.meta = Some(rmcp::model::MetaObject(meta));
    }
    tool
}

/// A schema object (descriptors are checked at load to be objects).
fn object(schema: &Value) -> Arc<JsonObject> {
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

/// What a successful result's details become over MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structured {
    /// Nothing: the tool declares no output schema, so they stay out.
    No,
    /// `structuredContent`, and their JSON as a second text block, as MCP
    /// (2025-06-18 on) recommends for clients that read only `content`.
    WithText,
    /// `structuredContent` alone: the text content already says what the
    /// model needs (`run_code`'s output is what its script printed, then
    /// its result; the details add its log, for programs), so a client
    /// that forwards every text block does not make the model read the
    /// result twice.
    Alone,
}

/// A call's result as `tools/call` returns it. The output is the text
/// content. On success, a tool that declares an output schema also gets
/// its details as `structuredContent`, with their JSON as a second text
/// block unless `structured` says not. An error result never carries
/// `structuredContent`, which clients check against the output schema
/// even when `isError` is set.
pub fn call_result(result: CallResult, structured: Structured) -> CallToolResult {
    // A failure's details have no place in the content (which holds what
    // the model reads) nor in `structuredContent` (which a client checks
    // against the output schema of a success): they go with the figures.
    let failure_details = result.details.clone().filter(|_| result.is_error);
    let meta = call_meta(&result, failure_details);
    let mut content = vec![ContentBlock::text(result.output)];
    let mut mapped = if result.is_error {
        CallToolResult::error(content)
    } else {
        let details = result.details.filter(|_| structured != Structured::No);
        if let (Some(details), Structured::WithText) = (&details, structured) {
            content.push(ContentBlock::text(details.to_string()));
        }
        let mut mapped = CallToolResult::success(content);
        mapped.structured_content = details;
        mapped
    };
    mapped.meta = Some(meta);
    mapped
}

/// The `_meta` of a call's answer: toolcage's figures ([`CALL_META_KEY`]),
/// with a failure's `details`. An input-required answer of a run paused
/// for a question carries it too, so that its record lists the calls the
/// run made so far.
pub fn call_meta(result: &CallResult, failure_details: Option<Value>) -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::MetaObject::new();
    let mut figures = json!({
        "error_kind": result.error_kind,
        "duration_ms": (result.duration.as_secs_f64() * 1e6).round() / 1e3,
        "fuel_used": result.fuel_used,
        "peak_memory_bytes": result.peak_memory_bytes,
        "slot_wait_ms": (result.slot_wait.as_secs_f64() * 1e6).round() / 1e3,
        "net": result.net,
    });
    if !result.nested.is_empty() {
        figures["nested"] = json!(result.nested);
    }
    if let Some(usage) = &result.nested_usage {
        figures["nested_usage"] = json!(usage);
    }
    if let Some(details) = failure_details {
        figures["details"] = details;
    }
    meta.insert(CALL_META_KEY.to_string(), figures);
    meta
}

/// A guest's log level as MCP's (`warn` is MCP's `warning`; `trace` has no
/// MCP level and maps to `debug`).
pub fn logging_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// Whether a message at `level` passes a client's minimum `threshold`.
pub fn passes(level: LoggingLevel, threshold: LoggingLevel) -> bool {
    severity(level) >= severity(threshold)
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Progress values that only ever increase, as MCP requires, even when a
/// guest repeats or lowers a fraction: each report is at least a millionth
/// above the last. Fractions become `progress` out of a `total` of 1.
#[derive(Debug, Default)]
pub struct Progress {
    last: Option<f64>,
}

impl Progress {
    /// The `progress` value for a report of `fraction` (the last plus a
    /// step when the guest gives none).
    pub fn next(&mut self, fraction: Option<f32>) -> f64 {
        let floor = self.last.map_or(0.0, |last| last + 1e-6);
        let value = fraction.map_or(floor, |f| f64::from(f).max(floor));
        self.last = Some(value);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::component::Descriptor;
    use crate::catalog::component::Hints;
    use crate::catalog::component::Source;
    use crate::sandbox::outcome::ErrorKind;
    use crate::sandbox::outcome::Logs;
    use std::time::Duration;

    fn info(output_schema: Option<Value>, hints: Hints) -> ToolInfo {
        ToolInfo {
            descriptor: Descriptor {
                name: "echo".into(),
                title: Some("Echo".into()),
                description: "Repeats.".into(),
                input_schema: json!({ "type": "object" }),
                output_schema,
                hints,
            },
            component: "echo".into(),
            source: Source::Bytes,
            component_hash: String::new(),
            grants_hash: String::new(),
        }
    }

    #[test]
    fn the_result_size_cap_comes_from_the_output_limit() {
        let cap = |output_bytes| {
            let limits = crate::sandbox::limits::Limits {
                output_bytes,
                ..crate::sandbox::limits::Limits::default()
            };
            let tool = tool(&info(None, Hints::default()), Some(&limits));
            tool.meta.unwrap().0[MAX_RESULT_SIZE_KEY].as_u64()
        };
        assert_eq!(cap(64 << 10), Some(65_536));
        assert_eq!(cap(1 << 20), Some(MAX_RESULT_SIZE_CHARS as u64));
        assert!(tool(&info(None, Hints::default()), None).meta.is_none());
    }

    fn result(is_error: bool, details: Option<Value>) -> CallResult {
        CallResult {
            tool: "echo".into(),
            call_id: "1".into(),
            is_error,
            error_kind: is_error.then_some(ErrorKind::Timeout),
            output: "out".into(),
            details,
            duration: Duration::from_micros(1500),
            fuel_used: 42,
            peak_memory_bytes: 1 << 20,
            slot_wait: Duration::from_micros(250),
            net: crate::sandbox::net::NetUsage::default(),
            logs: Logs::default(),
            nested: Vec::new(),
            nested_usage: None,
        }
    }

    #[test]
    fn every_hint_is_explicit() {
        let hints = Hints {
            read_only: true,
            ..Hints::default()
        };
        let tool = serde_json::to_value(tool(&info(None, hints), None)).unwrap();
        assert_eq!(
            tool["annotations"],
            json!({
                "title": "Echo",
                "readOnlyHint": true,
                "destructiveHint": false,
                "idempotentHint": false,
                "openWorldHint": false
            })
        );
        assert_eq!(tool["inputSchema"], json!({ "type": "object" }));
        assert!(tool.get("outputSchema").is_none());
    }

    #[test]
    fn success_with_an_output_schema_has_structured_content() {
        let mapped = call_result(
            result(false, Some(json!({ "length": 3 }))),
            Structured::WithText,
        );
        let mapped = serde_json::to_value(mapped).unwrap();
        assert_eq!(mapped["structuredContent"], json!({ "length": 3 }));
        assert_eq!(mapped["content"][0]["text"], "out");
        assert_eq!(mapped["content"][1]["text"], r#"{"length":3}"#);
        assert_eq!(mapped["isError"], false);
        assert_eq!(
            mapped["_meta"][CALL_META_KEY],
            json!({ "error_kind": null, "duration_ms": 1.5, "fuel_used": 42,
                    "peak_memory_bytes": 1048576, "slot_wait_ms": 0.25,
                    "net": { "requests": 0, "denied": 0, "bytes_out": 0, "bytes_in": 0, "redactions": 0 } })
        );
    }

    #[test]
    fn errors_carry_no_structured_content() {
        let mapped = call_result(
            result(true, Some(json!({ "length": 3 }))),
            Structured::WithText,
        );
        let mapped = serde_json::to_value(mapped).unwrap();
        assert!(mapped.get("structuredContent").is_none());
        assert_eq!(mapped["isError"], true);
        assert_eq!(mapped["content"].as_array().unwrap().len(), 1);
        assert_eq!(mapped["_meta"][CALL_META_KEY]["error_kind"], "timeout");
    }

    #[test]
    fn details_without_an_output_schema_stay_out() {
        let mapped = call_result(result(false, Some(json!({ "n": 1 }))), Structured::No);
        assert!(mapped.structured_content.is_none());
        assert_eq!(mapped.content.len(), 1);
    }

    #[test]
    fn details_alone_are_structured_content_without_a_second_text_block() {
        let mapped = call_result(result(false, Some(json!({ "n": 1 }))), Structured::Alone);
        assert_eq!(mapped.structured_content, Some(json!({ "n": 1 })));
        assert_eq!(mapped.content.len(), 1);
        let mapped = serde_json::to_value(mapped).unwrap();
        assert_eq!(mapped["content"][0]["text"], "out");
    }

    #[test]
    fn progress_only_increases() {
        let mut progress = Progress::default();
        let values: Vec<f64> = [Some(0.5), Some(0.5), Some(0.2), None, Some(0.9)]
            .into_iter()
            .map(|f| progress.next(f))
            .collect();
        assert!(values.windows(2).all(|w| w[1] > w[0]), "{values:?}");
        assert_eq!(values[0], 0.5);
        assert!((values[4] - 0.9).abs() < 1e-6);
    }

    #[test]
    fn log_levels() {
        assert_eq!(logging_level(LogLevel::Warn), LoggingLevel::Warning);
        assert!(passes(LoggingLevel::Error, LoggingLevel::Warning));
        assert!(!passes(LoggingLevel::Info, LoggingLevel::Warning));
    }
}
