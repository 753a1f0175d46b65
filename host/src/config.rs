//! `toolcage.toml`: what an operator grants, in a file.
//!
//! Threat model: grants (mounts, limits, network, secrets, permissions) come
//! from the operator only: this file, command-line flags or the embedding
//! API, never a tool or a model. The file names where secrets are (an
//! environment variable, a file), never their values, so it can be
//! committed and shown; the values are read by [`Config::read_secrets`]. A typo must not silently grant or drop something, so unknown keys
//! and bad values are errors that name the key. Relative paths are resolved
//! against the directory of the file, not the process's working directory.
//!
//! ```toml
//! tools = ["tools", "oci://ghcr.io/team/grep:1.2"]  # directories of *.wasm and
//!                                # pulled components, loaded in order
//! bundled = true                 # the standard toolset, registered first
//!
//! [limits]                       # defaults for every component
//! fuel = 10_000_000_000          # or "unlimited"
//! timeout_ms = 30_000
//! memory_mib = 256
//! output_kib = 1024
//! log_kib = 64
//! stack_kib = 1024
//! net_requests = 50              # HTTP requests a call may send
//! net_out_kib = 16_384           # request bytes a call may send
//! net_in_kib = 65_536            # response bytes a call may receive
//! net_connections = 4            # connections a call may hold at once
//! net_first_byte_ms = 10_000     # to connect, then to the response head
//! net_between_bytes_ms = 10_000  # a response body's longest stall
//! nested_calls = 100             # nested calls one call tree may make
//! nested_depth = 4               # how deep a call tree may nest
//! nested_kib = 16_384            # bytes its nested calls may pass
//!
//! [network]                      # for every component; nothing by default
//! allow = ["https://api.github.com", { url = "https://*.example.com/v1", methods = ["GET"] }]
//! allow_private = []             # CIDRs granted names may resolve into
//! ca_file = "internal-ca.pem"    # extra TLS roots, besides the web PKI's
//!
//! [[mounts]]                     # lent to every component
//! host = "."
//! guest = "/workspace"
//! mode = "ro"                    # or "rw"; "ro" when omitted
//!
//! [components.fs.limits]         # per component, by file stem
//! timeout_ms = 60_000
//!
//! [components.fetch.network]     # per component, in addition
//! allow = ["http://127.0.0.1:8080", "https://api.github.com"]
//!
//! [secrets.GITHUB_TOKEN]         # held by the host, never seen by a tool
//! env = "GITHUB_TOKEN"           # or file = "secrets/github-token"
//!
//! [[components.fetch.network.inject]]
//! url = "https://api.github.com" # an exact origin, with an optional path prefix
//! header = "Authorization"
//! value = "Bearer {{ secrets.GITHUB_TOKEN }}"
//! methods = ["GET"]              # optional
//!
//! [components.fetch.config]      # settings, read through wasi:config/store
//! default_owner = "octocat"
//!
//! [components.research]          # tools its tools may call; none by default
//! calls = ["fetch", "read_*"]
//!
//! [[components.fs.mounts]]
//! host = "scratch"
//! guest = "/scratch"
//! mode = "rw"
//!
//! [oci]                          # `toolcage pull`, `push` and `sign`
//! insecure_registries = ["127.0.0.1:5000"]  # plain HTTP only for these
//! store = "oci-store"            # default: $XDG_CACHE_HOME/toolcage/oci
//!
//! [trust]
//! require_digest = true          # a tag is used only through toolcage.lock
//!
//! [[trust.keys]]
//! prefix = "oci://ghcr.io/team/" # references that start with this
//! key = "keys/team.pub"          # a cosign public key (PEM)
//! require_signature = true       # the default when a key is given
//!
//! [permissions]                  # allow | ask | deny, by tool name
//! default = "allow"
//! "write_*" = "ask"
//! edit_file = "deny"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::Permissions;
use crate::catalog::code::CodeMode;
use crate::catalog::pattern::is_pattern;
use crate::oci::{Pulled, Store, TrustKey, TrustPolicy};
use crate::sandbox::settings::references_secret;
use crate::upstream::{Bubblewrap, EnvValue, McpServer, McpServerError};
use crate::{
    Cidr, Error, Grant, Injection, LimitOverrides, Mount, RegistryBuilder, Secret, Secrets,
    ToolsSource,
};
use serde::Deserialize;

mod error;
mod keys;

pub use error::ConfigError;
pub use keys::Key as ConfigKey;

/// The largest wasm stack a config may ask for: 256 MiB.
const MAX_STACK_BYTES: usize = 256 << 20;

/// The name of the file looked up in the working directory.
pub const CONFIG_FILE_NAME: &str = "toolcage.toml";

/// A parsed `toolcage.toml`, with paths resolved against its directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Tool directories and `oci://` references, loaded in this order.
    pub tools: Vec<ToolsSource>,
    /// Where `oci://` references are resolved: `toolcage.lock` next to the
    /// file (in the working directory without one).
    pub lock: PathBuf,
    /// Registries (`[oci]`).
    pub oci: OciConfig,
    /// Which keys must have signed what (`[trust]`).
    pub trust: TrustConfig,
    /// Whether the bundled standard toolset is registered (first). Default:
    /// true.
    pub bundled: bool,
    /// Limits for every component, over [`Limits::default()`](crate::Limits).
    pub limits: LimitOverrides,
    /// Mounts lent to every component.
    pub mounts: Vec<Mount>,
    /// Network grants for every component, and the extra TLS roots.
    pub network: NetworkConfig,
    /// Where each secret is read from, by name (`[secrets.NAME]`).
    pub secrets: BTreeMap<String, SecretSource>,
    /// Per-component limits and mounts, by component name (file stem).
    pub components: BTreeMap<String, ComponentConfig>,
    /// Code mode (`[code_mode]`): whether `run_code` is registered, what
    /// scripts may call, what they may print. Default:
    /// [`CodeMode::default()`](crate::code_mode::CodeMode).
    pub code_mode: CodeMode,
    /// Upstream MCP servers (`[mcp_servers.NAME]`) whose tools join the
    /// registry after every other tool, in name order.
    pub mcp_servers: Vec<McpServer>,
    /// The `[permissions]` rules: tool-name pattern → `allow`, `ask` or
    /// `deny`, with the key `default` for calls no rule matches. Default:
    /// allow every call (the grants above are what bound a tool); write
    /// rules to ask or deny.
    pub permissions: Permissions,
}

