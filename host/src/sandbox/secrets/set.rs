//! The operator's secrets as tools are served them: one shared handle the
//! operator can swap a new set into (a rotated token) while calls run, each
//! set with the redactor of its values.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::redact::Redactor;
use super::secret::Secret;

/// The secrets a registry's tools are served with: a shared handle, so the
/// operator can replace them (a rotated token) while tools run. A call
/// takes the set current when its request goes out.
///
/// ```
/// use toolcage::{Secret, Secrets};
///
/// let secrets = Secrets::new();
/// secrets.set(Secret::new("API_KEY", "k-0123456789").unwrap());
/// assert_eq!(secrets.names(), ["API_KEY"]);
/// assert_eq!(format!("{secrets:?}"), r#"Secrets(["API_KEY"])"#);
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    current: Arc<ArcSwap<SecretSet>>,
}

/// One version of the secrets, with the redactor of their values.
#[derive(Default)]
pub(crate) struct SecretSet {
    by_name: BTreeMap<String, Secret>,
    redactor: Option<Arc<Redactor>>,
}

impl SecretSet {
    fn new(by_name: BTreeMap<String, Secret>) -> SecretSet {
        let redactor = Redactor::new(by_name.values()).map(Arc::new);
        SecretSet { by_name, redactor }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Secret> {
        self.by_name.get(name)
    }

    /// What redacts every secret of this set; `None` when it is empty.
    pub(crate) fn redactor(&self) -> Option<&Arc<Redactor>> {
        self.redactor.as_ref()
    }
}

impl Secrets {
    /// No secrets.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Adds `secret`, replacing one of the same name.
    pub fn set(&self, secret: Secret) {
        self.current.rcu(|current| {
            let mut by_name = current.by_name.clone();
            by_name.insert(secret.name().to_string(), secret.clone());
            SecretSet::new(by_name)
        });
    }

    /// Replaces every secret with `secrets` (a later one of a name wins).
    pub fn replace(&self, secrets: impl IntoIterator<Item = Secret>) {
        let by_name = secrets
            .into_iter()
            .map(|secret| (secret.name().to_string(), secret))
            .collect();
        self.current.store(Arc::new(SecretSet::new(by_name)));
    }

    /// The names of the secrets held, sorted.
    pub fn names(&self) -> Vec<String> {
        self.current.load().by_name.keys().cloned().collect()
    }

    /// Whether no secret is held.
    pub fn is_empty(&self) -> bool {
        self.current.load().by_name.is_empty()
    }

    pub(crate) fn current(&self) -> Arc<SecretSet> {
        self.current.load_full()
    }

    /// What redacts the secrets set now, if any are: read without taking
    /// a count on the shared set, which every call would otherwise bump on
    /// one contended cache line.
    pub(crate) fn redactor(&self) -> Option<Arc<Redactor>> {
        self.current.load().redactor().cloned()
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Secrets").field(&self.names()).finish()
    }
}

impl FromIterator<Secret> for Secrets {
    fn from_iter<I: IntoIterator<Item = Secret>>(iter: I) -> Secrets {
        let secrets = Secrets::new();
        secrets.replace(iter);
        secrets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_whole_or_one_by_one() {
        let secrets = Secrets::new();
        assert!(secrets.is_empty() && secrets.current().redactor().is_none());
        secrets.set(Secret::new("A", "aaaaaaaa-1").unwrap());
        secrets.set(Secret::new("B", "bbbbbbbb-1").unwrap());
        secrets.set(Secret::new("A", "aaaaaaaa-2").unwrap());
        assert_eq!(secrets.names(), ["A", "B"]);
        assert_eq!(secrets.current().get("A").unwrap().value(), "aaaaaaaa-2");
        secrets.replace([Secret::new("C", "cccccccc-1").unwrap()]);
        assert_eq!(secrets.names(), ["C"]);
        assert!(secrets.current().redactor().is_some());
    }
}
