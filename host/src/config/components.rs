//! The `[components.NAME]` tables: what one component gets on top of the
//! shared settings.

use std::collections::BTreeMap;

use super::grants::{NetworkConfig, limits, mounts, network};
use super::raw::RawComponent;
use super::secrets::SecretSource;
use super::{ConfigError, Resolve};
use crate::catalog::pattern::is_pattern;
use crate::sandbox::limits::LimitOverrides;
use crate::sandbox::mount::Mount;
use crate::sandbox::settings::references_secret;

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

/// `[components.NAME]`: what each component gets on top.
pub(super) fn components(
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
