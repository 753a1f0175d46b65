//! rmcp's view of the server: the [`ServerHandler`] that answers each MCP
//! request. Public only through [`crate::integration::rmcp`], which
//! follows rmcp's version; the transports of [`super`] use it inside.
//!
//! Threat model: that of [`super`]; every request here comes from the
//! client, untrusted.

use std::ops::Deref;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest,
    CustomResult, ErrorCode, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;

use super::{CallContext, FIXED_LIST_TTL, LIVE_LIST_TTL, McpServer, mapping, parse, tasks};
use crate::code_mode;

/// An [`McpServer`] as rmcp's [`ServerHandler`], to serve it on a transport
/// of one's own with rmcp (`handler.serve(transport)`). Made with
/// [`Handler::from`]; like the server it wraps, make one per connection
/// ([`McpServer::for_connection`]).
#[derive(Clone)]
pub struct Handler(McpServer);

impl From<McpServer> for Handler {
    fn from(server: McpServer) -> Self {
        Handler(server)
    }
}

impl Deref for Handler {
    type Target = McpServer;

    fn deref(&self) -> &McpServer {
        &self.0
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .build();
        if self.tasks.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.to_string(), Default::default());
        }
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new("toolcage", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Each tool runs in a WebAssembly sandbox with limits on fuel, time, memory and output, seeing only the directories the operator mounted. Error results say what to fix.".into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // In load order, the same for every client: any cache may keep it.
        let ttl = match self.tools.is_fixed() {
            true => FIXED_LIST_TTL,
            false => LIVE_LIST_TTL,
        };
        let registry = self.tools.current();
        let permissions = self.permissions.current();
        let tools = registry
            .tools()
            .filter(|info| !self.code_mode_only || code_mode::is_code_mode_tool(info))
            .map(|info| {
                let shown = code_mode::shown(&registry, &permissions, info);
                mapping::tool(&shown, registry.limits(&info.descriptor.name))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(ttl.as_millis() as u64)
            .with_cache_scope(CacheScope::Public))
    }

    /// `initialize` belongs to the revisions before 2026-07-28, which get
    /// no tasks: their result does not offer the extension.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if result.protocol_version.has_initialize()
            && let Some(extensions) = result.capabilities.extensions.as_mut()
        {
            extensions.remove(TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        Ok(result)
    }

    /// A request rmcp could not read as its method's type reaches here as
    /// one of an unknown method. Two are answered -32602 (invalid params),
    /// saying what is wrong, rather than -32601: a `tools/call` whose
    /// `params` are malformed, and a `tasks/*` request whose `taskId` is not
    /// a string (the extension answers an invalid task id as an unknown
    /// one).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let method = request.method.as_str();
        if method == "tools/call" {
            return Err(McpError::invalid_params(
                parse::call_params_problem(request.params.as_ref()),
                None,
            ));
        }
        if self.tasks.is_some() && tasks::METHODS.contains(&method) {
            let task_id = request
                .params
                .as_ref()
                .and_then(|params| params.get("taskId"))
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            return Err(McpError::invalid_params(
                format!(
                    "Invalid params for {method}: `taskId` must be a string (the id a task handle gave), not {task_id}."
                ),
                Some(json!({ "taskId": task_id })),
            ));
        }
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.sessions.add(context.peer, &self.tools);
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut filter = SubscriptionFilter::new();
        filter.tools_list_changed = Some(true);
        Some(filter)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        use rmcp::service::SubscriptionSendError;
        use tokio::sync::broadcast::error::RecvError;
        // A stream that did not ask for tool changes only waits for its end.
        if context.sink().accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        let mut changes = self.tools.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        match context.sink().notify_tool_list_changed().await {
                            Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                            Err(_) => return Ok(()),
                        }
                    }
                    Err(RecvError::Closed) => {
                        context.cancelled().await;
                        return Ok(());
                    }
                },
            }
        }
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let task = self
            .served_tasks()?
            .get(&request.task_id, tasks::owner(&context))
            .await?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = tasks::owner(&context);
        self.served_tasks()?
            .update(&request.task_id, owner, request.input_responses)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.served_tasks()?
            .cancel(&request.task_id, tasks::owner(&context))
            .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, CallContext::from(context)).await
    }
}
