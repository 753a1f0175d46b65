//! Everything one call runs inside: the engines and their pools of slots,
//! the per-call store with its limits, the operator's mounts, compiling and
//! linking a component, and the disk cache of compiled code. It knows
//! nothing of catalogs or frontends: it runs a component it is handed,
//! within the grants it is handed.
//!
//! Threat model: the guest is hostile, and every limit here is a wall
//! against it (see each module). Nothing a call does reaches the next call
//! or a concurrent one, and nothing it asks for widens what the operator
//! granted.

pub(crate) mod bindings;
pub(crate) mod cache;
pub(crate) mod compile;
pub(crate) mod content;
pub(crate) mod engine;
pub(crate) mod limits;
pub(crate) mod mount;
pub(crate) mod net;
pub(crate) mod outcome;
pub(crate) mod secrets;
pub(crate) mod settings;
mod store;

pub(crate) use store::{
    Files, Grants, Invocation, Observer, Returned, Sandbox, SlotShape, human_bytes, run,
};
