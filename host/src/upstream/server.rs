//! What the operator says of an upstream MCP server: how to start it, which
//! of its tools to take, and under which names.

#[cfg(feature = "mcp-client")]
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(feature = "mcp-client")]
use crate::catalog::pattern::glob_match;
use crate::catalog::pattern::is_pattern;
#[cfg(feature = "mcp-client")]
use crate::sandbox::limits::Limits;
use crate::sandbox::mount::Mount;
use crate::sandbox::secrets::Injection;

/// How long a server has, by default, to answer `initialize` and
/// `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// An upstream MCP server that toolcage starts over stdio and calls as a
/// client. Deny by default, from [`UpstreamServer::stdio`]:
/// - the environment is **empty**: only the variables named with
///   [`env`](Self::env) reach the server (name `PATH` too if it needs one);
/// - the working directory is toolcage's own unless [`cwd`](Self::cwd);
/// - every tool the server lists is taken ([`tools`](Self::tools) and
///   [`exclude_tools`](Self::exclude_tools) narrow that), named
///   `mcp__<name>__<tool>` ([`prefix`](Self::prefix) changes the prefix);
/// - a call has the registry's timeout and output limit
///   ([`timeout`](Self::timeout) and [`output_bytes`](Self::output_bytes)
///   change them);
/// - the server has [`DEFAULT_STARTUP_TIMEOUT`] to start and list its tools;
/// - it is not confined: it runs with toolcage's rights, unless
///   [`bubblewrap`](Self::bubblewrap) confines it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamServer {
    name: String,
    /// The Streamable HTTP endpoint, for a remote server; else the
    /// command runs a stdio one.
    url: Option<String>,
    headers: Vec<Injection>,
    command: String,
    args: Vec<String>,
    env: Vec<(String, EnvValue)>,
    cwd: Option<PathBuf>,
    prefix: Option<String>,
    tools: Vec<String>,
    exclude_tools: Vec<String>,
    timeout: Option<Duration>,
    output_bytes: Option<usize>,
    startup_timeout: Duration,
    confinement: Option<Bubblewrap>,
}

/// A confinement of a stdio server by Debian's `bubblewrap` (`bwrap`,
/// started by toolcage), from [`Bubblewrap::new`]: a read-only view of the
/// system (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`), fresh `/proc`, `/dev`
/// and a private `/tmp`, no other namespace shared (no network unless
/// [`network`](Self::network)), and of the host's files only the
/// [`mount`](Self::mount)s, read-only unless made so.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bubblewrap {
    mounts: Vec<Mount>,
    network: bool,
    program: Option<PathBuf>,
}

impl Bubblewrap {
    /// No mounts, no network, `bwrap` found on toolcage's `PATH`.
    pub fn new() -> Bubblewrap {
        Bubblewrap::default()
    }

    /// Runs the `bwrap` at `path` rather than the one on `PATH` (an
    /// unpacked package, say). It is started as toolcage's own user.
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = Some(path.into());
        self
    }

    /// The `bwrap` to run, when one was named.
    #[cfg(feature = "mcp-client")]
    pub(crate) fn named_program(&self) -> Option<&Path> {
        self.program.as_deref()
    }

    /// Lends the server `mount`: its host directory at its guest path,
    /// writable only if the mount is.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Shares toolcage's network with the server.
    pub fn network(mut self, network: bool) -> Self {
        self.network = network;
        self
    }

    /// `bwrap`'s arguments before `--` and the command.
    #[cfg(feature = "mcp-client")]
    pub(super) fn arguments(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
        ]
        .map(String::from)
        .to_vec();
        if self.network {
            args.push("--share-net".into());
        }
        for system in ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"] {
            args.extend(["--ro-bind-try".into(), system.into(), system.into()]);
        }
        for mount in &self.mounts {
            let bind = if mount.is_writable() {
                "--bind"
            } else {
                "--ro-bind"
            };
            let host = mount.host().to_string_lossy().into_owned();
            args.extend([bind.into(), host, mount.guest().to_string()]);
        }
        args
    }
}

/// The value of a variable in an upstream server's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// This text.
    Text(String),
    /// The value of the registry's secret of this name, read when the
    /// server starts (and restarts). Answers are redacted of it.
    Secret(String),
}

