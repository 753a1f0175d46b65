//! What a call is granted, shared and per component: `[limits]`,
//! `[[mounts]]` and `[network]`, and code mode's `[code_mode]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{Fuel, MountMode, RawCodeMode, RawGrant, RawLimits, RawMount, RawNetwork};
use super::secrets::SecretSource;
use super::{ConfigError, Resolve};
use crate::catalog::interpreter::CodeMode;
use crate::catalog::pattern::is_pattern;
use crate::sandbox::limits::LimitOverrides;
use crate::sandbox::mount::Mount;
use crate::sandbox::net::{Cidr, Grant};
use crate::sandbox::secrets::Injection;
use crate::state::SessionLimits;

/// The largest wasm stack a config may ask for: 256 MiB.
const MAX_STACK_BYTES: usize = 256 << 20;

/// The `[network]` table: grants, private ranges, extra TLS roots.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkConfig {
    /// What may be reached ([`Grant`]); empty: nothing.
    pub allow: Vec<Grant>,
    /// Ranges granted names may resolve into
    /// ([`RegistryBuilder::allow_private`](crate::RegistryBuilder::allow_private)).
    pub allow_private: Vec<Cidr>,
    /// A PEM file of CA certificates trusted besides the web PKI roots.
    pub ca_file: Option<PathBuf>,
    /// Secrets added to the component's requests (per component only).
    pub inject: Vec<Injection>,
}

/// `[[mounts]]` or `[[components.NAME.mounts]]`, named `key`.
pub(super) fn mounts(
    raw: &[RawMount],
    key: &str,
    resolve: &Resolve,
) -> Result<Vec<Mount>, ConfigError> {
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

/// `[code_mode]`.
pub(super) fn code_mode(raw: &RawCodeMode) -> Result<CodeMode, ConfigError> {
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

/// `[code_mode]`'s session bounds; `None` with code mode off.
pub(super) fn sessions(raw: &RawCodeMode) -> Result<Option<SessionLimits>, ConfigError> {
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let positive = |key: &str, value: Option<u64>| match value {
        Some(0) => Err(ConfigError::invalid(key, "must be greater than 0")),
        other => Ok(other),
    };
    let mut limits = SessionLimits::default();
    if let Some(kib) = positive("code_mode.session_kib", raw.session_kib)? {
        limits.bytes = usize::try_from(kib.saturating_mul(1024)).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive("code_mode.sessions_per_caller", raw.sessions_per_caller)? {
        limits.per_caller = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(ms) = positive("code_mode.session_idle_ms", raw.session_idle_ms)? {
        limits.idle = Duration::from_millis(ms);
    }
    Ok(Some(limits))
}

/// A `[network]` table; `resolve` resolves `ca_file`, which only the shared
/// table may set.
pub(super) fn network(
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

pub(super) fn limits(raw: &RawLimits, key: &str) -> Result<LimitOverrides, ConfigError> {
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
