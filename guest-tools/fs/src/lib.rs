//! toolcage's standard file tools: `read_file`, `write_file`, `edit_file`,
//! `list_dir`, `glob` and `grep`.
//!
//! The tools use plain `std::fs` inside the WASI sandbox, where only the
//! directories the operator mounted exist. Every path argument is a guest
//! path and must be absolute; see [`paths`] for the policy. The pure logic
//! (paging, binary detection, matching, diffs, output formatting) sits next to
//! each tool and is tested natively with `cargo test`.

pub mod edit;
pub mod glob;
pub mod grep;
pub mod list;
pub mod names;
pub mod paths;
pub mod read;
pub mod text;
pub mod walk;
pub mod write;

pub use edit::EditFile;
pub use glob::Glob;
pub use grep::Grep;
pub use list::ListDir;
pub use read::ReadFile;
pub use write::WriteFile;

toolcage_guest::export_tools!(ReadFile, WriteFile, EditFile, ListDir, Glob, Grep);

/// A scratch directory for native tests, removed on drop.
#[cfg(test)]
pub(crate) struct TestDir(std::path::PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "toolcage-fs-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        TestDir(dir)
    }

    /// The absolute path of `relative` inside the directory, as a string.
    pub(crate) fn path(&self, relative: &str) -> String {
        let path = if relative.is_empty() {
            self.0.clone()
        } else {
            self.0.join(relative)
        };
        path.to_string_lossy().into_owned()
    }

    /// Writes `content` to `relative`, creating parent directories.
    pub(crate) fn write(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.0.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent directories");
        }
        std::fs::write(path, content).expect("write a test file");
    }

    pub(crate) fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.0.join(relative)).expect("read a test file")
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
