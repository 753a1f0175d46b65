//! A loaded component: its bytes' hash, its pre-linked instance, and the
//! limits and mounts the operator granted it.
//!
//! Threat model: the bytes are untrusted. They are compiled and linked once,
//! at load, against exactly WASI and the host imports; anything else they
//! import makes the load fail, so a component cannot ask for a capability the
//! host does not grant. Compilation runs off the async executor.

use std::path::PathBuf;
use std::sync::Arc;

use crate::LoadError;
use crate::bindings::ToolsetPre;
use crate::engine::EngineHandle;
use crate::registry::Content;
use crate::sandbox::{CallState, Sandbox};

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
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Bytes => f.write_str("bytes"),
            Source::Bundled => f.write_str("bundled"),
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
    /// BLAKE3 of the component's limits and mounts, hex.
    pub grants_hash: String,
    /// What its calls run with.
    pub sandbox: Arc<Sandbox>,
}

/// Takes `content` compiled from the engine's disk cache, or compiles it,
/// and links it. CPU-heavy and blocking: call it on a blocking thread.
pub(crate) fn compile(
    engine: &EngineHandle,
    content: Content,
) -> Result<ToolsetPre<CallState>, LoadError> {
    let hash = content.hash.clone();
    let cached = engine
        .cache
        .as_ref()
        .and_then(|cache| cache.load(&engine.engine, &engine.engine_key, &hash));
    let component = match cached {
        Some(component) => component,
        None => {
            let bytes = content.into_bytes()?;
            let bytes = bytes.as_slice();
            match bytes.get(..8) {
                Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => return Err(LoadError::CoreModule),
                Some([0, b'a', b's', b'm', ..]) => {}
                _ => return Err(LoadError::NotWasm),
            }
            check_imports(bytes)?;
            let component = wasmtime::component::Component::new(&engine.engine, bytes)
                .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
            match &engine.cache {
                Some(cache) => cache.store(&engine.engine, &engine.engine_key, &hash, component),
                None => component,
            }
        }
    };
    let pre = engine
        .linker
        .instantiate_pre(&component)
        .map_err(|e| LoadError::Import(format!("{e:#}")))?;
    ToolsetPre::new(pre).map_err(|e| LoadError::Export(format!("{e:#}")))
}

/// The interfaces a component may import: WASI 0.2's, as
/// `wasmtime_wasi::p2::add_to_linker_async` provides them (the network ones
/// are there but deny every address), and toolcage's host interface.
const PROVIDED: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "toolcage:tool/host",
];

/// Refuses, before the (possibly long) compile, a component that imports an
/// interface toolcage does not provide, naming it. Only names are checked
/// here; versions and types are checked when linking. Bytes that do not
/// parse are left to the compiler, which says what is wrong with them.
fn check_imports(bytes: &[u8]) -> Result<(), LoadError> {
    use wasmparser::{Parser, Payload};
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        match payload {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 1 => {
                for import in imports {
                    let Ok(import) = import else {
                        return Ok(());
                    };
                    let name = import.name.name;
                    let interface = name
                        .split_once('@')
                        .map_or(name, |(interface, _)| interface);
                    if !PROVIDED.contains(&interface) {
                        return Err(LoadError::Import(format!(
                            "`{name}` (toolcage provides the WASI 0.2 cli, clocks, filesystem, io, random and sockets interfaces, and toolcage:tool/host; a JavaScript tool built with componentize-js needs `--disable http fetch-event`)"
                        )));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_imports;

    /// `(component (type (instance)) (import "<name>" (instance (type 0))))`
    fn importing(name: &str) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        let mut section = vec![1u8]; // one import
        section.push(0x00); // a plain name
        section.push(name.len() as u8);
        section.extend(name.as_bytes());
        section.extend([0x05, 0x00]); // instance type 0
        let mut types = vec![1u8, 0x42, 0x00]; // one type: an empty instance
        let mut out = Vec::new();
        out.push(7u8); // type section
        out.push(types.len() as u8);
        out.append(&mut types);
        out.push(10u8); // import section
        out.push(section.len() as u8);
        out.extend(section);
        bytes.extend(out);
        bytes
    }

    #[test]
    fn unknown_interfaces_are_refused_by_name() {
        assert!(check_imports(&importing("wasi:cli/environment@0.2.6")).is_ok());
        assert!(check_imports(&importing("toolcage:tool/host@0.1.0")).is_ok());
        let error = check_imports(&importing("wasi:http/types@0.2.6")).unwrap_err();
        assert!(
            error.to_string().contains("`wasi:http/types@0.2.6`"),
            "{error}"
        );
        // What does not parse is left to the compiler.
        assert!(check_imports(b"\0asm\x0d\0\x01\0\xff").is_ok());
    }
}
