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
//!
//! Imports go one way, from the top floor down, with no circles:
//! - `run`: admitting and running a call;
//! - `engine`: the engines, their pools and the epoch ticker;
//! - `compile`, `cache`, `content`: compiling and linking a component;
//! - `codegen`: the compiler's settings, which the build shares;
//! - `state`: a call's Store state, composing the capabilities below;
//! - the capabilities and grants: `outcome` (the guest's events), `settings`,
//!   `tools`, `net`, `secrets`, `mount`, `limits`, `slots`;
//! - leaves: `bindings`, `text`.

pub(crate) mod bindings;
pub(crate) mod cache;
pub(crate) mod codegen;
pub(crate) mod compile;
pub(crate) mod content;
pub(crate) mod engine;
pub(crate) mod limits;
pub(crate) mod mount;
pub(crate) mod net;
pub(crate) mod outcome;
mod run;
pub(crate) mod secrets;
pub(crate) mod settings;
pub(crate) mod slots;
mod state;
pub(crate) mod text;
pub(crate) mod tools;

pub(crate) use bindings::WitDescriptor;
pub(crate) use compile::imports_tools;
pub(crate) use outcome::Observer;
pub(crate) use run::{Compiled, Files, Grants, GuestReturn, Invocation, Sandbox, run};
pub(crate) use state::SlotShape;
pub(crate) use text::human_bytes;
pub(crate) use tools::{CallableTool, NO_SESSIONS, NestedRequest, NestedResponse, ToolCalls};
