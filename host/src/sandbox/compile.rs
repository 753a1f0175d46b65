//! Compiling and linking a component on an engine: the import check, then
//! the compile (or the disk cache's copy), then linking against the engine's
//! linker.
//!
//! Threat model: the bytes are untrusted. They are compiled and linked once,
//! at load, against exactly WASI and the host imports; anything else they
//! import makes the load fail, before the (possibly long) compile, so a
//! component cannot ask for a capability the host does not grant.
//! Compilation runs off the async executor.

use std::sync::Arc;

use wasmtime::component::{Component, Linker};

use super::bindings::ToolsetPre;
use super::cache::DiskCache;
use super::content::{Content, ContentError};
use super::state::CallState;

/// Why a component cannot be compiled and linked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ComponentError {
    /// Its bytes cannot be had.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// The bytes are not WebAssembly.
    #[error("not WebAssembly")]
    NotWasm,
    /// A core WebAssembly module, not a component.
    #[error("a core WebAssembly module, not a component")]
    CoreModule,
    /// It imports an interface toolcage does not provide (by name, before
    /// compiling).
    #[error("`{0}`")]
    UnknownImport(String),
    /// The engine for its slot shape cannot be created.
    #[error("the engine cannot be created")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The compiler refused it.
    #[error("it does not compile")]
    Compile(#[source] wasmtime::Error),
    /// The compiler's thread failed.
    #[error("the compiler thread failed")]
    CompilerThread(#[source] tokio::task::JoinError),
    /// Linking it failed: an import of the wrong version or type.
    #[error("its imports do not link")]
    Link(#[source] wasmtime::Error),
    /// It does not export `toolcage:tool/tool`.
    #[error("it does not export the tool interface")]
    Export(#[source] wasmtime::Error),
}

/// What a component is compiled and linked with: an engine, the linker that
/// provides WASI and the host imports on it, and the disk cache of what it
/// compiled.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    pub engine: wasmtime::Engine,
    pub linker: Arc<Linker<CallState>>,
    pub cache: Option<Arc<DiskCache>>,
    /// The engine's compilation settings, as [`DiskCache`] keys them.
    pub engine_key: String,
}

/// Takes `content` compiled from the engine's disk cache, or as the build
/// compiled it (a bundled component), or compiles it, and links it.
/// CPU-heavy and blocking: call it on a blocking thread.
pub(crate) fn compile(
    engine: &EngineHandle,
    content: Content,
) -> Result<ToolsetPre<CallState>, ComponentError> {
    let hash = content.hash.clone();
    let cached = engine
        .cache
        .as_ref()
        .and_then(|cache| cache.load(&engine.engine, &engine.engine_key, &hash));
    let component = match cached.or_else(|| precompiled(engine, &content)) {
        Some(component) => component,
        None => {
            let bytes = content.into_bytes()?;
            let component = compile_bytes(engine, &bytes)?;
            match &engine.cache {
                Some(cache) => cache.store(&engine.engine, &engine.engine_key, &hash, component),
                None => component,
            }
        }
    };
    let pre = engine
        .linker
        .instantiate_pre(&component)
        .map_err(ComponentError::Link)?;
    ToolsetPre::new(pre).map_err(ComponentError::Export)
}

/// Checks untrusted bytes (a component, importing only what toolcage
/// provides) and compiles them.
fn compile_bytes(engine: &EngineHandle, bytes: &[u8]) -> Result<Component, ComponentError> {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => return Err(ComponentError::CoreModule),
        Some([0, b'a', b's', b'm', ..]) => {}
        _ => return Err(ComponentError::NotWasm),
    }
    check_imports(bytes)?;
    Component::new(&engine.engine, bytes).map_err(ComponentError::Compile)
}

/// The code the build compiled a bundled component to, when this engine
/// can run it: compiled with the same settings ([`super::codegen`]) on a
/// machine with the CPU features this one has. Otherwise `None`, with a
/// notice, and the component is compiled (once: the disk cache keeps it).
fn precompiled(engine: &EngineHandle, content: &Content) -> Option<Component> {
    let precompiled = content.precompiled?;
    let fits = precompiled.engine_key == engine.engine_key
        && wasmtime::Engine::detect_precompiled(precompiled.code)
            == Some(wasmtime::Precompiled::Component);
    // SAFETY: the code was made by `Engine::precompile_component` in this
    // binary's own build script and embedded in the binary: it is as
    // trusted as the binary. wasmtime checks its version and settings
    // against the engine again before using it.
    #[allow(unsafe_code)]
    let loaded = fits.then(|| unsafe { Component::deserialize(&engine.engine, precompiled.code) });
    match loaded {
        Some(Ok(component)) => Some(component),
        Some(Err(e)) => {
            tracing::info!(
                "a bundled tool's precompiled code does not fit this machine ({e:#}): compiling it"
            );
            None
        }
        None => {
            tracing::info!(
                "a bundled tool was precompiled for another machine or engine settings: compiling it"
            );
            None
        }
    }
}

/// The interfaces a component may import: WASI 0.2's, as
/// `wasmtime_wasi::p2::add_to_linker_async` provides them (the sockets
/// checked against the grants, `ip-name-lookup` replaced by toolcage's:
/// `net::sockets`, stdout and stderr by the call's capped pipes: `state`),
/// outgoing `wasi:http` (every request goes through
/// `net::Egress`), read-only `wasi:config/store` (the component's settings)
/// and toolcage's interfaces.
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
    "wasi:config/store",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:http/outgoing-handler",
    "wasi:http/types",
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
    "toolcage:tool/tools",
    "toolcage:tool/session",
];

/// Whether the component `pre` links imports `toolcage:tool/tools`: only
/// such a component's calls are handed a way to call tools.
pub(crate) fn imports_tools(pre: &ToolsetPre<CallState>) -> bool {
    let component = pre.instance_pre().component();
    component
        .component_type()
        .imports(component.engine())
        .any(|(name, _)| name.starts_with("toolcage:tool/tools@"))
}

/// Refuses, before the (possibly long) compile, a component that imports an
/// interface toolcage does not provide, naming it. Only names are checked
/// here; versions and types are checked when linking. Bytes that do not
/// parse are left to the compiler, which says what is wrong with them.
fn check_imports(bytes: &[u8]) -> Result<(), ComponentError> {
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
                        return Err(ComponentError::UnknownImport(name.to_string()));
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
        assert!(check_imports(&importing("toolcage:tool/tools@0.1.1")).is_ok());
        assert!(check_imports(&importing("wasi:http/outgoing-handler@0.2.6")).is_ok());
        let error = check_imports(&importing("wasi:http/incoming-handler@0.2.6")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`wasi:http/incoming-handler@0.2.6`"),
            "{error}"
        );
        // What does not parse is left to the compiler.
        assert!(check_imports(b"\0asm\x0d\0\x01\0\xff").is_ok());
    }
}
