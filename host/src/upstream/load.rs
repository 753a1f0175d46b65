//! Starting an upstream server and putting its tools in a registry.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;

use super::link::Link;
use super::{MAX_TOOLS_PER_SERVER, McpServer};
use crate::LoadError;
use crate::catalog::component::Source;
use crate::catalog::live::LiveRegistry;
use crate::catalog::registry::{Entry, FileReport, Provider, Registry};
use crate::catalog::schema::{self, CheckedTool};
use crate::catalog::upstream::UpstreamTool;
use crate::sandbox::bindings::{WitDescriptor, WitHints};
use crate::sandbox::limits::Limits;
use crate::sandbox::secrets::Secrets;

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
        let (mut report, entries, _) = prepare(self, server).await;
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
        for (mut report, entries, _) in prepared {
            let offerer = report.component.clone();
            self.register_entries(&offerer, &entries, &mut report);
            reports.push(report);
        }
        reports
    }
}

impl LiveRegistry {
    /// Starts the upstream MCP server `server` (as
    /// [`Registry::load_mcp_server`] does) and adds its tools after every
    /// tool the live registry has: a bundled or directory tool keeps its
    /// name, the upstream one is reported as shadowed. An upstream tool,
    /// once it owns a name, keeps it across reloads of the directories.
    ///
    /// The live registry follows the server's tool list: each
    /// `notifications/tools/list_changed` lists its tools again and swaps
    /// them in atomically, under the same first-wins rules, and its
    /// subscribers hear of the change (as after a reload).
    pub async fn load_mcp_server(&self, server: &McpServer) -> FileReport {
        let (report, entries, offer) = prepare(&self.current(), server).await;
        self.add_server(report, entries, offer).await
    }

    /// Starts every server of `servers` at once, then adds their tools in
    /// the order given, as [`load_mcp_server`](Self::load_mcp_server) does.
    pub async fn load_mcp_servers(&self, servers: &[McpServer]) -> Vec<FileReport> {
        let current = self.current();
        let prepared =
            futures::future::join_all(servers.iter().map(|s| prepare(&current, s))).await;
        let mut reports = Vec::new();
        for (report, entries, offer) in prepared {
            reports.push(self.add_server(report, entries, offer).await);
        }
        reports
    }

    async fn add_server(
        &self,
        report: FileReport,
        entries: Vec<Arc<Entry>>,
        offer: Option<Offer>,
    ) -> FileReport {
        let Some(offer) = offer else { return report };
        let report = self.add_late(report, entries).await;
        follow(self, offer);
        report
    }
}

/// A started server: the report of its start (no tools in it yet), the
/// entries of the tools it offers, and its link when it started.
type Prepared = (FileReport, Vec<Arc<Entry>>, Option<Offer>);

/// Starts `server` and makes an entry of each tool it offers, for
/// `registry`'s secrets and limits.
async fn prepare(registry: &Registry, server: &McpServer) -> Prepared {
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
    let egress = registry.shared_network();
    let (link, tools) = match Link::start(server.clone(), secrets.clone(), egress).await {
        Ok(started) => started,
        Err(message) => {
            tracing::warn!(server = %server.name(), "{message}");
            report.error = Some(LoadError::Upstream(message));
            return (report, Vec::new(), None);
        }
    };
    if let Err(message) = within_cap(server, &tools) {
        tracing::warn!(server = %server.name(), "{message}");
        report.error = Some(LoadError::Upstream(message));
        return (report, Vec::new(), None);
    }
    let offer = Offer {
        server: server.clone(),
        link,
        limits: server.limits_or(registry.default_limits()),
        secrets,
    };
    let entries = offer.entries(tools, &[]);
    (report, entries, Some(offer))
}

/// What a started server's tools are made of.
#[derive(Clone)]
struct Offer {
    server: McpServer,
    link: Arc<Link>,
    limits: Limits,
    secrets: Secrets,
}

impl Offer {
    /// An entry for each tool of `tools` the server's settings take. A tool
    /// that `old` (its entries before a change) has unchanged keeps its
    /// entry, and so the name it owns.
    fn entries(&self, tools: Vec<Tool>, old: &[Arc<Entry>]) -> Vec<Arc<Entry>> {
        let server = &self.server;
        let source = Source::Mcp {
            server: server.name().to_string(),
        };
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
            if let Some(same) = old.iter().find(|e| e.info.descriptor == checked.descriptor) {
                entries.push(same.clone());
                continue;
            }
            let info = crate::ToolInfo {
                descriptor: checked.descriptor,
                component: server.component_name(),
                source: source.clone(),
                component_hash: String::new(),
                grants_hash: String::new(),
            };
            let tool = UpstreamTool {
                tool: upstream_name,
                limits: self.limits,
                link: self.link.clone(),
                secrets: self.secrets.clone(),
            };
            entries.push(Arc::new(Entry {
                info,
                provider: Provider::Upstream(Arc::new(tool)),
                input: checked.input,
                output: checked.output,
            }));
        }
        entries
    }
}

/// The least time between two reloads of one server's tools: a server that
/// floods `notifications/tools/list_changed` costs one `tools/list` per
/// pause, not one per notification.
const RELOAD_PAUSE: Duration = Duration::from_millis(250);

/// Follows the server's tool list for `live`: each
/// `notifications/tools/list_changed` (after [`RELOAD_PAUSE`]) lists its
/// tools again and swaps them in, first wins as at load. Ends when the live
/// registry is gone, and lets the link go (so the server ends once no
/// snapshot holds one of its tools).
fn follow(live: &LiveRegistry, offer: Offer) {
    let weak = live.downgrade();
    let mut reports = live.subscribe();
    let changes = offer.link.changes();
    let component = offer.server.component_name();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = changes.notified() => {}
                () = gone(&mut reports) => return,
            }
            tokio::time::sleep(RELOAD_PAUSE).await;
            let Some(live) = weak.upgrade() else { return };
            let tools = match offer.link.list_tools().await {
                Ok(tools) => tools,
                Err(why) => {
                    tracing::warn!(server = %offer.server.name(), "its tools changed, but listing them failed: {why}");
                    continue;
                }
            };
            if let Err(message) = within_cap(&offer.server, &tools) {
                tracing::warn!(server = %offer.server.name(), "its tools changed, and are kept as they were: {message}");
                continue;
            }
            let old = live.late_entries(&component).await;
            let entries = offer.entries(tools, &old);
            live.replace_late(&component, entries).await;
        }
    });
}

/// Waits until the live registry whose changes `reports` hears is gone.
async fn gone<T: Clone>(reports: &mut tokio::sync::broadcast::Receiver<T>) {
    use tokio::sync::broadcast::error::RecvError;
    while !matches!(reports.recv().await, Err(RecvError::Closed)) {}
}

/// Refuses a list in which `server` offers more than
/// [`MAX_TOOLS_PER_SERVER`] tools, saying how to narrow it.
fn within_cap(server: &McpServer, tools: &[Tool]) -> Result<(), String> {
    let offered = tools.iter().filter(|t| server.offers(&t.name)).count();
    if offered <= MAX_TOOLS_PER_SERVER {
        return Ok(());
    }
    Err(format!(
        "the MCP server `{}` offers {offered} tools; a server may offer at most {MAX_TOOLS_PER_SERVER}: choose the ones to keep with `tools` or `exclude_tools`",
        server.name()
    ))
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