impl Default for Config {
    /// What an empty file says: no directories, the bundled tools, default
    /// limits, no mounts, every call allowed.
    fn default() -> Self {
        Config {
            tools: Vec::new(),
            lock: PathBuf::from(crate::oci::LOCK_FILE_NAME),
            oci: OciConfig::default(),
            trust: TrustConfig::default(),
            bundled: true,
            limits: LimitOverrides::default(),
            mounts: Vec::new(),
            network: NetworkConfig::default(),
            secrets: BTreeMap::new(),
            components: BTreeMap::new(),
            code_mode: CodeMode::default(),
            mcp_servers: Vec::new(),
            permissions: Permissions::allow_all(),
        }
    }
}

/// What one component gets on top of the shared settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComponentConfig {
    /// Limits over the shared ones.
    pub limits: LimitOverrides,
    /// Mounts in addition to the shared ones (replacing one at the same guest
    /// path).
    pub mounts: Vec<Mount>,
    /// Network grants in addition to the shared ones (`ca_file` is shared
    /// only), and the component's secret injections.
    pub network: NetworkConfig,
    /// Settings the component reads through `wasi:config/store`
    /// (`[components.NAME.config]`).
    pub settings: BTreeMap<String, String>,
    /// The tools it may call (name patterns, `calls = [...]`); none by
    /// default.
    pub calls: Vec<String>,
}

/// The `[oci]` table: how registries are reached, where pulls are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciConfig {
    /// Registries (`host:port`) spoken to over plain HTTP. Default: none
    /// (loopback included).
    pub insecure_registries: Vec<String>,
    /// The content store. Default: none here; the CLI uses
    /// `$XDG_CACHE_HOME/toolcage/oci`.
    pub store: Option<PathBuf>,
}

/// The `[trust]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustConfig {
    /// Whether a tag is used only through the digest the lock recorded.
    /// Default: true.
    pub require_digest: bool,
    /// `[[trust.keys]]`: which key covers which references.
    pub keys: Vec<TrustKeyConfig>,
}

impl Default for TrustConfig {
    fn default() -> Self {
        TrustConfig {
            require_digest: true,
            keys: Vec::new(),
        }
    }
}

/// One `[[trust.keys]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustKeyConfig {
    /// References that start with this (`oci://registry/team/`).
    pub prefix: String,
    /// The cosign public key file (PEM), resolved against the config's
    /// directory.
    pub key: PathBuf,
    /// Whether a signature by it is required. Default: true.
    pub require_signature: bool,
}

/// Where a secret's value is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of toolcage's (`env = "VAR"`).
    Env(String),
    /// A file, its whole content less one trailing line break (`file =
    /// "path"`).
    File(PathBuf),
}

/// The `[network]` table: grants, private ranges, extra TLS roots.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkConfig {
    /// What may be reached ([`Grant`]); empty: nothing.
    pub allow: Vec<Grant>,
    /// Ranges granted names may resolve into ([`RegistryBuilder::allow_private`]).
    pub allow_private: Vec<Cidr>,
    /// A PEM file of CA certificates trusted besides the web PKI roots.
    pub ca_file: Option<PathBuf>,
    /// Secrets added to the component's requests (per component only).
    pub inject: Vec<Injection>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    oci: RawOci,
    #[serde(default)]
    trust: RawTrust,
    bundled: Option<bool>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    mounts: Vec<RawMount>,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    secrets: BTreeMap<String, RawSecret>,
    #[serde(default)]
    components: BTreeMap<String, RawComponent>,
    #[serde(default)]
    code_mode: RawCodeMode,
    #[serde(default)]
    mcp_servers: BTreeMap<String, RawMcpServer>,
    #[serde(default)]
    permissions: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawMcpServer {
    command: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    prefix: Option<String>,
    tools: Option<Vec<String>>,
    #[serde(default)]
    exclude_tools: Vec<String>,
    timeout_ms: Option<u64>,
    output_kib: Option<u64>,
    startup_timeout_ms: Option<u64>,
    sandbox: Option<String>,
    network: Option<bool>,
    #[serde(default)]
    mounts: Vec<RawMount>,
}

#[derive(Deserialize, Default)]
struct RawCodeMode {
    enabled: Option<bool>,
    tools: Option<Vec<String>>,
    print_kib: Option<u64>,
}

