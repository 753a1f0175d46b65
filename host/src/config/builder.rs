//! From a parsed file to a [`RegistryBuilder`] granting what it grants.

use super::Config;
use crate::catalog::error::Error;
use crate::catalog::registry::RegistryBuilder;
use crate::sandbox::limits::LimitOverrides;
use crate::sandbox::secrets::Secrets;

impl Config {
    /// A registry builder granting what this file grants, with `limits`
    /// (such as command-line flags) layered over the file's, holding the
    /// secrets it names, read now ([`read_secrets`](Self::read_secrets)).
    pub fn registry_builder(&self, limits: &LimitOverrides) -> Result<RegistryBuilder, Error> {
        let defaults = self
            .limits
            .then(limits)
            .apply(crate::sandbox::limits::Limits::default());
        let secrets: Secrets = self.read_secrets()?.into_iter().collect();
        let mut builder = crate::catalog::registry::Registry::builder()
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
