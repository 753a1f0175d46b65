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

use crate::catalog::error::Error;
use crate::catalog::interpreter::CodeMode;
use crate::catalog::oci::{Pulled, Store, TrustKey, TrustPolicy};
use crate::catalog::permissions::Permissions;
use crate::catalog::registry::ToolsSource;
use crate::sandbox::limits::LimitOverrides;
use crate::sandbox::mount::Mount;
use crate::sandbox::secrets::Secret;
use crate::upstream::UpstreamServer;

mod builder;
mod components;
mod distribution;
mod error;
mod grants;
mod keys;
mod mcp_servers;
mod raw;
mod secrets;
mod state;
#[cfg(test)]
mod tests;

pub use components::ComponentConfig;
pub use distribution::{OciConfig, TrustConfig, TrustKeyConfig};
pub use error::ConfigError;
pub use grants::NetworkConfig;
pub use keys::Key as ConfigKey;
pub use secrets::SecretSource;
pub use state::{RedisConfig, StateBackend, StateConfig, StateError};

use components::components;
use distribution::{oci, tools, trust};
use grants::{code_mode, limits, mounts, network, sessions};
use mcp_servers::mcp_servers;
use raw::RawConfig;
use secrets::secrets;
use state::state;

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
    /// How the MCP server seals a paused run's state (`[state]`). Default:
    /// [`StateConfig::default()`].
    pub state: StateConfig,
    /// The bounds of code mode's sessions (`[code_mode]`'s `session_kib`,
    /// `sessions_per_caller`, `session_idle_ms`); `None` with code mode
    /// off. Default: [`SessionLimits::default()`](crate::state::SessionLimits).
    pub sessions: Option<crate::state::SessionLimits>,
    /// Upstream MCP servers (`[mcp_servers.NAME]`) whose tools join the
    /// registry after every other tool, in name order.
    pub mcp_servers: Vec<UpstreamServer>,
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
            lock: PathBuf::from(crate::catalog::oci::LOCK_FILE_NAME),
            oci: OciConfig::default(),
            trust: TrustConfig::default(),
            bundled: true,
            limits: LimitOverrides::default(),
            mounts: Vec::new(),
            network: NetworkConfig::default(),
            secrets: BTreeMap::new(),
            components: BTreeMap::new(),
            code_mode: CodeMode::default(),
            state: StateConfig::default(),
            sessions: Some(crate::state::SessionLimits::default()),
            mcp_servers: Vec::new(),
            permissions: Permissions::allow_all(),
        }
    }
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
            error: Box::new(error),
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
            lock: base.join(crate::catalog::oci::LOCK_FILE_NAME),
            oci: oci(&raw.oci, &resolve)?,
            trust: trust(&raw.trust, &resolve)?,
            bundled: raw.bundled.unwrap_or(true),
            limits: limits(&raw.limits, "limits")?,
            mounts: mounts(&raw.mounts, "mounts", &resolve)?,
            network: network(&raw.network, "network", Some(&resolve), &secrets)?,
            components: components(&raw.components, &secrets, &resolve)?,
            mcp_servers: mcp_servers(&raw.mcp_servers, &secrets, &resolve)?,
            state: state(&raw.state, &resolve, &secrets)?,
            secrets,
            code_mode: code_mode(&raw.code_mode)?,
            sessions: sessions(&raw.code_mode)?,
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
}

/// Resolves a relative path against the config file's directory.
type Resolve<'a> = dyn Fn(&Path) -> PathBuf + 'a;
