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
//! Threat model: an upstream server is not a component, and nothing
//! sandboxes it here. A stdio server runs as a child of toolcage, with
//! toolcage's rights, in the directory given, with an **empty environment**
//! plus the variables the operator names (values may be secrets, which are
//! then redacted from every answer); its stderr goes to toolcage's log, cut
//! per line and per connection. Its answers are untrusted: descriptors pass
//! the same checks as a component's (a bad one is skipped with a
//! diagnostic, the others load), a server that does not initialize within
//! its start-up timeout is reported and skipped, a call waits at most the
//! call's timeout (then is cancelled upstream), an answer over the output
//! limit is refused, and a server that dies is restarted on a later call
//! after a growing pause, its tools answering `unavailable` meanwhile.

#[cfg(feature = "mcp")]
mod answer;
#[cfg(feature = "mcp")]
mod http;
#[cfg(feature = "mcp")]
mod link;
#[cfg(feature = "mcp")]
mod load;
mod server;

pub use server::{Bubblewrap, DEFAULT_STARTUP_TIMEOUT, EnvValue, McpServer, McpServerError};
