//! What the MCP conventions record of a `tools/call`: the client's trace
//! context from `_meta` (on every revision, not only 2026-07-28, which
//! reserves the keys), the request, and the error type.

use rmcp::ErrorData as McpError;
use rmcp::model::CallToolResponse;
use rmcp::model::ProtocolVersion;

use super::CallContext;
use crate::telemetry::{CallOrigin, ServerRequest, Transport};

/// The origin of a `tools/call` request: its parent span from `_meta`, and
/// the request as the conventions describe it.
pub(super) fn origin(context: &CallContext) -> CallOrigin {
    let meta = &context.meta;
    let http = context.http();
    let header = |name: &str| {
        http.and_then(|parts| parts.headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map(str::to_string)
    };
    let protocol_version = meta
        .protocol_version()
        .map(|version| version.to_string())
        .or_else(|| header("mcp-protocol-version"))
        .or_else(|| match &context.session {
            Some(session) => session
                .peer
                .peer_info()
                .map(|info| info.protocol_version.to_string()),
            // What rmcp assumes of a request without the header.
            None => Some(ProtocolVersion::V_2025_03_26.to_string()),
        });
    CallOrigin::from_w3c(
        meta.get_traceparent(),
        meta.get_tracestate(),
        meta.get_baggage(),
    )
    .request(ServerRequest {
        method: "tools/call",
        request_id: context.id.to_string(),
        protocol_version,
        session_id: header("mcp-session-id"),
        transport: match http {
            Some(_) => Transport::Tcp,
            None => Transport::Pipe,
        },
    })
}

/// `error.type`: `tool_error` for a result with `isError`, the JSON-RPC
/// error code for an error; `None` on success.
pub(super) fn error_type(response: &Result<CallToolResponse, McpError>) -> Option<String> {
    match response {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            Some("tool_error".into())
        }
        Ok(_) => None,
        Err(error) => Some(error.code.0.to_string()),
    }
}
