//! What tools exist: components loaded from bytes, files, directories and
//! pulled `oci://` references (through the lock, [`oci`]) into a first-wins
//! name table, their descriptors checked and their schemas compiled; the
//! live registry that swaps in reloads atomically, and the watcher that
//! drives it. It knows nothing of frontends.
//!
//! Threat model: a component is untrusted, and so is every file in a tools
//! directory. A name taken first keeps its owner, at load and at every
//! reload, so a late component never hijacks a tool; a file that fails to
//! load is reported and skipped, and the tools already serving keep serving.

#[cfg(feature = "bundled-tools")]
pub(crate) mod bundled;
pub(crate) mod component;
pub(crate) mod elicit;
pub(crate) mod error;
pub(crate) mod grants;
pub(crate) mod interpreter;
pub(crate) mod live;
pub mod oci;
pub(crate) mod pattern;
pub(crate) mod permissions;
pub(crate) mod registry;
pub(crate) mod schema;
pub(crate) mod table;
pub(crate) mod upstream;
pub(crate) mod watch;
