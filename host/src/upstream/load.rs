//! Starting an upstream server and putting its tools in a registry.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;

use super::MAX_TOOLS_PER_SERVER;
use super::error::LinkError;
use super::lifecycle::Link;
use super::server::UpstreamServer;
use crate::catalog::component::Source;
use crate::catalog::error::LoadError;
use crate::catalog::live::LiveRegistry;
use crate::catalog::registry::{FileReport, Registry};
use crate::catalog::schema::{self, CheckedTool};
use crate::catalog::table::{Entry, Provider, ToolInfo};
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
    pub async fn load_mcp_server(&mut self, server: &UpstreamServer) -> FileReport {
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
    pub async fn load_mcp_servers(&mut self, servers: &[UpstreamServer]) -> Vec<FileReport> {
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
    pub async fn load_mcp_server(&self, server: &UpstreamServer) -> FileReport {
        let (report, entries, offer) = prepare(&self.current(), server).await;
        self.add_server(report, entries, offer).await
    }

    /// Starts every server of `servers` at once, then adds their tools in
    /// the order given, as [`load_mcp_server`](Self::load_mcp_server) does.
    pub async fn load_mcp_servers(&self, servers: &[UpstreamServer]) -> Vec<FileReport> {
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
async fn prepare(registry: &Registry, server: &UpstreamServer) -> Prepared {
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
    let limits = server.limits_or(registry.default_limits());
    let started = Link::start(server.clone(), secrets.clone(), egress, limits.output_bytes);
    let (link, tools) = match started.await {
        Ok(started) => started,
        Err(error) => {
            tracing::warn!(server = %server.name(), "{error}");
            report.error = Some(LoadError::upstream(error));
            return (report, Vec::new(), None);
        }
    };
    if let Err(error) = within_cap(server, &tools) {
        tracing::warn!(server = %server.name(), "{error}");
        report.error = Some(LoadError::upstream(error));
        return (report, Vec::new(), None);
    }
    let offer = Offer {
        server: server.clone(),
        link,
        limits,
        secrets,
    };
    let entries = offer.entries(tools, &[]);
    (report, entries, Some(offer))
}

/// What a started server's tools are made of.
#[derive(Clone)]
struct Offer {
    server: UpstreamServer,
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
            let info = ToolInfo {
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
            let provider = Provider::Upstream(Arc::new(tool));
            let entry = Entry::new(info, provider, checked.input, checked.output);
            entries.push(Arc::new(entry));
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
fn within_cap(server: &UpstreamServer, tools: &[Tool]) -> Result<(), LinkError> {
    let offered = tools.iter().filter(|t| server.offers(&t.name)).count();
    if offered <= MAX_TOOLS_PER_SERVER {
        return Ok(());
    }
    Err(LinkError::TooManyTools {
        server: server.name().to_string(),
        offered,
    })
}

/// The upstream tool `tool` as a registry descriptor, checked like a
/// component's.
fn checked(server: &UpstreamServer, tool: &rmcp::model::Tool) -> Result<CheckedTool, String> {
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

#[cfg(test)]
mod tests {
    use rmcp::model::{JsonObject, ToolAnnotations};
    use serde_json::json;

    use super::*;
    use crate::catalog::component::Hints;

    fn object(value: serde_json::Value) -> Arc<JsonObject> {
        match value {
            serde_json::Value::Object(object) => Arc::new(object),
            other => panic!("not an object: {other}"),
        }
    }

    /// A tool named `name`, taking an object.
    fn tool(name: &str) -> Tool {
        Tool::new(
            name.to_string(),
            "does things",
            object(json!({ "type": "object" })),
        )
    }

    fn server() -> UpstreamServer {
        UpstreamServer::stdio("gh", "x").unwrap()
    }

    /// The descriptor `checked` makes of `tool`, or why it refused it.
    fn descriptor(server: &UpstreamServer, tool: &Tool) -> Result<CheckedTool, String> {
        checked(server, tool)
    }

    fn refused(server: &UpstreamServer, tool: &Tool) -> String {
        match descriptor(server, tool) {
            Ok(checked) => panic!("{:?} was taken", checked.descriptor),
            Err(why) => why,
        }
    }

    #[test]
    fn a_tool_is_registered_under_the_servers_prefix() {
        let checked = descriptor(&server(), &tool("get-sum")).unwrap();
        assert_eq!(checked.descriptor.name, "mcp__gh__get-sum");
        assert_eq!(checked.descriptor.description, "does things");
        assert_eq!(checked.descriptor.input_schema, json!({ "type": "object" }));
        assert!(checked.output.is_none());

        let prefixed = server().prefix("git_").unwrap();
        let checked = descriptor(&prefixed, &tool("get-sum")).unwrap();
        assert_eq!(checked.descriptor.name, "git_get-sum");
        let bare = server().prefix("").unwrap();
        let checked = descriptor(&bare, &tool("get-sum")).unwrap();
        assert_eq!(checked.descriptor.name, "get-sum");
    }

    #[test]
    fn the_title_is_the_tools_own_else_its_annotations() {
        let annotated = tool("t").annotate(ToolAnnotations::with_title("From annotations"));
        let checked = descriptor(&server(), &annotated).unwrap();
        assert_eq!(
            checked.descriptor.title.as_deref(),
            Some("From annotations")
        );
        let titled = annotated.with_title("Its own");
        let checked = descriptor(&server(), &titled).unwrap();
        assert_eq!(checked.descriptor.title.as_deref(), Some("Its own"));
        let checked = descriptor(&server(), &tool("t")).unwrap();
        assert_eq!(checked.descriptor.title, None);

        let mut undescribed = tool("t");
        undescribed.description = None;
        let checked = descriptor(&server(), &undescribed).unwrap();
        assert_eq!(checked.descriptor.description, "");
    }

    #[test]
    fn a_bad_descriptor_is_refused_saying_why() {
        let why = refused(&server(), &tool("a b"));
        assert!(why.contains("\"mcp__gh__a b\""), "{why}");
        // Within the name limit on the server, past it once prefixed.
        let long = "x".repeat(60);
        assert!(descriptor(&server().prefix("").unwrap(), &tool(&long)).is_ok());
        let why = refused(&server(), &tool(&long));
        assert!(why.contains("does not match"), "{why}");

        let mut not_an_object = tool("t");
        not_an_object.input_schema = object(json!({ "type": "string" }));
        let why = refused(&server(), &not_an_object);
        assert!(why.contains(r#""type": "object""#), "{why}");

        let mut bad_output = tool("t");
        bad_output.output_schema = Some(object(json!({ "type": 12 })));
        let why = refused(&server(), &bad_output);
        assert!(
            why.contains("output-schema is not a valid JSON Schema"),
            "{why}"
        );
        let mut good_output = tool("t");
        good_output.output_schema = Some(object(json!({ "type": "object" })));
        let checked = descriptor(&server(), &good_output).unwrap();
        assert!(checked.output.is_some());
        assert_eq!(
            checked.descriptor.output_schema,
            Some(json!({ "type": "object" }))
        );
    }

    #[test]
    fn hints_take_mcps_defaults_when_the_server_says_nothing() {
        let hints_of = |annotations: ToolAnnotations| {
            let tool = tool("t").annotate(annotations);
            descriptor(&server(), &tool).unwrap().descriptor.hints
        };
        let unsaid = Hints {
            read_only: false,
            idempotent: false,
            destructive: true,
            open_world: true,
        };
        assert_eq!(hints_of(ToolAnnotations::new()), unsaid);
        assert_eq!(
            descriptor(&server(), &tool("t")).unwrap().descriptor.hints,
            unsaid
        );
        // Read-only is never destructive, whatever else it says.
        let read_only = hints_of(ToolAnnotations::new().read_only(true).destructive(true));
        assert!(read_only.read_only && !read_only.destructive && read_only.open_world);
        let closed = hints_of(
            ToolAnnotations::new()
                .idempotent(true)
                .destructive(false)
                .open_world(false),
        );
        let expected = Hints {
            read_only: false,
            idempotent: true,
            destructive: false,
            open_world: false,
        };
        assert_eq!(closed, expected);

        let flags = hints(&ToolAnnotations::new().read_only(true).open_world(false));
        assert!(flags.contains(WitHints::READ_ONLY));
        assert!(!flags.contains(WitHints::DESTRUCTIVE));
        assert!(!flags.contains(WitHints::OPEN_WORLD));
        assert!(!flags.contains(WitHints::IDEMPOTENT));
    }

    /// `count` tools, `t000`, `t001`, …
    fn tools(count: usize) -> Vec<Tool> {
        (0..count).map(|i| tool(&format!("t{i:03}"))).collect()
    }

    #[test]
    fn a_server_may_offer_at_most_its_cap_once_its_patterns_chose() {
        assert!(within_cap(&server(), &tools(MAX_TOOLS_PER_SERVER)).is_ok());
        assert!(within_cap(&server(), &[]).is_ok());
        let over = tools(MAX_TOOLS_PER_SERVER + 1);
        let Err(error) = within_cap(&server(), &over) else {
            panic!("{} tools taken", over.len());
        };
        assert!(matches!(
            error,
            LinkError::TooManyTools { offered, .. } if offered == MAX_TOOLS_PER_SERVER + 1
        ));
        assert_eq!(
            error.to_string(),
            format!(
                "the MCP server `gh` offers {} tools; a server may offer at most {MAX_TOOLS_PER_SERVER}: choose the ones to keep with `tools` or `exclude_tools`",
                MAX_TOOLS_PER_SERVER + 1
            )
        );
        // Only what the patterns take counts.
        let narrowed = server().exclude_tools(["t000"]).unwrap();
        assert!(within_cap(&narrowed, &over).is_ok());
        let chosen = server().tools(["t00*"]).unwrap();
        assert!(within_cap(&chosen, &over).is_ok());
        let still_over = server().exclude_tools(["nothing*"]).unwrap();
        assert!(within_cap(&still_over, &over).is_err());
    }
}
