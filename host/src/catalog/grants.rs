//! What the operator grants each component: limits, mounts, network,
//! secrets' injections, settings, and the tools it may call; and the one
//! rule of which tools a caller may call.
//!
//! Threat model: everything is denied until granted. A component's grants
//! are looked up by its name, and code mode's come only to the bundled
//! `code` component, never to a directory component of the same name. The
//! callable rule is the one both what a model is shown (`run_code`'s
//! description, the unknown-name lists) and what a nested call may reach
//! are decided by, so the view never lists what the path would refuse.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use super::component::Source;
use super::error::Error;
use super::interpreter::{CodeMode, is_code_mode_tool, is_interpreter};
use super::oci::Pulled;
use super::pattern::{glob_match, is_pattern};
use super::permissions::{Permission, Permissions};
use super::table::ToolInfo;
use crate::sandbox::limits::{LimitOverrides, Limits};
use crate::sandbox::mount::{HeldDir, Mount};
use crate::sandbox::net::{Cidr, Grant, NetPolicy, NetSettings, NetShared};
use crate::sandbox::secrets::{Injection, InjectionError, Secrets};
use crate::sandbox::settings::{self, ComponentSettings};

/// What the operator grants: default limits and mounts, and per-component
/// overrides.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    pub limits: Limits,
    pub mounts: Vec<Mount>,
    pub components: HashMap<String, ComponentPolicy>,
    /// Every mount's directory, by host path, opened when the registry was
    /// built.
    pub held: HashMap<PathBuf, HeldDir>,
    /// Network grants for every component.
    pub allow_net: Vec<Grant>,
    /// Ranges every component's granted names may resolve into.
    pub allow_private: Vec<Cidr>,
    /// The resolver and extra TLS roots, as set.
    pub net: NetSettings,
    /// What they became when the registry was built.
    pub net_shared: Option<Arc<NetShared>>,
    /// The secrets injections take their values from.
    pub secrets: Secrets,
    /// What `oci://` references load from, if set.
    pub pulled: Option<Arc<Pulled>>,
    /// Tool name patterns every component may call.
    pub calls: Vec<String>,
    /// Code mode: whether `run_code` is bundled, and what scripts may call.
    pub code_mode: CodeMode,
}

/// What one component gets on top of the defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct ComponentPolicy {
    pub limits: LimitOverrides,
    pub mounts: Vec<Mount>,
    pub allow_net: Vec<Grant>,
    pub allow_private: Vec<Cidr>,
    pub inject: Vec<Injection>,
    pub settings: BTreeMap<String, String>,
    pub calls: Vec<String>,
}

impl Policy {
    /// The tool name patterns `component` (from `source`) may call: the
    /// shared ones and its own; for code mode's bundled component, code
    /// mode's too. Only the bundled one: a component of the same name from
    /// a directory gets nothing of code mode's grant.
    pub(super) fn calls_for(&self, component: &str, source: &Source) -> Arc<[String]> {
        let own = self.components.get(component).map(|c| &c.calls);
        let code_mode = self.is_code_mode(component, source);
        let code_mode = code_mode.then(|| self.code_mode.tool_patterns());
        self.calls
            .iter()
            .chain(own.into_iter().flatten())
            .chain(code_mode.into_iter().flatten())
            .cloned()
            .collect()
    }

    /// Whether `component` from `source` is code mode's interpreter, with
    /// code mode on.
    pub(super) fn is_code_mode(&self, component: &str, source: &Source) -> bool {
        self.code_mode.is_enabled() && is_interpreter(component, source)
    }

    /// Refuses a `calls` pattern that is not a tool name pattern.
    pub(super) fn check_calls(&self) -> Result<(), Error> {
        let own = self.components.values().flat_map(|c| &c.calls);
        match self.calls.iter().chain(own).find(|p| !is_pattern(p)) {
            None => Ok(()),
            Some(pattern) => Err(Error::InvalidSetting {
                what: "calls grant",
                message: format!(
                    "`{pattern}` is not a tool name pattern: use letters, digits, `_` and `-`, with `*` for any run of characters"
                ),
            }),
        }
    }

    pub(super) fn limits_for(&self, component: &str) -> Limits {
        match self.components.get(component) {
            Some(policy) => policy.limits.apply(self.limits),
            None => self.limits,
        }
    }

    /// The default mounts, with the component's own ones added; a component
    /// mount at the same guest path replaces the default one.
    pub(super) fn mounts_for(&self, component: &str) -> Vec<Mount> {
        let extra = self
            .components
            .get(component)
            .map(|p| p.mounts.as_slice())
            .unwrap_or_default();
        self.mounts
            .iter()
            .filter(|m| !extra.iter().any(|e| e.guest() == m.guest()))
            .chain(extra)
            .cloned()
            .collect()
    }

