//! The registered tools by name: what a call looks its tool up in, and all
//! the catalog the call path needs (an entry's descriptor, validators,
//! grant of calls and provider).
//!
//! Threat model: the table is built by loading (first wins) and never
//! changed after it is shared: a call holds the table it started on, so a
//! reload cannot swap a tool under a running call tree.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use jsonschema::Validator;

use super::component::{Component, Descriptor, Source};
use super::schema::CheckedTool;
use super::upstream::UpstreamTool;
use crate::sandbox::limits::Limits;

/// The registered tools, by name: what a call looks its tool up in. Shared,
/// so that a call whose tool calls tools holds the table it started with,
/// and finishes on it whatever reloads meanwhile.
#[derive(Clone, Default)]
pub(crate) struct ToolTable {
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
    /// The identifier a script calls each tool by, made on first use.
    identifiers: OnceLock<HashMap<String, String>>,
}

impl ToolTable {
    /// A table of `entries` (whose names must be distinct), in that order.
    pub(crate) fn from_entries(entries: Vec<Arc<Entry>>) -> Self {
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(index, entry)| (entry.info.descriptor.name.clone(), index))
            .collect();
        ToolTable {
            entries,
            by_name,
            identifiers: OnceLock::new(),
        }
    }

    /// Adds `entry`, whose name no entry has yet.
    pub(crate) fn push(&mut self, entry: Arc<Entry>) {
        let name = entry.info.descriptor.name.clone();
        self.by_name.insert(name, self.entries.len());
        self.entries.push(entry);
        self.identifiers = OnceLock::new();
    }

    /// The Python identifier a script calls the tool `name` by: one to one
    /// over every tool of the table, whoever may call it
    /// ([`toolcage_code_mode::identifiers`]), so that a script naming a tool
    /// it may not call never reaches another.
    pub(crate) fn identifier(&self, name: &str) -> Option<&str> {
        let identifiers = self.identifiers.get_or_init(|| {
            let names = self.entries.iter().map(|e| e.info.descriptor.name.as_str());
            toolcage_code_mode::identifiers(names)
                .into_iter()
                .map(|(name, identifier)| (name.to_owned(), identifier))
                .collect()
        });
        identifiers.get(name).map(String::as_str)
    }

    /// The entry of the tool called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name.get(name).map(|&index| &self.entries[index])
    }

    /// Every entry, in registration order.
    pub(crate) fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    /// Every registered tool, in registration order.
    pub(crate) fn tools(&self) -> impl ExactSizeIterator<Item = &ToolInfo> {
        self.entries.iter().map(|entry| &entry.info)
    }
}

/// A registered tool: its descriptor and where it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolInfo {
    /// What the tool declares.
    #[serde(flatten)]
    pub descriptor: Descriptor,
    /// The component that provides it (its file stem, or the name it was
    /// loaded under).
    pub component: String,
    /// Where the component came from.
    pub source: Source,
    /// BLAKE3 hash of the component's bytes, hex.
    #[serde(skip)]
    pub component_hash: String,
    /// BLAKE3 hash of what the operator granted the component (its limits
    /// and mounts), hex: the same tool under other grants may answer
    /// differently.
    #[serde(skip)]
    pub grants_hash: String,
}

pub(crate) struct Entry {
    pub info: ToolInfo,
    pub provider: Provider,
    pub input: Validator,
    pub output: Option<Validator>,
    /// The schemas as JSON text, made once at load: what a caller that
    /// lists its callable tools hands its guest on every run.
    pub schemas: SchemaText,
}

/// A tool's input and output schemas as JSON text.
pub(crate) struct SchemaText {
    pub input: Arc<str>,
    pub output: Option<Arc<str>>,
}

/// What runs a registered tool's calls.
pub(crate) enum Provider {
    /// A component, in a fresh sandbox per call.
    Component(Arc<Component>),
    /// An upstream MCP server, outside any sandbox (made only with the
    /// `mcp-client` feature, which has the client).
    #[cfg_attr(not(feature = "mcp-client"), allow(dead_code))]
    Upstream(Arc<UpstreamTool>),
}

impl Entry {
    /// The entry of the tool `info` describes, run by `provider`, its
    /// arguments checked by `input` and its details by `output`.
    pub(crate) fn new(
        info: ToolInfo,
        provider: Provider,
        input: Validator,
        output: Option<Validator>,
    ) -> Self {
        let descriptor = &info.descriptor;
        let schemas = SchemaText {
            input: descriptor.input_schema.to_string().into(),
            output: descriptor
                .output_schema
                .as_ref()
                .map(|s| s.to_string().into()),
        };
        Entry {
            info,
            provider,
            input,
            output,
            schemas,
        }
    }

    /// The entry of `tool`, declared by `component`.
    pub(crate) fn of_component(tool: CheckedTool, component: &Arc<Component>) -> Self {
        let info = ToolInfo {
            descriptor: tool.descriptor,
            component: component.name.clone(),
            source: component.source.clone(),
            component_hash: component.hash.clone(),
            grants_hash: component.grants_hash.clone(),
        };
        let provider = Provider::Component(component.clone());
        Entry::new(info, provider, tool.input, tool.output)
    }

    /// The limits its calls run under.
    pub(crate) fn limits(&self) -> &Limits {
        match &self.provider {
            Provider::Component(component) => &component.sandbox.grants.limits,
            Provider::Upstream(tool) => &tool.limits,
        }
    }

    /// The tool name patterns it may call: an upstream tool calls none
    /// through toolcage.
    pub(crate) fn calls(&self) -> &Arc<[String]> {
        static NONE: std::sync::LazyLock<Arc<[String]>> =
            std::sync::LazyLock::new(|| Arc::from(Vec::new()));
        match &self.provider {
            Provider::Component(component) => &component.calls,
            Provider::Upstream(_) => &NONE,
        }
    }

    /// Its component, when a component provides it.
    pub(crate) fn component(&self) -> Option<&Arc<Component>> {
        match &self.provider {
            Provider::Component(component) => Some(component),
            Provider::Upstream(_) => None,
        }
    }

    /// Whether its calls may call tools (its component imports
    /// `toolcage:tool/tools`).
    pub(crate) fn imports_tools(&self) -> bool {
        self.component().is_some_and(|c| c.imports_tools)
    }
}

/// An upstream tool's entry for unit tests of the call path, which need
/// an entry but no guest: the tool `name` with `hints`, promising
/// `output_schema`, served by `link` under `limits`, with `secrets`.
#[cfg(test)]
pub(crate) fn upstream_entry(
    name: &str,
    hints: super::component::Hints,
    output_schema: Option<serde_json::Value>,
    link: Arc<dyn super::upstream::Upstream>,
    limits: Limits,
    secrets: crate::sandbox::secrets::Secrets,
) -> Entry {
    let input_schema = serde_json::json!({ "type": "object" });
    let validator =
        |schema: &serde_json::Value| jsonschema::validator_for(schema).expect("a valid schema");
    let output = output_schema.as_ref().map(validator);
    let input = validator(&input_schema);
    let info = ToolInfo {
        descriptor: Descriptor {
            name: name.into(),
            title: None,
            description: format!("The tool {name}."),
            input_schema,
            output_schema,
            hints,
        },
        component: "server".into(),
        source: Source::Mcp {
            server: "server".into(),
        },
        component_hash: String::new(),
        grants_hash: String::new(),
    };
    let tool = UpstreamTool {
        tool: name.into(),
        limits,
        link,
        secrets,
    };
    Entry::new(info, Provider::Upstream(Arc::new(tool)), input, output)
}
