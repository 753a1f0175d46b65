//! Starting an upstream server and putting its tools in a registry.

use std::sync::Arc;

use super::McpServer;
use super::link::Link;
use crate::LoadError;
use crate::catalog::component::Source;
use crate::catalog::live::LiveRegistry;
use crate::catalog::registry::{Entry, FileReport, Provider, Registry};
use crate::catalog::schema::{self, CheckedTool};
use crate::catalog::upstream::UpstreamTool;
use crate::sandbox::bindings::{WitDescriptor, WitHints};

impl Registry {
    /// Starts the upstream MCP server `server`, and registers the tools it
    /// lists (those its `tools`/`exclude_tools` patterns let through) as
    /// `<prefix><tool>`, first name wins. A server that cannot be started
    /// or does not answer `initialize` and `tools/list` within its start-up
    /// timeout is reported in the report's `error`, and nothing is
    /// registered; a tool whose descriptor fails the checks is skipped with
    /// a warning naming it. The server runs for as long as the registry (or
    /// any snapshot of it) holds one of its tools.
    pub async fn load_mcp_server(&mut self, server: &McpServer) -> FileReport {
        let (mut report, entries) = prepare(self, server).await;
        let offerer = report.component.clone();
        self.register_entries(&offerer, &entries, &mut report);
        report
    }
}

impl Registry {
    /// Starts every server of `servers` at once, then registers their tools
    /// in the order given (first name wins): a server slow to start delays
    /// the others by at most its start-up timeout.
    pub async fn load_mcp_servers(&mut self, servers: &[McpServer]) -> Vec<FileReport> {
        let prepared = futures::future::join_all(servers.iter().map(|s| prepare(self, s))).await;
        let mut reports = Vec::new();
        for (mut report, entries) in prepared {
            let offerer = report.component.clone();
            self.register_entries(&offerer, &entries, &mut report);
            reports.push(report);
        }
        reports
    }
}

impl LiveRegistry {
    /// Starts every server of `servers` at once, then adds their tools in
    /// the order given, as [`load_mcp_server`](Self::load_mcp_server) does.
    pub async fn load_mcp_servers(&self, servers: &[McpServer]) -> Vec<FileReport> {
        let current = self.current();
        let prepared =
            futures::future::join_all(servers.iter().map(|s| prepare(&current, s))).await;
        let mut reports = Vec::new();
        for (report, entries) in prepared {
            reports.push(match report.error {
                Some(_) => report,
                None => self.add_late(report, entries).await,
            });
        }
        reports
    }

    /// Starts the upstream MCP server `server` (as
    /// [`Registry::load_mcp_server`] does) and adds its tools after every
    /// tool the live registry has: a bundled or directory tool keeps its
    /// name, the upstream one is reported as shadowed. An upstream tool,
    /// once it owns a name, keeps it across reloads of the directories.
    pub async fn load_mcp_server(&self, server: &McpServer) -> FileReport {
        let (report, entries) = prepare(&self.current(), server).await;
        match report.error {
            Some(_) => report,
            None => self.add_late(report, entries).await,
        }
    }
}

/// Starts `server` and makes an entry of each tool it offers, for
/// `registry`'s secrets and limits; the report has no tools in it yet.
async fn prepare(registry: &Registry, server: &McpServer) -> (FileReport, Vec<Arc<Entry>>) {
    let mut report = FileReport {
        component: server.component_name(),
        source: Source::Mcp {
            server: server.name().to_string(),
        },
        registered: Vec::new(),
        shadowed: Vec::new(),
        error: None,
    };
    let secrets = registry.secrets().clone();
    let (link, tools) = match Link::start(server.clone(), secrets.clone()).await {
        Ok(started) => started,
        Err(message) => {
            tracing::warn!(server = %server.name(), "{message}");
            report.error = Some(LoadError::Upstream(message));
            return (report, Vec::new());
        }
    };
    let link = Arc::new(link);
    let limits = server.limits_or(registry.default_limits());
    let mut entries = Vec::new();
    for tool in tools.into_iter().filter(|t| server.offers(&t.name)) {
        let upstream_name = tool.name.to_string();
        let checked = match checked(server, &tool) {
            Ok(checked) => checked,
            Err(problem) => {
                tracing::warn!(
                    server = %server.name(),
                    tool = %upstream_name,
                    "the upstream tool `{upstream_name}` is skipped: {problem}"
                );
                continue;
            }
        };
        let info = crate::ToolInfo {
            descriptor: checked.descriptor,
            component: report.component.clone(),
            source: report.source.clone(),
            component_hash: String::new(),
            grants_hash: String::new(),
        };
        let tool = UpstreamTool {
            tool: upstream_name,
            limits,
            link: link.clone(),
            secrets: secrets.clone(),
        };
        entries.push(Arc::new(Entry {
            info,
            provider: Provider::Upstream(Arc::new(tool)),
            input: checked.input,
            output: checked.output,
        }));
    }
    (report, entries)
}

/// The upstream tool `tool` as a registry descriptor, checked like a
/// component's.
fn checked(server: &McpServer, tool: &rmcp::model::Tool) -> Result<CheckedTool, String> {
    let annotations = tool.annotations.clone().unwrap_or_default();
    let json = |object: &rmcp::model::JsonObject| serde_json::Value::Object(object.clone());
    schema::check_descriptor(WitDescriptor {
        name: server.registered_name(&tool.name),
        title: tool.title.clone().or(annotations.title.clone()),
        description: tool.description.as_deref().unwrap_or_default().to_string(),
        input_schema: json(&tool.input_schema).to_string(),
        output_schema: tool.output_schema.as_deref().map(|s| json(s).to_string()),
        hints: hints(&annotations),
    })
}

/// The tool's annotations as hints, with MCP's defaults: a tool that does
/// not say otherwise may change its environment, destructively, in an open
/// world, and is not idempotent.
fn hints(annotations: &rmcp::model::ToolAnnotations) -> WitHints {
    let read_only = annotations.read_only_hint.unwrap_or(false);
    [
        (read_only, WitHints::READ_ONLY),
        (
            annotations.idempotent_hint.unwrap_or(false),
            WitHints::IDEMPOTENT,
        ),
        (
            !read_only && annotations.destructive_hint.unwrap_or(true),
            WitHints::DESTRUCTIVE,
        ),
        (
            annotations.open_world_hint.unwrap_or(true),
            WitHints::OPEN_WORLD,
        ),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .fold(WitHints::empty(), |hints, (_, flag)| hints | flag)
}
