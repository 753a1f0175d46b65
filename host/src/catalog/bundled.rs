//! The standard toolset, compiled into the crate: the `fs` component
//! (`read_file`, `write_file`, `edit_file`, `list_dir`, `glob`, `grep`), the
//! `calc` component (`calc`), the `fetch` component (`fetch`), which
//! reaches only what the operator grants it, and, when code mode is on, the
//! `code` component (`run_code`, `search_tools`, `describe_tool`).
//!
//! Threat model: bundled tools are registered before any tool directory, so a
//! dropped component can never take one of their names (first wins). They
//! are sandboxed like every other tool: they see only the operator's mounts.

use super::component::Source;
use super::error::LoadError;
use super::registry::{FileReport, Registry};
use crate::sandbox::content::{Content, Precompiled};

/// A component built into the binary by its build (`host/build.rs`).
pub(crate) struct Bundled {
    pub name: &'static str,
    pub wasm: &'static [u8],
    /// The BLAKE3 hash of `wasm`, as [`Content`] keeps it.
    pub hash: &'static str,
    /// Its code, compiled by the build with the runtime's compiler settings
    /// (none when the build cross-compiled).
    pub precompiled: Option<Precompiled>,
}

// The bundled components: `COMPONENTS: &[Bundled]`.
include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

impl Registry {
    /// Registers the bundled standard toolset. Call it before loading any
    /// directory so that the bundled names cannot be shadowed.
    pub async fn load_bundled(&mut self) -> Vec<FileReport> {
        let code_mode = self.code_mode().is_enabled();
        let wanted = COMPONENTS
            .iter()
            .filter(|bundled| code_mode || bundled.name != super::interpreter::COMPONENT);
        let sources = wanted.map(|bundled| async move {
            let content = Content::bundled(bundled.wasm, bundled.hash, bundled.precompiled);
            (
                bundled.name.to_string(),
                Source::Bundled,
                Ok::<_, LoadError>(content),
            )
        });
        self.load_sources(sources).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_component_is_embedded() {
        let names: Vec<&str> = super::COMPONENTS.iter().map(|c| c.name).collect();
        assert_eq!(names, ["fs", "calc", "fetch", "code"]);
        for bundled in super::COMPONENTS {
            assert!(bundled.wasm.starts_with(b"\0asm"), "{}", bundled.name);
            assert_eq!(blake3::hash(bundled.wasm).to_hex().as_str(), bundled.hash);
            // Built natively, so compiled ahead of time.
            assert!(bundled.precompiled.is_some(), "{}", bundled.name);
        }
    }
}
