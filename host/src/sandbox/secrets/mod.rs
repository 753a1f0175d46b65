//! Secrets the tool never sees: held by the host, added to a tool's requests
//! at egress, and redacted from everything that comes back.
//!
//! Threat model: a tool that holds a credential can leak it: log it, echo it
//! to the model, send it to another host. So a tool never holds one:
//! - the operator's secrets live in the host only, in memory zeroed on drop;
//!   their `Debug` and `Display` print the name, never the value, and no
//!   error, log line or report carries a value;
//! - the sender adds a credential to a request only when an injection of the
//!   tool's component matches it exactly (scheme, host, port, then the path
//!   prefix and methods when given) and a grant lets the request through; the
//!   guest's own value for that header is replaced ([`inject`]);
//! - every secret's value, raw, base64-encoded and in any spelling that
//!   JSON-escapes, percent-encodes or writes as HTML character references
//!   any of its characters ([`escapes`]), is replaced with
//!   `[redacted secret NAME]` in every response
//!   header and body a tool receives, as the body streams and across chunk
//!   boundaries, and again in everything a call hands to the model or the
//!   operator: output, details, logs, progress, stdout and stderr
//!   ([`redact`]), and in every line toolcage logs about a call: network
//!   refusals and failures (a refused URL, a header's value) are redacted
//!   before they are cut, noted or traced; a response from an injection's
//!   origin must come unencoded, or it fails closed, since compressed bytes
//!   cannot be searched.
//!
//! What it cannot stop: a tool using the credential it cannot see toward the
//! injection's origin, within its grant. That is why injections are exact
//! and grants can be limited to methods and paths. Nor a server colluding
//! with the tool, which can send the secret in an encoding no redactor
//! knows: redaction defends against an honest reflection.
mod escapes;
pub(crate) mod inject;
pub(crate) mod redact;
mod secret;
mod set;

pub use inject::{Injection, InjectionError};
pub(crate) use secret::check_name;
pub use secret::{MIN_SECRET_BYTES, Secret, SecretError};
pub use set::Secrets;

/// The log targets whose debug and trace events carry a guest's bytes as
/// they are, before any redaction: wasmtime-wasi's (and wasi-io's and
/// wasi-http's) own events print what a guest writes to its streams and the
/// strings it passes to WASI, and rmcp's print the JSON-RPC messages an
/// upstream MCP server sends (a tool's answer, before toolcage redacts it).
/// toolcage's CLI drops those events whatever the log level; an embedder
/// with a subscriber of its own should do the same with
/// [`may_carry_unredacted_bytes`]. Every event toolcage itself logs about a
/// call is redacted before it is logged.
pub const UNREDACTED_LOG_TARGETS: &[&str] = &["wasmtime_wasi", "rmcp"];

/// Whether a tracing event of `target` at `level` may carry a guest's bytes
/// unredacted (see [`UNREDACTED_LOG_TARGETS`]): a filter for an embedder's
/// subscriber.
///
/// ```
/// use toolcage::may_carry_unredacted_bytes;
/// use tracing::Level;
///
/// assert!(may_carry_unredacted_bytes("wasmtime_wasi::p2::write_stream", &Level::DEBUG));
/// assert!(!may_carry_unredacted_bytes("wasmtime_wasi::p2::write_stream", &Level::INFO));
/// assert!(!may_carry_unredacted_bytes("toolcage::net", &Level::TRACE));
/// ```
pub fn may_carry_unredacted_bytes(target: &str, level: &tracing::Level) -> bool {
    *level > tracing::Level::INFO
        && UNREDACTED_LOG_TARGETS
            .iter()
            .any(|prefix| target.starts_with(prefix))
}