#[derive(Deserialize, Default)]
struct RawOci {
    #[serde(default)]
    insecure_registries: Vec<String>,
    store: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
struct RawTrust {
    require_digest: Option<bool>,
    #[serde(default)]
    keys: Vec<RawTrustKey>,
}

#[derive(Deserialize)]
struct RawTrustKey {
    prefix: String,
    key: PathBuf,
    require_signature: Option<bool>,
}

#[derive(Deserialize, Default)]
struct RawNetwork {
    #[serde(default)]
    allow: Vec<RawGrant>,
    #[serde(default)]
    allow_private: Vec<String>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    inject: Vec<RawInject>,
}

#[derive(Deserialize)]
struct RawInject {
    url: String,
    header: String,
    value: String,
    methods: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawSecret {
    env: Option<String>,
    file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawGrant {
    Pattern(String),
    Table(RawGrantTable),
}

#[derive(Deserialize)]
struct RawGrantTable {
    url: String,
    methods: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
struct RawLimits {
    fuel: Option<Fuel>,
    timeout_ms: Option<u64>,
    memory_mib: Option<u64>,
    output_kib: Option<u64>,
    log_kib: Option<u64>,
    stack_kib: Option<u64>,
    net_requests: Option<u32>,
    net_out_kib: Option<u64>,
    net_in_kib: Option<u64>,
    net_connections: Option<u32>,
    net_first_byte_ms: Option<u64>,
    net_between_bytes_ms: Option<u64>,
    nested_calls: Option<u32>,
    nested_depth: Option<u32>,
    nested_kib: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Fuel {
    Units(u64),
    Word(String),
}

#[derive(Deserialize)]
struct RawMount {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: MountMode,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum MountMode {
    #[default]
    Ro,
    Rw,
}

#[derive(Deserialize, Default)]
struct RawComponent {
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    mounts: Vec<RawMount>,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    calls: Vec<String>,
}

impl Config {
    /// Reads and checks the file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, base).map_err(|error| Error::Config {
            path: path.to_path_buf(),
            message: error.to_string(),
        })
    }

    /// Parses `text`, resolving relative paths against `base`. The error
    /// names the offending key; the keys taken are [`keys()`](Self::keys).
    pub fn parse(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(ConfigError::Toml)?;
        keys::check(text)?;
        let resolve = |path: &Path| {
            if path.is_absolute() {
                path.to_path_buf()
            } else {
                base.join(path)
            }
        };
        let secrets = secrets(&raw.secrets, &resolve)?;
        if !raw.network.inject.is_empty() {
            return Err(ConfigError::invalid(
                "network.inject",
                "an injection gives one component a secret; write it under [[components.NAME.network.inject]]",
            ));
        }
        Ok(Config {
            tools: tools(&raw.tools, &resolve)?,
            lock: base.join(crate::oci::LOCK_FILE_NAME),
            oci: oci(&raw.oci, &resolve)?,
            trust: trust(&raw.trust, &resolve)?,
            bundled: raw.bundled.unwrap_or(true),
            limits: limits(&raw.limits, "limits")?,
            mounts: mounts(&raw.mounts, "mounts", &resolve)?,
            network: network(&raw.network, "network", Some(&resolve), &secrets)?,
            components: components(&raw.components, &secrets, &resolve)?,
            mcp_servers: mcp_servers(&raw.mcp_servers, &secrets, &resolve)?,
            secrets,
            code_mode: code_mode(&raw.code_mode)?,
            permissions: Permissions::from_rules("allow", raw.permissions)
                .map_err(ConfigError::Permissions)?,
        })
    }

    /// Every key the file takes, with its default and meaning, in the
    /// order of the book's reference (`docs/src/reference/config.md`). The
    /// parser refuses any other key with this very table.
    pub fn keys() -> impl Iterator<Item = &'static ConfigKey> {
        keys::keys()
    }

    /// Reads every secret's value from where `[secrets]` says it is. The
    /// error names the secret and where it was looked for.
    pub fn read_secrets(&self) -> Result<Vec<Secret>, Error> {
        self.secrets
            .iter()
            .map(|(name, source)| match source {
                SecretSource::Env(var) => Secret::from_env(name.clone(), var),
                SecretSource::File(path) => Secret::from_file(name.clone(), path),
            })
            .collect::<Result<_, _>>()
            .map_err(Error::from)
    }

    /// The trust policy `[trust]` describes, its keys read now. The error
    /// names the key file.
    pub fn trust_policy(&self) -> Result<TrustPolicy, Error> {
        let mut policy = TrustPolicy::new().require_digest(self.trust.require_digest);
        for key in &self.trust.keys {
            let trusted = TrustKey::from_file(key.prefix.clone(), key.key.clone())?
                .require_signature(key.require_signature);
            policy = policy.key(trusted);
        }
        Ok(policy)
    }

    /// What `oci://` references load from: the lock next to this file, the
    /// store (`[oci] store`, else `default_store`), and the trust policy.
    pub fn pulled(&self, default_store: Option<&Path>) -> Result<Pulled, Error> {
        let Some(store) = self.oci.store.as_deref().or(default_store) else {
            return Err(Error::InvalidSetting {
                what: "oci.store",
                message: "no content store: set [oci] store, or XDG_CACHE_HOME or HOME".into(),
            });
        };
        Ok(Pulled::new(
            self.lock.clone(),
            Store::open(store)?,
            self.trust_policy()?,
        ))
    }

    /// A registry builder granting what this file grants, with `limits`
    /// (such as command-line flags) layered over the file's, holding the
    /// secrets it names, read now ([`read_secrets`](Self::read_secrets)).
    pub fn registry_builder(&self, limits: &LimitOverrides) -> Result<RegistryBuilder, Error> {
        let defaults = self.limits.then(limits).apply(crate::Limits::default());
        let secrets: Secrets = self.read_secrets()?.into_iter().collect();
        let mut builder = crate::Registry::builder()
            .limits(defaults)
            .secrets(secrets)
            .code_mode(self.code_mode.clone());
        for mount in &self.mounts {
            builder = builder.mount(mount.clone());
        }
        for grant in &self.network.allow {
            builder = builder.allow_net(grant.clone());
        }
        for range in &self.network.allow_private {
            builder = builder.allow_private(*range);
        }
        if let Some(ca_file) = &self.network.ca_file {
            builder = builder.ca_file(ca_file.clone());
        }
        for (name, component) in &self.components {
            builder = builder.component_limits(name.clone(), component.limits);
            for mount in &component.mounts {
                builder = builder.component_mount(name.clone(), mount.clone());
            }
            for grant in &component.network.allow {
                builder = builder.component_allow_net(name.clone(), grant.clone());
            }
            for range in &component.network.allow_private {
                builder = builder.component_allow_private(name.clone(), *range);
            }
            for injection in &component.network.inject {
                builder = builder.component_inject(name.clone(), injection.clone());
            }
            for (key, value) in &component.settings {
                builder = builder.component_setting(name.clone(), key.clone(), value.clone());
            }
            for pattern in &component.calls {
                builder = builder.component_calls(name.clone(), pattern.clone());
            }
        }
        Ok(builder)
    }
}

/// Resolves a relative path against the config file's directory.
type Resolve<'a> = dyn Fn(&Path) -> PathBuf + 'a;

/// `[[mounts]]` or `[[components.NAME.mounts]]`, named `key`.
fn mounts(raw: &[RawMount], key: &str, resolve: &Resolve) -> Result<Vec<Mount>, ConfigError> {
    raw.iter()
        .map(|m| {
            let host = resolve(&m.host);
            let mount = match m.mode {
                MountMode::Ro => Mount::read_only(host, m.guest.clone()),
                MountMode::Rw => Mount::read_write(host, m.guest.clone()),
            };
            if !mount.guest().starts_with('/') {
                return Err(ConfigError::invalid(
                    format!("{key}.guest"),
                    format!("`{}` must be an absolute guest path", m.guest),
                ));
            }
            Ok(mount)
        })
        .collect()
}

/// `[secrets.NAME]`: where each value is.
fn secrets(
    raw: &BTreeMap<String, RawSecret>,
    resolve: &Resolve,
) -> Result<BTreeMap<String, SecretSource>, ConfigError> {
    let mut secrets = BTreeMap::new();
    for (name, secret) in raw {
        let key = format!("secrets.{name}");
        crate::sandbox::secrets::check_name(name)
            .map_err(|e| ConfigError::invalid(key.clone(), e))?;
        let source = match (&secret.env, &secret.file) {
            (Some(var), None) if !var.is_empty() => SecretSource::Env(var.clone()),
            (None, Some(file)) => SecretSource::File(resolve(file)),
            _ => {
                return Err(ConfigError::invalid(
                    key,
                    "set exactly one of env = \"VARIABLE\" or file = \"path\"",
                ));
            }
        };
        secrets.insert(name.clone(), source);
    }
    Ok(secrets)
}

/// `[code_mode]`.
fn code_mode(raw: &RawCodeMode) -> Result<CodeMode, ConfigError> {
    if raw.enabled == Some(false) {
        return Ok(CodeMode::off());
    }
    let mut code_mode = CodeMode::default();
    if let Some(tools) = &raw.tools {
        if let Some(pattern) = tools.iter().find(|p| !is_pattern(p)) {
            return Err(ConfigError::invalid(
                "code_mode.tools",
                format!(
                    "`{pattern}` is not a tool name pattern: use letters, digits, `_` and `-`, with `*` for any run of characters"
                ),
            ));
        }
        code_mode = code_mode.tools(tools.clone());
    }
    match raw.print_kib {
        Some(0) => Err(ConfigError::invalid(
            "code_mode.print_kib",
            "must be greater than 0",
        )),
        Some(kib) => Ok(code_mode.print_kib(kib)),
        None => Ok(code_mode),
    }
}

/// `[mcp_servers.NAME]`: the upstream MCP servers, in name order.
fn mcp_servers(
    raw: &BTreeMap<String, RawMcpServer>,
    secrets: &BTreeMap<String, SecretSource>,
    resolve: &Resolve,
) -> Result<Vec<McpServer>, ConfigError> {
    raw.iter()
        .map(|(name, raw)| mcp_server(name, raw, secrets, resolve))
        .collect()
}

fn mcp_server(
    name: &str,
    raw: &RawMcpServer,
    secrets: &BTreeMap<String, SecretSource>,
    resolve: &Resolve,
) -> Result<McpServer, ConfigError> {
    let key = |leaf: &str| format!("mcp_servers.{name}.{leaf}");
    let invalid = |leaf: &str, e: McpServerError| ConfigError::invalid(key(leaf), e);
    if let Some(url) = &raw.url {
        return remote_mcp_server(name, url, raw);
    }
    let Some(command) = &raw.command else {
        return Err(ConfigError::invalid(
            key("command"),
            "give command (a stdio server) or url (a remote one)",
        ));
    };
    let mut server = McpServer::stdio(name, command.clone())
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
fn remote_mcp_server(name: &str, url: &str, raw: &RawMcpServer) -> Result<McpServer, ConfigError> {
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
    let invalid = |leaf: &str, e: McpServerError| ConfigError::invalid(key(leaf), e);
    let mut server = McpServer::http(name, url).map_err(|e| invalid("url", e))?;
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
    mut server: McpServer,
    raw: &RawMcpServer,
) -> Result<McpServer, ConfigError> {
    let key = |leaf: &str| format!("mcp_servers.{name}.{leaf}");
    let invalid = |leaf: &str, e: McpServerError| ConfigError::invalid(key(leaf), e);
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

/// `[components.NAME]`: what each component gets on top.
fn components(
    raw: &BTreeMap<String, RawComponent>,
    secrets: &BTreeMap<String, SecretSource>,
    resolve: &Resolve,
) -> Result<BTreeMap<String, ComponentConfig>, ConfigError> {
    let mut components = BTreeMap::new();
    for (name, component) in raw {
        let key = format!("components.{name}");
        for (setting, value) in &component.config {
            if references_secret(value) {
                return Err(ConfigError::invalid(
                    format!("{key}.config.{setting}"),
                    format!(
                        "a secret cannot be a setting, since the tool reads its settings; add it to the tool's requests with [[{key}.network.inject]]"
                    ),
                ));
            }
        }
        let network = network(&component.network, &format!("{key}.network"), None, secrets)?;
        if let Some(pattern) = component.calls.iter().find(|p| !is_pattern(p)) {
            return Err(ConfigError::invalid(
                format!("{key}.calls"),
                format!(
                    "`{pattern}` is not a tool name pattern: use letters, digits, `_` and `-`, with `*` for any run of characters"
                ),
            ));
        }
        components.insert(
            name.clone(),
            ComponentConfig {
                limits: limits(&component.limits, &format!("{key}.limits"))?,
                mounts: mounts(&component.mounts, &format!("{key}.mounts"), resolve)?,
                network,
                settings: component.config.clone(),
                calls: component.calls.clone(),
            },
        );
    }
    Ok(components)
}

/// `tools = [...]`: directories (resolved) and references.
fn tools(raw: &[String], resolve: &Resolve) -> Result<Vec<ToolsSource>, ConfigError> {
    raw.iter()
        .enumerate()
        .map(|(i, text)| match ToolsSource::parse(text) {
            Ok(ToolsSource::Dir(dir)) => Ok(ToolsSource::Dir(resolve(&dir))),
            Ok(reference) => Ok(reference),
            Err(e) => Err(ConfigError::invalid(format!("tools[{i}]"), e)),
        })
        .collect()
}

/// The `[oci]` table.
fn oci(raw: &RawOci, resolve: &Resolve) -> Result<OciConfig, ConfigError> {
    for (i, registry) in raw.insecure_registries.iter().enumerate() {
        let valid = !registry.is_empty()
            && registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !valid {
            return Err(ConfigError::invalid(
                format!("oci.insecure_registries[{i}]"),
                format!("`{registry}` is not a registry host[:port]"),
            ));
        }
    }
    Ok(OciConfig {
        insecure_registries: raw.insecure_registries.clone(),
        store: raw.store.as_deref().map(resolve),
    })
}

/// The `[trust]` table.
fn trust(raw: &RawTrust, resolve: &Resolve) -> Result<TrustConfig, ConfigError> {
    let mut keys = Vec::new();
    for (i, key) in raw.keys.iter().enumerate() {
        if !key.prefix.starts_with(crate::oci::Reference::SCHEME)
            || key.prefix.len() <= crate::oci::Reference::SCHEME.len()
        {
            return Err(ConfigError::invalid(
                format!("trust.keys[{i}].prefix"),
                format!(
                    "`{}` must start with oci:// and name a registry",
                    key.prefix
                ),
            ));
        }
        keys.push(TrustKeyConfig {
            prefix: key.prefix.clone(),
            key: resolve(&key.key),
            require_signature: key.require_signature.unwrap_or(true),
        });
    }
    Ok(TrustConfig {
        require_digest: raw.require_digest.unwrap_or(true),
        keys,
    })
}

/// A `[network]` table; `resolve` resolves `ca_file`, which only the shared
/// table may set.
fn network(
    raw: &RawNetwork,
    key: &str,
    resolve: Option<&Resolve>,
    secrets: &BTreeMap<String, SecretSource>,
) -> Result<NetworkConfig, ConfigError> {
    let mut inject = Vec::new();
    for (i, raw) in raw.inject.iter().enumerate() {
        let key = format!("{key}.inject[{i}]");
        let injection = Injection::new(&raw.url, &raw.header, &raw.value)
            .and_then(|injection| match &raw.methods {
                Some(methods) => injection.methods(methods),
                None => Ok(injection),
            })
            .map_err(|e| ConfigError::invalid(key.clone(), e))?;
        if let Some(missing) = injection.secrets().find(|s| !secrets.contains_key(*s)) {
            return Err(ConfigError::invalid(
                format!("{key}.value"),
                format!(
                    "the secret `{missing}` is not declared; add [secrets.{missing}] with env = \"VARIABLE\" or file = \"path\""
                ),
            ));
        }
        inject.push(injection);
    }
    let mut allow = Vec::new();
    for (i, grant) in raw.allow.iter().enumerate() {
        let parsed = match grant {
            RawGrant::Pattern(pattern) => Grant::parse(pattern),
            RawGrant::Table(table) => {
                Grant::parse(&table.url).and_then(|grant| match &table.methods {
                    Some(methods) => grant.methods(methods),
                    None => Ok(grant),
                })
            }
        };
        allow.push(parsed.map_err(|e| ConfigError::invalid(format!("{key}.allow[{i}]"), e))?);
    }
    let allow_private = raw
        .allow_private
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<Cidr>()
                .map_err(|e| ConfigError::invalid(format!("{key}.allow_private[{i}]"), e))
        })
        .collect::<Result<_, _>>()?;
    let ca_file = match (&raw.ca_file, resolve) {
        (None, _) => None,
        (Some(path), Some(resolve)) => Some(resolve(path)),
        (Some(_), None) => {
            return Err(ConfigError::invalid(
                format!("{key}.ca_file"),
                "set it in the shared [network] table; it applies to every component",
            ));
        }
    };
    Ok(NetworkConfig {
        allow,
        allow_private,
        ca_file,
        inject,
    })
}

fn limits(raw: &RawLimits, key: &str) -> Result<LimitOverrides, ConfigError> {
    let positive = |value: Option<u64>, name: &str| -> Result<Option<u64>, ConfigError> {
        match value {
            Some(0) => Err(ConfigError::invalid(
                format!("{key}.{name}"),
                "must be greater than 0",
            )),
            other => Ok(other),
        }
    };
    let bytes = |value: Option<u64>, name: &str, unit: u32| -> Result<Option<usize>, ConfigError> {
        positive(value, name)?
            .map(|v| {
                v.checked_mul(1 << unit)
                    .and_then(|b| usize::try_from(b).ok())
                    .ok_or_else(|| {
                        ConfigError::invalid(format!("{key}.{name}"), format!("{v} is too large"))
                    })
            })
            .transpose()
    };
    let fuel = match &raw.fuel {
        None => None,
        Some(Fuel::Units(0)) => {
            return Err(ConfigError::invalid(
                format!("{key}.fuel"),
                "must be greater than 0, or \"unlimited\"",
            ));
        }
        Some(Fuel::Units(units)) => Some(Some(*units)),
        Some(Fuel::Word(word)) if word == "unlimited" => Some(None),
        Some(Fuel::Word(word)) => {
            return Err(ConfigError::invalid(
                format!("{key}.fuel"),
                format!("`{word}` is neither a number nor \"unlimited\""),
            ));
        }
    };
    let stack_bytes = bytes(raw.stack_kib, "stack_kib", 10)?;
    if stack_bytes.is_some_and(|b| b > MAX_STACK_BYTES) {
        return Err(ConfigError::invalid(
            format!("{key}.stack_kib"),
            format!("at most {} KiB", MAX_STACK_BYTES >> 10),
        ));
    }
    Ok(LimitOverrides {
        fuel,
        timeout: positive(raw.timeout_ms, "timeout_ms")?.map(Duration::from_millis),
        memory_bytes: bytes(raw.memory_mib, "memory_mib", 20)?,
        output_bytes: bytes(raw.output_kib, "output_kib", 10)?,
        log_bytes: bytes(raw.log_kib, "log_kib", 10)?,
        stack_bytes,
        net_requests: positive(raw.net_requests.map(u64::from), "net_requests")?.map(|n| n as u32),
        net_bytes_out: bytes(raw.net_out_kib, "net_out_kib", 10)?.map(|b| b as u64),
        net_bytes_in: bytes(raw.net_in_kib, "net_in_kib", 10)?.map(|b| b as u64),
        net_connections: positive(raw.net_connections.map(u64::from), "net_connections")?
            .map(|n| n as u32),
        net_first_byte_timeout: positive(raw.net_first_byte_ms, "net_first_byte_ms")?
            .map(Duration::from_millis),
        net_between_bytes_timeout: positive(raw.net_between_bytes_ms, "net_between_bytes_ms")?
            .map(Duration::from_millis),
        nested_calls: raw.nested_calls,
        nested_depth: raw.nested_depth,
        nested_bytes: bytes(raw.nested_kib, "nested_kib", 10)?.map(|b| b as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::agent::Permission;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/toolcage")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_network_table_grants_per_component_and_for_all() {
        let config = parse(
            r#"
            [limits]
            net_requests = 7
            net_in_kib = 2
            net_first_byte_ms = 1500

            [network]
            allow = ["https://api.example.com", { url = "https://*.example.com/v1", methods = ["get"] }]
            allow_private = ["10.0.0.0/8"]
            ca_file = "ca.pem"

            [components.fetch.network]
            allow = ["http://127.0.0.1:8080"]
            "#,
        )
        .unwrap();
        let shown: Vec<String> = config
            .network
            .allow
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            ["https://api.example.com", "https://*.example.com/v1 (GET)"]
        );
        assert_eq!(
            config.network.allow_private,
            ["10.0.0.0/8".parse().unwrap()]
        );
        assert_eq!(
            config.network.ca_file.as_deref(),
            Some(Path::new("/etc/toolcage/ca.pem"))
        );
        let fetch = &config.components["fetch"].network;
        assert_eq!(fetch.allow[0].to_string(), "http://127.0.0.1:8080");
        assert_eq!(config.limits.net_requests, Some(7));
        assert_eq!(config.limits.net_bytes_in, Some(2048));
        assert_eq!(
            config.limits.net_first_byte_timeout,
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn calls_grants_and_nested_budgets_parse() {
        let config = parse(
            "[limits]\nnested_calls = 7\nnested_depth = 2\nnested_kib = 8\n\
             [components.research]\ncalls = [\"fetch\", \"read_*\"]",
        )
        .unwrap();
        assert_eq!(config.components["research"].calls, ["fetch", "read_*"]);
        let limits = config.limits.apply(crate::Limits::default());
        assert_eq!(
            (
                limits.nested_calls,
                limits.nested_depth,
                limits.nested_bytes
            ),
            (7, 2, 8 << 10)
        );
        let error = parse("[components.x]\ncalls = [\"a b\"]").unwrap_err();
        assert!(
            error.contains("components.x.calls")
                && error.contains("`a b` is not a tool name pattern"),
            "{error}"
        );
    }

    #[test]
    fn mcp_servers_parse_and_bad_ones_are_refused() {
        let text = "[secrets.gh]\nenv = \"GH\"\n[mcp_servers.github]\ncommand = \"gh-mcp\"\nargs = [\"stdio\"]\nenv = { TOKEN = \"{{ secrets.gh }}\", MODE = \"ro\" }\ntools = [\"get_*\"]\nexclude_tools = [\"get_secret\"]\ntimeout_ms = 500\n";
        let config = parse(text).unwrap();
        let expected = McpServer::stdio("github", "gh-mcp")
            .unwrap()
            .args(["stdio"])
            .exclude_tools(["get_secret"])
            .unwrap()
            .tools(["get_*"])
            .unwrap()
            .env("MODE", EnvValue::Text("ro".into()))
            .unwrap()
            .env("TOKEN", EnvValue::Secret("gh".into()))
            .unwrap()
            .timeout(Duration::from_millis(500));
        assert_eq!(config.mcp_servers, vec![expected]);
        let boxed = "[mcp_servers.b]\ncommand = \"c\"\nsandbox = \"bubblewrap\"\nnetwork = true\n[[mcp_servers.b.mounts]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n";
        let bubblewrap = Bubblewrap::new()
            .network(true)
            .mount(Mount::read_write("/etc/toolcage/data", "/data"));
        let expected = McpServer::stdio("b", "c").unwrap().bubblewrap(bubblewrap);
        assert_eq!(parse(boxed).unwrap().mcp_servers, vec![expected]);
        let remote = "[secrets.gh]\nenv = \"GH\"\n[mcp_servers.r]\nurl = \"https://mcp.example/mcp\"\nheaders = { Authorization = \"Bearer {{ secrets.gh }}\" }\nprefix = \"gh_\"\n";
        let expected = McpServer::http("r", "https://mcp.example/mcp")
            .unwrap()
            .header("Authorization", "Bearer {{ secrets.gh }}")
            .unwrap()
            .prefix("gh_")
            .unwrap();
        assert_eq!(parse(remote).unwrap().mcp_servers, vec![expected]);
        let x = "[mcp_servers.x]\n";
        for (text, key, says) in [
            (&format!("{x}url = \"ftp://h/mcp\""), "x.url", "not an http"),
            (
                &format!("{x}url = \"https://h/\"\nargs = [\"a\"]"),
                "x.args",
                "stdio server",
            ),
            (
                &format!(
                    "{x}url = \"http://a.example/\"\nheaders = {{ A = \"{{{{ secrets.s }}}}\" }}"
                ),
                "x.headers.A",
                "plain http",
            ),
            (&format!("{x}args = []"), "x.command", "give command"),
            (
                &format!("{x}command = \"c\"\nenv = {{ T = \"{{{{ secrets.nope }}}}\" }}"),
                "x.env.T",
                "`nope`",
            ),
            (
                &format!("{x}command = \"c\"\ntools = [\"a b\"]"),
                "x.tools",
                "not a tool name pattern",
            ),
            (
                &format!("{x}command = \"c\"\ntimeout_ms = 0"),
                "x.timeout_ms",
                "greater than 0",
            ),
            (
                &format!("{x}command = \"c\"\nsandbox = \"docker\""),
                "x.sandbox",
                "not a sandbox",
            ),
            (
                &format!("{x}command = \"c\"\nnetwork = true"),
                "x.sandbox",
                "bubblewrap",
            ),
            (
                &"[mcp_servers.\"a b\"]\ncommand = \"c\"".to_string(),
                "a b.command",
                "not valid",
            ),
        ] {
            let error = parse(text).unwrap_err();
            let key = format!("mcp_servers.{key}");
            assert!(
                error.contains(&key) && error.contains(says),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn code_mode_parses_and_refuses_bad_values() {
        assert_eq!(parse("").unwrap().code_mode, CodeMode::default());
        let config = parse("[code_mode]\ntools = [\"read_*\", \"calc\"]\nprint_kib = 8").unwrap();
        assert_eq!(
            config.code_mode,
            CodeMode::default().tools(["read_*", "calc"]).print_kib(8)
        );
        let off = parse("[code_mode]\nenabled = false").unwrap();
        assert!(!off.code_mode.is_enabled());
        let error = parse("[code_mode]\ntools = [\"a b\"]").unwrap_err();
        assert!(
            error.contains("code_mode.tools") && error.contains("`a b` is not a tool name pattern"),
            "{error}"
        );
        let error = parse("[code_mode]\nprint_kib = 0").unwrap_err();
        assert!(error.contains("code_mode.print_kib"), "{error}");
        let error = parse("[code_mode]\nlanguage = \"js\"").unwrap_err();
        assert!(error.contains("language"), "{error}");
    }

    #[test]
    fn secrets_injections_and_settings_parse() {
        let config = parse(
            r#"
            [secrets.GITHUB_TOKEN]
            env = "GH_TOKEN"
            [secrets.SLACK]
            file = "secrets/slack"

            [components.gh.network]
            allow = ["https://api.github.com"]
            [[components.gh.network.inject]]
            url = "https://api.github.com/repos"
            header = "Authorization"
            value = "Bearer {{ secrets.GITHUB_TOKEN }}"
            methods = ["get"]

            [components.gh.config]
            owner = "octocat"
            "#,
        )
        .unwrap();
        assert_eq!(
            config.secrets["GITHUB_TOKEN"],
            SecretSource::Env("GH_TOKEN".into())
        );
        assert_eq!(
            config.secrets["SLACK"],
            SecretSource::File("/etc/toolcage/secrets/slack".into())
        );
        let gh = &config.components["gh"];
        assert_eq!(
            gh.network.inject[0].url(),
            "https://api.github.com/repos (GET)"
        );
        assert_eq!(gh.settings["owner"], "octocat");
        // Reading them names the secret and where it was looked for.
        let error = config.read_secrets().unwrap_err().to_string();
        assert!(
            error.starts_with("secret `GITHUB_TOKEN`: the environment variable GH_TOKEN")
                || error.starts_with("secret `SLACK`: reading /etc/toolcage/secrets/slack"),
            "{error}"
        );
    }

    #[test]
    fn an_empty_file_grants_nothing() {
        let config = parse("").unwrap();
        let lock = PathBuf::from("/etc/toolcage/toolcage.lock");
        assert_eq!(
            config,
            Config {
                lock,
                ..Config::default()
            }
        );
        assert!(config.tools.is_empty() && config.mounts.is_empty());
        assert!(config.network.allow.is_empty(), "no network unless granted");
        assert!(config.bundled);
        assert_eq!(config.permissions.default_permission(), Permission::Allow);
    }

    #[test]
    fn distribution_settings_name_the_key_at_fault() {
        for (text, key) in [
            (r#"tools = ["oci://ghcr.io/team/grep"]"#, "tools[0]"),
            (r#"tools = ["dir", "oci://ghcr.io/X/y:1"]"#, "tools[1]"),
            (
                "[oci]\ninsecure_registries = [\"a b\"]",
                "oci.insecure_registries[0]",
            ),
            ("[oci]\nmirror = \"x\"", "mirror"),
            (
                "[[trust.keys]]\nprefix = \"ghcr.io/\"\nkey = \"k.pub\"",
                "trust.keys[0].prefix",
            ),
            ("[[trust.keys]]\nprefix = \"oci://ghcr.io/\"", "key"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
        let config = parse("[trust]\nrequire_digest = false\n[[trust.keys]]\nprefix = \"oci://r/\"\nkey = \"k.pub\"\nrequire_signature = false").unwrap();
        assert!(!config.trust.require_digest && !config.trust.keys[0].require_signature);
        let error = config.trust_policy().unwrap_err().to_string();
        assert!(error.contains("/etc/toolcage/k.pub"), "{error}");
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("config.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        let config = parse(&example).unwrap();
        assert_eq!(
            config.tools,
            [
                ToolsSource::Dir(PathBuf::from("/etc/toolcage/tools")),
                ToolsSource::parse("oci://ghcr.io/team/grep:1.2").unwrap(),
            ]
        );
        assert_eq!(config.lock, PathBuf::from("/etc/toolcage/toolcage.lock"));
        assert_eq!(config.oci.insecure_registries, ["127.0.0.1:5000"]);
        assert_eq!(
            config.oci.store,
            Some(PathBuf::from("/etc/toolcage/oci-store"))
        );
        assert!(config.trust.require_digest);
        assert_eq!(
            config.trust.keys,
            [TrustKeyConfig {
                prefix: "oci://ghcr.io/team/".into(),
                key: PathBuf::from("/etc/toolcage/keys/team.pub"),
                require_signature: true,
            }]
        );
        assert_eq!(config.limits.fuel, Some(Some(10_000_000_000)));
        assert_eq!(config.limits.memory_bytes, Some(256 << 20));
        assert_eq!(
            config.mounts,
            [Mount::read_only("/etc/toolcage/.", "/workspace")]
        );
        let fs = &config.components["fs"];
        assert_eq!(fs.limits.timeout, Some(Duration::from_secs(60)));
        assert_eq!(
            fs.mounts,
            [Mount::read_write("/etc/toolcage/scratch", "/scratch")]
        );
        assert_eq!(
            config.permissions.permission_for("write_file"),
            Permission::Ask
        );
        assert_eq!(
            config.permissions.permission_for("edit_file"),
            Permission::Deny
        );
        assert_eq!(
            config.permissions.permission_for("read_file"),
            Permission::Allow
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        for (text, key) in [
            ("tool = []", "tool"),
            ("[limits]\ntimeout = 5", "timeout"),
            (
                "[[mounts]]\nhost = \".\"\nguest = \"/w\"\nmod = \"rw\"",
                "mod",
            ),
            ("[components.fs]\nlimit = {}", "limit"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(&format!("`{key}`")), "{text}: {error}");
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (text, needle) in [
            ("[limits]\ntimeout_ms = 0", "limits.timeout_ms"),
            ("[limits]\nfuel = \"lots\"", "limits.fuel"),
            ("[limits]\nfuel = 0", "limits.fuel"),
            ("[limits]\nmemory_mib = -1", "memory_mib"),
            (
                "[components.x.limits]\noutput_kib = 0",
                "components.x.limits.output_kib",
            ),
            ("[[mounts]]\nhost = \".\"\nguest = \"w\"", "mounts.guest"),
            (
                "[[mounts]]\nhost = \".\"\nguest = \"/w\"\nmode = \"rwx\"",
                "rwx",
            ),
            ("[permissions]\nedit_file = \"maybe\"", "`edit_file`"),
            ("[permissions]\n\"read file\" = \"deny\"", "`read file`"),
            ("bundled = \"yes\"", "bundled"),
            ("[limits]\nstack_kib = 99999999999", "limits.stack_kib"),
            ("[limits]\nnet_requests = 0", "limits.net_requests"),
            ("[limits]\nnet_in_kib = 0", "limits.net_in_kib"),
            ("[network]\nallow = [\"example.com\"]", "network.allow[0]"),
            (
                "[network]\nallow = [\"https://a.test\", \"https://u@b.test\"]",
                "network.allow[1]: network grant `https://u@b.test`",
            ),
            (
                "[network]\nallow = [{ url = \"tcp://db:5432\", methods = [\"GET\"] }]",
                "methods only make sense",
            ),
            (
                "[network]\nallow_private = [\"10.0.0.1/8\"]",
                "network.allow_private[0]",
            ),
            ("[network]\nallow = [{ uri = \"https://x.test\" }]", "uri"),
            (
                "[components.x.network]\nca_file = \"ca.pem\"",
                "components.x.network.ca_file",
            ),
            (
                "[secrets.T]\nenv = \"A\"\nfile = \"b\"",
                "secrets.T: set exactly one of env",
            ),
            ("[secrets.T]\nvalue = \"hunter22\"", "`value`"),
            (
                "[secrets.\"a-b\"]\nenv = \"A\"",
                "secrets.a-b: a secret's name",
            ),
            (
                "[[network.inject]]\nurl = \"https://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
                "network.inject: an injection gives one component a secret",
            ),
            (
                "[[components.x.network.inject]]\nurl = \"https://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
                "components.x.network.inject[0].value: the secret `T` is not declared",
            ),
            (
                "[secrets.T]\nenv = \"A\"\n[[components.x.network.inject]]\nurl = \"http://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
                "components.x.network.inject[0]: secret injection for `http://a.test`: plain http",
            ),
            (
                "[components.x.config]\ntoken = \"{{ secrets.T }}\"",
                "components.x.config.token: a secret cannot be a setting",
            ),
            ("[components.x.config]\nretries = 3", "expected a string"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn fuel_can_be_unlimited() {
        let config = parse("[limits]\nfuel = \"unlimited\"").unwrap();
        assert_eq!(config.limits.fuel, Some(None));
    }

    #[test]
    fn flags_override_the_file() {
        let config = parse("[limits]\ntimeout_ms = 100\nmemory_mib = 1").unwrap();
        let flags = LimitOverrides {
            timeout: Some(Duration::from_millis(5)),
            ..Default::default()
        };
        let limits = config.limits.then(&flags).apply(crate::Limits::default());
        assert_eq!(limits.timeout, Duration::from_millis(5));
        assert_eq!(limits.memory_bytes, 1 << 20);
    }
}
