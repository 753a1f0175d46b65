//! The tool's settings: string values the operator wrote for its component
//! (`[components.NAME.config]` in toolcage.toml, `NAME` being the
//! component's file stem), read through `wasi:config/store`.
//!
//! A component has no settings unless the operator wrote some, so give
//! every setting a default. A call reads its own component's settings only,
//! and cannot change them. Settings are not secrets: the host refuses to
//! make a secret one, and adds secrets to the tool's requests instead.
//!
//! ```no_run
//! use toolcage_guest::{Outcome, config};
//!
//! fn greeting() -> Result<String, Outcome> {
//!     Ok(config::get("greeting")?.unwrap_or_else(|| "Hello".into()))
//! }
//! ```
//!
//! Outside a component (in a native unit test) there is no host to ask and
//! these functions panic: read settings where the tool starts, and pass
//! their values to the logic the tests call.

use std::collections::BTreeMap;
use std::fmt;

use crate::Outcome;
use crate::bindings::wasi::config::store;

/// Why the settings could not be read. toolcage always answers; the error
/// is there for hosts whose settings come from elsewhere (a remote store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Where the settings come from failed, and said this.
    Upstream(String),
    /// Reading them failed with this I/O error.
    Io(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Upstream(why) => write!(f, "the tool's settings could not be read: {why}"),
            ConfigError::Io(why) => {
                write!(f, "the tool's settings could not be read (I/O): {why}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<store::Error> for ConfigError {
    fn from(error: store::Error) -> Self {
        match error {
            store::Error::Upstream(why) => ConfigError::Upstream(why),
            store::Error::Io(why) => ConfigError::Io(why),
        }
    }
}

/// A failed read fails the call with its reason, so `config::get(key)?`
/// works in [`Tool::call`](crate::Tool::call).
impl From<ConfigError> for Outcome {
    fn from(error: ConfigError) -> Self {
        Outcome::text(format!("{error}."))
    }
}

/// The setting `key`, or `None` when the operator did not write it.
pub fn get(key: &str) -> Result<Option<String>, ConfigError> {
    Ok(store::get(key)?)
}

/// Every setting of the component, by key: empty when the operator wrote
/// none.
pub fn get_all() -> Result<BTreeMap<String, String>, ConfigError> {
    Ok(store::get_all()?.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_fails_the_call_with_its_reason() {
        let error = ConfigError::from(store::Error::Upstream("vault sealed".into()));
        assert_eq!(error, ConfigError::Upstream("vault sealed".into()));
        assert_eq!(
            Outcome::from(error).output,
            "the tool's settings could not be read: vault sealed."
        );
        let error = ConfigError::from(store::Error::Io("disk gone".into()));
        assert_eq!(
            error.to_string(),
            "the tool's settings could not be read (I/O): disk gone"
        );
    }
}