    /// The shared grants with the component's own; `None` when there are
    /// none, so every request is refused.
    pub(super) fn network_for(&self, component: &str) -> Option<Arc<NetPolicy>> {
        let own = self.components.get(component);
        let grants: Vec<Grant> = self
            .allow_net
            .iter()
            .chain(own.map(|p| p.allow_net.as_slice()).unwrap_or_default())
            .cloned()
            .collect();
        if grants.is_empty() {
            return None;
        }
        let allow_private = self
            .allow_private
            .iter()
            .chain(own.map(|p| p.allow_private.as_slice()).unwrap_or_default())
            .copied()
            .collect();
        Some(Arc::new(NetPolicy {
            grants,
            allow_private,
            injections: own.map(|p| p.inject.clone()).unwrap_or_default(),
            secrets: self.secrets.clone(),
            shared: self.net_shared.clone()?,
        }))
    }

    /// The component's settings.
    pub(super) fn settings_for(&self, component: &str, source: &Source) -> Arc<ComponentSettings> {
        let mut map = self
            .components
            .get(component)
            .map(|p| p.settings.clone())
            .unwrap_or_default();
        if self.is_code_mode(component, source) {
            let print_kib = self.code_mode.print_limit_kib().to_string();
            map.insert("print_kib".to_string(), print_kib);
        }
        Arc::new(ComponentSettings::new(map))
    }

    /// Refuses a setting that references a secret, an injection whose
    /// secret is not set, and one no grant of its component lets out.
    pub(super) fn check_secrets(&self) -> Result<(), Error> {
        let secrets = self.secrets.current();
        for (name, component) in &self.components {
            for (key, value) in &component.settings {
                if settings::references_secret(value) {
                    return Err(Error::InvalidSetting {
                        what: "component setting",
                        message: format!(
                            "{name}.{key}: a secret cannot be a setting, since the tool reads its settings; add it to the tool's requests with an injection ([[components.{name}.network.inject]], RegistryBuilder::component_inject)"
                        ),
                    });
                }
            }
            let grants: Vec<&Grant> = self.allow_net.iter().chain(&component.allow_net).collect();
            for injection in &component.inject {
                let fail = |reason: String| Error::Injection {
                    component: name.clone(),
                    source: InjectionError {
                        url: injection.url(),
                        reason,
                    },
                };
                if let Some(missing) = injection.secrets().find(|s| secrets.get(s).is_none()) {
                    return Err(fail(format!("the secret `{missing}` is not set")));
                }
                let (destination, methods) = injection.destination();
                let granted =
                    |method: Option<&str>| grants.iter().any(|g| g.allows(&destination, method));
                let covered = match methods {
                    None => granted(None),
                    Some(methods) => methods.iter().all(|m| granted(Some(m))),
                };
                // Raw socket traffic is not searched for secrets: a socket to
                // the injection's host could read back what a request left
                // there.
                let raw = grants
                    .iter()
                    .find(|g| g.allows_sockets() && g.reaches(&destination.host));
                if let Some(raw) = raw {
                    return Err(fail(format!(
                        "the component may also open raw sockets to {} (`{raw}`), whose traffic toolcage cannot search for secrets; narrow that grant",
                        destination.host
                    )));
                }
                if !covered {
                    return Err(fail(format!(
                        "no network grant of the component allows it; grant `{}` too ([components.{name}.network] allow, or the shared [network] allow)",
                        injection.url()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether a caller granted `calls` may call a tool named `tool` by its
/// grant alone: one of the patterns matches the name.
pub(crate) fn granted(calls: &[String], tool: &str) -> bool {
    calls.iter().any(|pattern| glob_match(pattern, tool))
}

/// The one rule of what a caller may call, for what a model is shown and
/// for what a nested call reaches: `tool` is callable by `caller` (granted
/// `calls`) under `rules` (none: the embedder's own call, every tool
/// allowed) when its grant matches the name, the rules do not deny it, and,
/// for code mode's interpreter, it is not one of code mode's own tools (a
/// script running a script would only spend its budget twice).
pub(crate) fn callable(
    caller: &ToolInfo,
    calls: &[String],
    rules: Option<&Permissions>,
    tool: &ToolInfo,
) -> bool {
    let name = tool.descriptor.name.as_str();
    granted(calls, name)
        && !(is_code_mode_tool(caller) && is_code_mode_tool(tool))
        && rules.is_none_or(|rules| rules.permission_for(name) != Permission::Deny)
}