/// Why an upstream server's settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamServerError {
    /// The name is not `^[a-zA-Z0-9_-]{1,32}$`.
    #[error(
        "the MCP server name `{0}` is not valid: use 1 to 32 letters, digits, `_` and `-` (it becomes part of its tools' names)"
    )]
    Name(String),
    /// A `tools` or `exclude_tools` entry is not a tool name pattern.
    #[error(
        "`{0}` is not a tool name pattern: use letters, digits, `_` and `-`, with `*` for any run of characters"
    )]
    Pattern(String),
    /// The prefix has characters a tool name cannot.
    #[error("the prefix `{0}` is not valid: use letters, digits, `_` and `-`")]
    Prefix(String),
    /// An environment variable's name is empty or holds `=` or a NUL.
    #[error("`{0}` is not an environment variable's name")]
    EnvName(String),
    /// The command is empty.
    #[error("the MCP server `{0}` has no command")]
    Command(String),
    /// A remote server's URL is not http(s).
    #[error("`{0}` is not an http:// or https:// URL")]
    Url(String),
    /// A header cannot be sent as given.
    #[error("{0}")]
    Header(String),
}

/// `scheme://authority` of `url`.
fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    format!("{scheme}://{authority}")
}

impl UpstreamServer {
    /// A server started as `command` (looked up on toolcage's `PATH` when
    /// it has no `/`), speaking MCP on its stdin and stdout.
    pub fn stdio(
        name: &str,
        command: impl Into<String>,
    ) -> Result<UpstreamServer, UpstreamServerError> {
        let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        if !(1..=32).contains(&name.len()) || !name.bytes().all(valid) {
            return Err(UpstreamServerError::Name(name.to_string()));
        }
        let command = command.into();
        if command.is_empty() {
            return Err(UpstreamServerError::Command(name.to_string()));
        }
        Ok(UpstreamServer {
            name: name.to_string(),
            url: None,
            headers: Vec::new(),
            command,
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            prefix: None,
            tools: Vec::new(),
            exclude_tools: Vec::new(),
            timeout: None,
            output_bytes: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            confinement: None,
        })
    }

