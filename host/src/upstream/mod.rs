//! Upstream MCP servers: the tools an agent already has, in the registry
//! beside the components, under the same policy and the one call path.
//!
//! toolcage is the client. An upstream server's tools join the registry as
//! `mcp__<server>__<tool>` (the prefix is the server's to change), take part
//! in first-wins like any tool (a bundled or directory tool keeps its name;
//! the upstream one is reported as shadowed), and every call to one is
//! validated, permission-checked, timed out, capped, redacted and traced
//! like a component's, including a nested call from code mode's scripts.
//!
//! Threat model: an upstream server is not a component. A stdio server
//! runs as a child of toolcage, with toolcage's rights unless bubblewrap
//! confines it (a read-only system, only its mounts, no network unless
//! granted), in the directory given, with an **empty environment** plus
//! the variables the operator names (values may be secrets, then redacted
//! from every answer); its stderr goes to toolcage's log, cut per line and
//! per start. A remote server is reached over Streamable HTTP only through
//! the egress policy (`http`): its URL granted, no name resolving into a
//! private range unless allowed, redirects checked again, its secret
//! headers only over https or to a loopback literal. Its answers are
//! untrusted either way: descriptors pass the same checks as a component's
//! (a bad one is skipped with a diagnostic, the others load), a server that
//! does not initialize within its start-up timeout is reported and skipped,
//! a call waits at most the call's timeout (then is cancelled upstream), an
//! answer over the output limit is refused (one too long to read, past six
//! times the limit and 16 MiB, is skipped unread, `oversize`: its call ends
//! as `output_limit` and the server keeps running), events are bounded and
//! redacted, a flood
//! of list changes costs one `tools/list` per pause, a server may offer at
//! most [`MAX_TOOLS_PER_SERVER`] tools (more would flood the registry and a
//! model's context), and a server that dies is started again in the
//! background after a pause that grows while it keeps dying (its list of
//! tools taken again), its tools answering `unavailable` meanwhile.

#[cfg(feature = "mcp-client")]
mod answer;
#[cfg(feature = "mcp-client")]
mod client;
#[cfg(feature = "mcp-client")]
mod error;
#[cfg(feature = "mcp-client")]
mod http;
#[cfg(feature = "mcp-client")]
mod lifecycle;
#[cfg(feature = "mcp-client")]
mod load;
#[cfg(feature = "mcp-client")]
mod oversize;
#[cfg(feature = "mcp-client")]
mod process;
mod server;
#[cfg(feature = "mcp-client")]
mod session;

pub use server::{
    Bubblewrap, DEFAULT_STARTUP_TIMEOUT, EnvValue, UpstreamServer, UpstreamServerError,
};

/// The most tools one upstream server may offer, once its `tools` and
/// `exclude_tools` patterns have chosen: as for a component
/// ([`MAX_TOOLS_PER_COMPONENT`](crate::MAX_TOOLS_PER_COMPONENT)), more is a
/// flood of the registry and of a model's context. A server that offers
/// more at start is refused, naming the patterns that would narrow it; one
/// whose list grows past it later keeps the tools it had, with a warning.
pub const MAX_TOOLS_PER_SERVER: usize = crate::catalog::registry::MAX_TOOLS_PER_COMPONENT;
