//! Why an upstream server could not be started, listed or called.
//!
//! Each variant's text is the whole message, as the load report, the log
//! and (for [`LinkError::NotRunning`]) the model read it: it names the
//! server, says what failed, and never holds a secret's value (a secret
//! missing is named, not shown). A variant that wraps a failure keeps it as
//! its source, for a caller that wants to tell them apart.

use std::time::Duration;

use super::MAX_TOOLS_PER_SERVER;
use crate::sandbox::text::{human_duration, with_causes};

/// Why a link to an upstream server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The server is remote, and the registry has no network to reach it
    /// through.
    #[error("the MCP server `{server}` may not be reached: the registry has no network")]
    NoNetwork { server: String },
    /// The egress policy refused the server's URL, or an HTTP client for
    /// it could not be made.
    #[error("the MCP server `{server}` may not be reached: {why}")]
    Refused { server: String, why: String },
    /// A header names a secret that is not set.
    #[error(
        "the MCP server `{server}`'s header {header} names the secret `{secret}`, which is not set"
    )]
    HeaderSecret {
        server: String,
        header: String,
        secret: String,
    },
    /// A variable of its environment names a secret that is not set.
    #[error(
        "the MCP server `{server}`'s variable {variable} names the secret `{secret}`, which is not set"
    )]
    EnvSecret {
        server: String,
        variable: String,
        secret: String,
    },
    /// Its command is not on toolcage's `PATH`.
    #[error("the MCP server `{server}`'s command `{command}` is not on PATH")]
    NotOnPath { server: String, command: String },
    /// It is to be confined, and `bwrap` is not on toolcage's `PATH`.
    #[error(
        "the MCP server `{server}` is to run under bubblewrap, but `bwrap` is not on PATH (Debian's package `bubblewrap`)"
    )]
    NoBubblewrap { server: String },
    /// Its process could not be started.
    #[error("the MCP server `{server}` did not start: `{command}`: {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// Its process was started without the pipes asked for.
    #[error("the MCP server `{server}` has no standard streams")]
    NoStreams { server: String },
    /// It failed the `initialize` handshake (the text holds the source's
    /// causes too). Boxed: rmcp's error holds whole messages.
    #[error("the MCP server `{server}` did not initialize: {}", with_causes(.source))]
    Initialize {
        server: String,
        #[source]
        source: Box<rmcp::service::ClientInitializeError>,
    },
    /// It did not finish the `initialize` handshake within its start-up
    /// timeout.
    #[error("the MCP server `{server}` did not initialize within {}", human_duration(*.after))]
    InitializeTimeout { server: String, after: Duration },
    /// It failed `tools/list`. Boxed, as [`Initialize`](Self::Initialize)'s.
    #[error("the MCP server `{server}` did not list its tools: {source}")]
    ListTools {
        server: String,
        #[source]
        source: Box<rmcp::ServiceError>,
    },
    /// It did not answer `tools/list` within its start-up timeout.
    #[error("the MCP server `{server}` did not list its tools within {}", human_duration(*.after))]
    ListToolsTimeout { server: String, after: Duration },
    /// It offers more than [`MAX_TOOLS_PER_SERVER`] tools, once its
    /// patterns have chosen.
    #[error(
        "the MCP server `{server}` offers {offered} tools; a server may offer at most {MAX_TOOLS_PER_SERVER}: choose the ones to keep with `tools` or `exclude_tools`"
    )]
    TooManyTools { server: String, offered: usize },
    /// It is not running (`why`), and is started again after `wait`: what
    /// a call to it answers meanwhile.
    #[error(
        "The MCP server `{server}` is not running ({why}); it is started again in {}. Try again then, or use another tool.",
        human_duration(*.wait)
    )]
    NotRunning {
        server: String,
        why: String,
        wait: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_are_the_ones_reports_and_models_read() {
        let server = "s".to_string();
        let spawn = LinkError::Spawn {
            server: server.clone(),
            command: "nope".into(),
            source: std::io::ErrorKind::NotFound.into(),
        };
        assert!(
            spawn
                .to_string()
                .starts_with("the MCP server `s` did not start: `nope`: "),
            "{spawn}"
        );
        assert!(std::error::Error::source(&spawn).is_some());
        let timeout = LinkError::InitializeTimeout {
            server: server.clone(),
            after: Duration::from_millis(1500),
        };
        assert_eq!(
            timeout.to_string(),
            format!(
                "the MCP server `s` did not initialize within {}",
                human_duration(Duration::from_millis(1500))
            )
        );
        let closed = LinkError::NotRunning {
            server,
            why: "it was closed".into(),
            wait: Duration::ZERO,
        };
        assert_eq!(
            closed.to_string(),
            format!(
                "The MCP server `s` is not running (it was closed); it is started again in {}. Try again then, or use another tool.",
                human_duration(Duration::ZERO)
            )
        );
    }
}
