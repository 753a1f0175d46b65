//! Plain settings for a component's calls, served through `wasi:config/store`
//! (the host's own implementation of its two functions, on the bindings of
//! `wit/toolcage.wit`, whose `toolset` world imports it).
//!
//! Threat model: settings are not secret (a region, a base URL), and a tool
//! reads them as it likes, so nothing secret may become one: a setting that
//! references a secret (`{{ secrets.NAME }}`) is refused when the registry is
//! built, with a pointer to injection instead. The store is read-only and
//! empty unless the operator wrote settings for the component; a call sees
//! its own component's settings only.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::bindings::config_store;

/// One component's settings, as its calls read them.
#[derive(Default, PartialEq, Eq)]
pub(crate) struct ComponentSettings {
    map: BTreeMap<String, String>,
}

impl ComponentSettings {
    pub(crate) fn new(map: BTreeMap<String, String>) -> ComponentSettings {
        ComponentSettings { map }
    }

    /// The value of `key`, if set.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.map.get(key).cloned()
    }

    /// Every key and value, sorted by key.
    pub(crate) fn all(&self) -> Vec<(String, String)> {
        self.map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// What one call's `wasi:config/store` serves: its component's settings,
/// read-only, shared by every call of the component.
/// A component without settings (the default) shares nothing with its
/// calls, so that concurrent calls do not count references on one shared
/// cache line.
pub(crate) struct SettingsCtx(Option<Arc<ComponentSettings>>);

impl SettingsCtx {
    pub(crate) fn of(settings: &Arc<ComponentSettings>) -> SettingsCtx {
        SettingsCtx((!settings.map.is_empty()).then(|| settings.clone()))
    }
}

impl config_store::Host for SettingsCtx {
    fn get(&mut self, key: String) -> Result<Option<String>, config_store::Error> {
        Ok(self.0.as_ref().and_then(|settings| settings.get(&key)))
    }

    fn get_all(&mut self) -> Result<Vec<(String, String)>, config_store::Error> {
        Ok(self.0.as_ref().map(|s| s.all()).unwrap_or_default())
    }
}

impl fmt::Debug for ComponentSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(&self.map).finish()
    }
}

/// Whether `value` references a secret: `{{` then `secrets.`, with any
/// spaces between.
pub(crate) fn references_secret(value: &str) -> bool {
    value
        .match_indices("{{")
        .any(|(at, _)| value[at + 2..].trim_start().starts_with("secrets."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_serves_the_settings_sorted() {
        use config_store::Host;
        let map = [("region", "eu"), ("base", "https://x")];
        let map = map.map(|(k, v)| (k.to_string(), v.to_string()));
        let settings = Arc::new(ComponentSettings::new(map.into_iter().collect()));
        let mut settings = SettingsCtx::of(&settings);
        assert_eq!(
            settings.get("region".into()).unwrap().as_deref(),
            Some("eu")
        );
        assert_eq!(settings.get("missing".into()).unwrap(), None);
        let keys: Vec<_> = settings
            .get_all()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["base", "region"]);
    }

    #[test]
    fn a_component_without_settings_is_served_an_empty_store() {
        use config_store::Host;
        let mut settings = SettingsCtx::of(&Arc::default());
        assert!(settings.0.is_none(), "nothing shared");
        assert_eq!(settings.get("region".into()).unwrap(), None);
        assert_eq!(settings.get_all().unwrap(), Vec::new());
    }

    #[test]
    fn secret_references_are_found() {
        assert!(references_secret("{{ secrets.TOKEN }}"));
        assert!(references_secret("Bearer {{secrets.X}}"));
        assert!(!references_secret("{{ region }}"));
        assert!(!references_secret("eu-west-1"));
    }
}
