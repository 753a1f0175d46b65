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
use super::registry::{FileReport, Registry};
use crate::LoadError;
use crate::sandbox::content::Content;

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

impl Registry {
    /// Registers the bundled standard toolset. Call it before loading any
    /// directory so that the bundled names cannot be shadowed.
    pub async fn load_bundled(&mut self) -> Vec<FileReport> {
        let code_mode = self.code_mode().is_enabled();
        let wanted = COMPONENTS
            .iter()
            .filter(|(name, _)| code_mode || *name != super::code::COMPONENT);
        let sources = wanted.map(|(name, bytes)| async move {
            (
                name.to_string(),
                Source::Bundled,
                Content::of_bytes(bytes.to_vec())
                    .await
                    .map_err(LoadError::from),
            )
        });
        self.load_sources(sources).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_component_is_embedded() {
        let names: Vec<&str> = super::COMPONENTS.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["fs", "calc", "fetch", "code"]);
        assert!(
            super::COMPONENTS
                .iter()
                .all(|(_, bytes)| bytes.starts_with(b"\0asm"))
        );
    }
}
