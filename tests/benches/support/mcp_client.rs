//! An in-process MCP client of an [`McpServer`] for benches: rmcp's client
//! on revision 2026-07-28 over an in-memory duplex, declaring elicitation
//! (so that a question comes back as an input-required result), served by
//! toolcage's rmcp handler as `serve` serves a connection. No pipe or
//! socket: the figures are the server's protocol work and the calls.
//! Each bench including it uses part of it.
#![allow(dead_code)]

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitationCapability, Implementation, InputRequiredResult, InputResponses, ProtocolVersion,
    TASKS_EXTENSION_ID,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};
use toolcage::integration::rmcp::Handler;
use toolcage::mcp::McpServer;

/// A connected client.
pub type Client = RunningService<RoleClient, ClientConfig>;

/// A 2026-07-28 client of `server`, on the current runtime.
pub async fn connect(server: &McpServer) -> Client {
    connect_as(server, ClientCapabilities::default()).await
}

/// A 2026-07-28 client of `server` that declares the tasks extension.
pub async fn connect_with_tasks(server: &McpServer) -> Client {
    let mut capabilities = ClientCapabilities::default();
    let tasks = [(TASKS_EXTENSION_ID.to_string(), Default::default())];
    capabilities.extensions = Some(tasks.into_iter().collect());
    connect_as(server, capabilities).await
}

async fn connect_as(server: &McpServer, mut capabilities: ClientCapabilities) -> Client {
    let (ours, theirs) = tokio::io::duplex(4 << 20);
    let handler = Handler::from(server.for_connection());
    tokio::spawn(async move {
        let running = rmcp::ServiceExt::serve(handler, tokio::io::split(theirs))
            .await
            .expect("the server side starts");
        running.waiting().await.ok();
    });
    capabilities.elicitation = Some(ElicitationCapability::new());
    let config = ClientConfig::new(capabilities, Implementation::new("bench", "1"));
    let modern = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    config
        .serve_with_lifecycle(tokio::io::split(ours), modern)
        .await
        .expect("the client connects")
}

/// `tools/call` of `tool` with `arguments`, one round.
pub async fn call_once(client: &Client, tool: &str, arguments: Value) -> CallToolResponse {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
    client
        .peer()
        .call_tool_once(params)
        .await
        .expect("answered")
}

/// `tools/call` of `tool` with `arguments` that completes in one round.
pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    match call_once(client, tool, arguments).await {
        CallToolResponse::Complete(result) => result,
        other => panic!("{tool} did not complete: {other:?}"),
    }
}

/// The call of `tool` with `arguments` up to its question, then its retry
/// with a yes to each: the result, and the size of the state the client
/// carried.
pub async fn call_approving(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> (CallToolResult, usize) {
    let CallToolResponse::InputRequired(asked) = call_once(client, tool, arguments.clone()).await
    else {
        panic!("{tool} asked nothing");
    };
    let carried = asked.request_state.as_ref().map_or(0, String::len);
    (approve(client, tool, arguments, asked).await, carried)
}

/// The retry of the call of `tool` with `arguments` that `asked`, with a
/// yes to each question and the state it carried.
pub async fn approve(
    client: &Client,
    tool: &str,
    arguments: Value,
    asked: InputRequiredResult,
) -> CallToolResult {
    let yes = json!({ "action": "accept", "content": { "approve": true } });
    let answers: InputResponses = asked
        .input_requests
        .unwrap_or_default()
        .into_keys()
        .map(|key| (key, yes.clone()))
        .collect();
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    let params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(arguments)
        .with_input_responses(answers)
        .with_request_state(asked.request_state.unwrap_or_default());
    match client
        .peer()
        .call_tool_once(params)
        .await
        .expect("answered")
    {
        CallToolResponse::Complete(result) => result,
        other => panic!("{tool}'s retry did not complete: {other:?}"),
    }
}

/// The bytes of every text block of `result`: what a client forwarding
/// `content` gives the model.
pub fn text_bytes(result: &CallToolResult) -> usize {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.len()))
        .sum()
}
