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

/// One component's settings, as its calls read them.
#[derive(Default, PartialEq, Eq)]
pub(crate) struct Settings {
    map: BTreeMap<String, String>,
}

impl Settings {
    pub(crate) fn new(map: BTreeMap<String, String>) -> Settings {
        Settings { map }
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

impl fmt::Debug for Settings {
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
    fn secret_references_are_found() {
        assert!(references_secret("{{ secrets.TOKEN }}"));
        assert!(references_secret("Bearer {{secrets.X}}"));
        assert!(!references_secret("{{ region }}"));
        assert!(!references_secret("eu-west-1"));
    }
}