    /// A remote server at `url` (`https://`, or `http://` on loopback),
    /// spoken to over Streamable HTTP, reached only through the registry's
    /// egress policy: the URL must be granted by the shared network grants,
    /// and names must not resolve into private ranges unless allowed. The
    /// stdio settings (arguments, environment, directory, bubblewrap) do
    /// not apply to it.
    pub fn http(name: &str, url: &str) -> Result<UpstreamServer, UpstreamServerError> {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(UpstreamServerError::Url(url.to_string()));
        }
        let mut server = UpstreamServer::stdio(name, "-")?;
        server.command = String::new();
        server.url = Some(url.to_string());
        Ok(server)
    }

    /// Sends `header: value` with every request to a remote server; `value`
    /// may hold `{{ secrets.NAME }}` (read when the server is reached, and
    /// redacted from its answers). A secret goes only over https, or plain
    /// http to a loopback address literal.
    pub fn header(mut self, header: &str, value: &str) -> Result<Self, UpstreamServerError> {
        let url = self.url.clone().unwrap_or_default();
        let origin = origin(&url);
        let injection = Injection::new(&origin, header, value)
            .map_err(|e| UpstreamServerError::Header(e.to_string()))?;
        self.headers.push(injection);
        Ok(self)
    }

    /// Adds arguments to the command.
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the variable `name` in the server's environment.
    pub fn env(mut self, name: &str, value: EnvValue) -> Result<Self, UpstreamServerError> {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(UpstreamServerError::EnvName(name.to_string()));
        }
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.to_string(), value));
        Ok(self)
    }

    /// Starts the server in `dir`.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Names its tools `<prefix><tool>` instead of `mcp__<name>__<tool>`.
    pub fn prefix(mut self, prefix: &str) -> Result<Self, UpstreamServerError> {
        let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        if !prefix.bytes().all(valid) {
            return Err(UpstreamServerError::Prefix(prefix.to_string()));
        }
        self.prefix = Some(prefix.to_string());
        Ok(self)
    }

    /// Takes only the tools (by their name on the server) that match one of
    /// `patterns` (`*` for any run of characters).
    pub fn tools<S: Into<String>>(
        mut self,
        patterns: impl IntoIterator<Item = S>,
    ) -> Result<Self, UpstreamServerError> {
        self.tools.extend(checked_patterns(patterns)?);
        Ok(self)
    }

    /// Leaves out the tools (by their name on the server) that match one of
    /// `patterns`, even when [`tools`](Self::tools) takes them.
    pub fn exclude_tools<S: Into<String>>(
        mut self,
        patterns: impl IntoIterator<Item = S>,
    ) -> Result<Self, UpstreamServerError> {
        self.exclude_tools.extend(checked_patterns(patterns)?);
        Ok(self)
    }

    /// How long one call may take before it is cancelled upstream.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The most text and structured result one answer may hold.
    pub fn output_bytes(mut self, bytes: usize) -> Self {
        self.output_bytes = Some(bytes);
        self
    }

    /// How long the server has to answer `initialize` and `tools/list`.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Runs the server confined by bubblewrap, as `bubblewrap` says.
    /// Without it, the server runs with toolcage's rights.
    pub fn bubblewrap(mut self, bubblewrap: Bubblewrap) -> Self {
        self.confinement = Some(bubblewrap);
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What loading a server reads of its settings (with the `mcp-client` feature).
#[cfg(feature = "mcp-client")]
impl UpstreamServer {
    /// What the registry reports its tools as coming from: `mcp:<name>`.
    pub(crate) fn component_name(&self) -> String {
        format!("mcp:{}", self.name)
    }

    pub(crate) fn command(&self) -> &str {
        &self.command
    }

    pub(crate) fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    pub(crate) fn headers(&self) -> &[Injection] {
        &self.headers
    }

    pub(crate) fn arguments(&self) -> &[String] {
        &self.args
    }

    pub(crate) fn environment(&self) -> &[(String, EnvValue)] {
        &self.env
    }

    pub(crate) fn directory(&self) -> Option<&PathBuf> {
        self.cwd.as_ref()
    }

    pub(crate) fn startup(&self) -> Duration {
        self.startup_timeout
    }

    pub(crate) fn confinement(&self) -> Option<&Bubblewrap> {
        self.confinement.as_ref()
    }

    /// The name the server's tool `tool` is registered under.
    pub(crate) fn registered_name(&self, tool: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{tool}"),
            None => format!("mcp__{}__{tool}", self.name),
        }
    }

    /// Whether the server's tool `tool` is taken.
    pub(crate) fn offers(&self, tool: &str) -> bool {
        let matches = |patterns: &[String]| patterns.iter().any(|p| glob_match(p, tool));
        (self.tools.is_empty() || matches(&self.tools)) && !matches(&self.exclude_tools)
    }

    /// The limits its calls run under: `defaults`, with its own timeout and
    /// output limit.
    pub(crate) fn limits_or(&self, defaults: Limits) -> Limits {
        Limits {
            timeout: self.timeout.unwrap_or(defaults.timeout),
            output_bytes: self.output_bytes.unwrap_or(defaults.output_bytes),
            ..defaults
        }
    }
}

fn checked_patterns<S: Into<String>>(
    patterns: impl IntoIterator<Item = S>,
) -> Result<Vec<String>, UpstreamServerError> {
    patterns
        .into_iter()
        .map(Into::into)
        .map(|p| match is_pattern(&p) {
            true => Ok(p),
            false => Err(UpstreamServerError::Pattern(p)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_patterns_and_prefixes_are_checked() {
        assert!(UpstreamServer::stdio("git hub", "x").is_err());
        assert!(UpstreamServer::stdio("", "x").is_err());
        assert!(UpstreamServer::stdio("gh", "").is_err());
        let server = UpstreamServer::stdio("gh", "x").unwrap();
        assert!(server.clone().tools(["a.b"]).is_err());
        assert!(server.clone().prefix("a/").is_err());
        assert!(
            server
                .clone()
                .env("A=B", EnvValue::Text("x".into()))
                .is_err()
        );
        assert_eq!(server.registered_name("get-sum"), "mcp__gh__get-sum");
        let server = server.prefix("gh_").unwrap();
        assert_eq!(server.registered_name("issue"), "gh_issue");
    }

    #[test]
    fn tools_and_exclude_tools_filter_by_the_servers_names() {
        let server = UpstreamServer::stdio("s", "x").unwrap();
        assert!(server.offers("anything"));
        let server = server.tools(["get-*", "echo"]).unwrap();
        assert!(server.offers("get-sum") && server.offers("echo"));
        assert!(!server.offers("toggle-logging"));
        let server = server.exclude_tools(["get-env"]).unwrap();
        assert!(!server.offers("get-env") && server.offers("get-sum"));
    }
}
