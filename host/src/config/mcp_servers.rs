//! The `[mcp_servers.NAME]` tables: upstream MCP servers, stdio or remote,
//! and the settings every server takes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::grants::mounts;
use super::raw::RawUpstreamServer;
use super::secrets::SecretSource;
use super::{ConfigError, Resolve};
use crate::upstream::{Bubblewrap, EnvValue, UpstreamServer, UpstreamServerError};

/// `[mcp_servers.NAME]`: the upstream MCP servers, in name order.
pub(super) fn mcp_servers(
    raw: &BTreeMap<String, RawUpstreamServer>,
    secrets: &BTreeMap<String, SecretSource>,
    resolve: &Resolve,
) -> Result<Vec<UpstreamServer>, ConfigError> {
    raw.iter()
        .map(|(name, raw)| mcp_server(name, raw, secrets, resolve))
        .collect()
}

fn mcp_server(
    name: &str,
    raw: &RawUpstreamServer,
    secrets: &BTreeMap<String, SecretSource>,
    resolve: &Resolve,
) -> Result<UpstreamServer, ConfigError> {
    let key = |leaf: &str| format!("mcp_servers.{name}.{leaf}");
    let invalid = |leaf: &str, e: UpstreamServerError| ConfigError::invalid(key(leaf), e);
    if let Some(url) = &raw.url {
        return remote_mcp_server(name, url, raw);
    }
    let Some(command) = &raw.command else {
        return Err(ConfigError::invalid(
            key("command"),
            "give command (a stdio server) or url (a remote one)",
        ));
    };
    let mut server = UpstreamServer::stdio(name, command.clone())
        .map_err(|e| invalid("command", e))?
        .args(raw.args.iter().cloned());
    for (var, value) in &raw.env {
        let value = env_value(value, secrets)
            .map_err(|e| ConfigError::invalid(key(&format!("env.{var}")), e))?;
        server = server.env(var, value).map_err(|e| invalid("env", e))?;
    }
    if let Some(cwd) = &raw.cwd {
        server = server.cwd(resolve(cwd));
    }
    server = common_settings(name, server, raw)?;
    match raw.sandbox.as_deref() {
        Some("bubblewrap") => {
            let mut bubblewrap = Bubblewrap::new().network(raw.network.unwrap_or(false));
            for mount in mounts(&raw.mounts, &key("mounts"), resolve)? {
                bubblewrap = bubblewrap.mount(mount);
            }
            Ok(server.bubblewrap(bubblewrap))
        }
        None | Some("none") if raw.mounts.is_empty() && raw.network.is_none() => Ok(server),
        None | Some("none") => Err(ConfigError::invalid(
            key("sandbox"),
            "`mounts` and `network` confine a server: set sandbox = \"bubblewrap\" (without it, the server runs with toolcage's rights and sees everything)",
        )),
        Some(other) => Err(ConfigError::invalid(
            key("sandbox"),
            format!("`{other}` is not a sandbox: use \"bubblewrap\" or \"none\""),
        )),
    }
}

/// `[mcp_servers.NAME]` with a `url`: a remote server, with its headers
/// and the settings every server takes; the stdio ones are refused.
fn remote_mcp_server(
    name: &str,
    url: &str,
    raw: &RawUpstreamServer,
) -> Result<UpstreamServer, ConfigError> {
    let key = |leaf: &str| format!("mcp_servers.{name}.{leaf}");
    let stdio = [
        ("command", raw.command.is_some()),
        ("args", !raw.args.is_empty()),
        ("env", !raw.env.is_empty()),
        ("cwd", raw.cwd.is_some()),
        ("sandbox", raw.sandbox.is_some()),
        ("network", raw.network.is_some()),
        ("mounts", !raw.mounts.is_empty()),
    ];
    if let Some((leaf, _)) = stdio.iter().find(|(_, set)| *set) {
        return Err(ConfigError::invalid(
            key(leaf),
            "applies to a stdio server (command); this one has a url",
        ));
    }
    let invalid = |leaf: &str, e: UpstreamServerError| ConfigError::invalid(key(leaf), e);
    let mut server = UpstreamServer::http(name, url).map_err(|e| invalid("url", e))?;
    for (header, value) in &raw.headers {
        server = server
            .header(header, value)
            .map_err(|e| invalid(&format!("headers.{header}"), e))?;
    }
    common_settings(name, server, raw)
}

/// The settings every upstream server takes: the tools it offers, their
/// names, and the limits of its calls.
fn common_settings(
    name: &str,
    mut server: UpstreamServer,
    raw: &RawUpstreamServer,
) -> Result<UpstreamServer, ConfigError> {
    let key = |leaf: &str| format!("mcp_servers.{name}.{leaf}");
    let invalid = |leaf: &str, e: UpstreamServerError| ConfigError::invalid(key(leaf), e);
    server = server
        .exclude_tools(raw.exclude_tools.iter().cloned())
        .map_err(|e| invalid("exclude_tools", e))?;
    if let Some(tools) = &raw.tools {
        server = server
            .tools(tools.iter().cloned())
            .map_err(|e| invalid("tools", e))?;
    }
    if let Some(prefix) = &raw.prefix {
        server = server.prefix(prefix).map_err(|e| invalid("prefix", e))?;
    }
    let positive = |leaf: &str, value: Option<u64>| match value {
        Some(0) => Err(ConfigError::invalid(key(leaf), "must be greater than 0")),
        other => Ok(other),
    };
    if let Some(ms) = positive("timeout_ms", raw.timeout_ms)? {
        server = server.timeout(Duration::from_millis(ms));
    }
    if let Some(kib) = positive("output_kib", raw.output_kib)? {
        server = server.output_bytes(usize::try_from(kib << 10).unwrap_or(usize::MAX));
    }
    if let Some(ms) = positive("startup_timeout_ms", raw.startup_timeout_ms)? {
        server = server.startup_timeout(Duration::from_millis(ms));
    }
    Ok(server)
}

/// An `env` value: `{{ secrets.NAME }}` names a secret of `[secrets]`;
/// anything else is the text itself.
fn env_value(value: &str, secrets: &BTreeMap<String, SecretSource>) -> Result<EnvValue, String> {
    let inner = value
        .trim()
        .strip_prefix("{{")
        .and_then(|rest| rest.strip_suffix("}}"))
        .map(str::trim);
    let Some(inner) = inner else {
        return Ok(EnvValue::Text(value.to_string()));
    };
    match inner.strip_prefix("secrets.") {
        Some(name) if secrets.contains_key(name) => Ok(EnvValue::Secret(name.to_string())),
        Some(name) => Err(format!(
            "names the secret `{name}`, which [secrets] does not define"
        )),
        None => Err(format!("`{value}` is not `{{{{ secrets.NAME }}}}`")),
    }
}
