//! A loaded component: its bytes' hash, its pre-linked instance, and the
//! limits and mounts the operator granted it.
//!
//! Threat model: the bytes are untrusted. They are compiled and linked once,
//! at load, against exactly WASI and the host imports; anything else they
//! import makes the load fail, so a component cannot ask for a capability the
//! host does not grant. Compilation runs off the async executor.

use std::path::PathBuf;
use std::sync::Arc;

use crate::sandbox::Sandbox;

/// What a tool declares about itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Descriptor {
    /// Unique name, matching `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// Short human title.
    pub title: Option<String>,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: serde_json::Value,
    /// JSON Schema of `details` on success, when the tool promises one.
    pub output_schema: Option<serde_json::Value>,
    /// Side-effect hints.
    pub hints: Hints,
}

/// Side-effect hints a tool declares. They are the tool's own claims: they
/// steer scheduling and user interfaces, not security.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Hints {
    /// Does not change its environment.
    pub read_only: bool,
    /// Repeating a call with the same arguments has no further effect.
    pub idempotent: bool,
    /// May overwrite or delete data.
    pub destructive: bool,
    /// Talks to an open world of external entities.
    pub open_world: bool,
}

impl Hints {
    /// The names of the hints that are set, e.g. `["read_only", "idempotent"]`.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.read_only, "read_only"),
            (self.idempotent, "idempotent"),
            (self.destructive, "destructive"),
            (self.open_world, "open_world"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect()
    }
}

/// Where a component came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on disk.
    File(PathBuf),
    /// Bytes handed to the registry by an embedder.
    Bytes,
    /// The standard toolset compiled into toolcage.
    Bundled,
    /// A component pulled from an OCI registry, loaded through the lock.
    Oci {
        /// The reference, as configured.
        reference: String,
        /// The manifest's digest the lock resolved it to.
        digest: String,
    },
    /// An upstream MCP server's tools, not a component.
    Mcp {
        /// The server's name.
        server: String,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Bytes => f.write_str("bytes"),
            Source::Bundled => f.write_str("bundled"),
            Source::Mcp { server } => write!(f, "mcp:{server}"),
            Source::Oci { reference, digest } => match reference.contains('@') || digest.is_empty()
            {
                true => f.write_str(reference),
                false => write!(f, "{reference}@{digest}"),
            },
        }
    }
}

impl serde::Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A component ready to be instantiated, once per call.
pub(crate) struct Component {
    pub name: String,
    pub source: Source,
    /// BLAKE3 of the component's bytes, hex.
    pub hash: String,
    /// BLAKE3 of the component's limits, mounts and other grants, hex.
    pub grants_hash: String,
    /// The tool name patterns it may call (`toolcage:tool/tools`); none:
    /// every call it makes is refused.
    pub calls: Arc<[String]>,
    /// Whether it imports `toolcage:tool/tools`, so that its calls are
    /// handed a way to call tools.
    pub imports_tools: bool,
    /// What its calls run with.
    pub sandbox: Arc<Sandbox>,
}
