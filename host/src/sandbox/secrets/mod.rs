//! Secrets the tool never sees: held by the host, added to a tool's requests
//! at egress, and redacted from everything that comes back.
//!
//! Threat model: a tool that holds a credential can leak it: log it, echo it
//! to the model, send it to another host. So a tool never holds one:
//! - the operator's secrets live in the host only, in memory zeroed on drop;
//!   their `Debug` and `Display` print the name, never the value, and no
//!   error, log line or report carries a value;
//! - the sender adds a credential to a request only when an injection of the
//!   tool's component matches it exactly (scheme, host, port, then the path
//!   prefix and methods when given) and a grant lets the request through; the
//!   guest's own value for that header is replaced ([`inject`]);
//! - every secret's value, raw, base64-encoded and in any spelling that
//!   JSON-escapes or percent-encodes any of its characters, is replaced with `[redacted secret NAME]` in every response
//!   header and body a tool receives, as the body streams and across chunk
//!   boundaries, and again in everything a call hands to the model or the
//!   operator: output, details, logs, progress, stdout and stderr
//!   ([`redact`]), and in every line toolcage logs about a call: network
//!   refusals and failures (a refused URL, a header's value) are redacted
//!   before they are cut, noted or traced; a response from an injection's
//!   origin must come unencoded, or it fails closed, since compressed bytes
//!   cannot be searched.
//!
//! What it cannot stop: a tool using the credential it cannot see toward the
//! injection's origin, within its grant. That is why injections are exact
//! and grants can be limited to methods and paths.

pub(crate) mod inject;
pub(crate) mod redact;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use zeroize::Zeroizing;

pub use inject::{Injection, InjectionError};
use redact::Redactor;

/// The shortest secret value accepted: a shorter one would match ordinary
/// text, and its redaction would garble what tools receive.
pub const MIN_SECRET_BYTES: usize = 8;

/// The log targets whose debug and trace events carry a guest's bytes as
/// they are, before any redaction: wasmtime-wasi's (and wasi-io's and
/// wasi-http's) own events print what a guest writes to its streams and the
/// strings it passes to WASI. toolcage's CLI drops those events whatever the
/// log level; an embedder with a subscriber of its own should do the same
/// with [`may_carry_unredacted_bytes`]. Every event toolcage itself logs
/// about a call is redacted before it is logged.
pub const UNREDACTED_LOG_TARGETS: &[&str] = &["wasmtime_wasi"];

/// Whether a tracing event of `target` at `level` may carry a guest's bytes
/// unredacted (see [`UNREDACTED_LOG_TARGETS`]): a filter for an embedder's
/// subscriber.
///
/// ```
/// use toolcage::may_carry_unredacted_bytes;
/// use tracing::Level;
///
/// assert!(may_carry_unredacted_bytes("wasmtime_wasi::p2::write_stream", &Level::DEBUG));
/// assert!(!may_carry_unredacted_bytes("wasmtime_wasi::p2::write_stream", &Level::INFO));
/// assert!(!may_carry_unredacted_bytes("toolcage::net", &Level::TRACE));
/// ```
pub fn may_carry_unredacted_bytes(target: &str, level: &tracing::Level) -> bool {
    *level > tracing::Level::INFO
        && UNREDACTED_LOG_TARGETS
            .iter()
            .any(|prefix| target.starts_with(prefix))
}

/// The longest secret value accepted.
const MAX_SECRET_BYTES: usize = 16 << 10;

/// A credential the host holds for tools: a name and a value. `Debug` and
/// `Display` show the name only; the value is zeroed when the last copy is
/// dropped.
///
/// ```
/// use toolcage::Secret;
///
/// let token = Secret::new("GITHUB_TOKEN", "ghp_0123456789abcdef").unwrap();
/// assert_eq!(format!("{token:?}"), "Secret(GITHUB_TOKEN)");
/// assert_eq!(token.to_string(), "[secret GITHUB_TOKEN]");
/// assert!(Secret::new("SHORT", "1234").is_err());
/// ```
#[derive(Clone)]
pub struct Secret {
    name: String,
    value: Zeroizing<String>,
}

/// Why a secret could not be read or accepted. It names the secret and
/// where it was looked for, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret `{name}`: {reason}")]
pub struct SecretError {
    /// The secret's name.
    pub name: String,
    /// What is wrong.
    pub reason: String,
}

impl Secret {
    /// A secret named `name` (letters, digits and `_`, not starting with a
    /// digit) holding `value`: at least [`MIN_SECRET_BYTES`] bytes and at
    /// most 16 KiB, without control characters (it goes into headers).
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Result<Secret, SecretError> {
        let name = name.into();
        let value = Zeroizing::new(value.into());
        let fail = |reason: &str| SecretError {
            name: name.clone(),
            reason: reason.to_string(),
        };
        check_name(&name).map_err(|reason| fail(&reason))?;
        if value.len() < MIN_SECRET_BYTES {
            return Err(fail(&format!(
                "its value is shorter than {MIN_SECRET_BYTES} bytes: too short to redact reliably, since it would match ordinary text"
            )));
        }
        if value.len() > MAX_SECRET_BYTES {
            return Err(fail("its value is longer than 16 KiB"));
        }
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(fail(
                "its value holds a control character (a line break?), which no header may carry",
            ));
        }
        Ok(Secret { name, value })
    }

    /// The secret named `name`, from the environment variable `var`.
    pub fn from_env(name: impl Into<String>, var: &str) -> Result<Secret, SecretError> {
        let name = name.into();
        match std::env::var(var) {
            Ok(value) => Secret::new(name, value),
            Err(std::env::VarError::NotPresent) => Err(SecretError {
                name,
                reason: format!("the environment variable {var} is not set"),
            }),
            Err(std::env::VarError::NotUnicode(_)) => Err(SecretError {
                name,
                reason: format!("the environment variable {var} is not valid UTF-8"),
            }),
        }
    }

    /// The secret named `name`, from the file at `path`: its whole content,
    /// less one trailing line break.
    pub fn from_file(
        name: impl Into<String>,
        path: impl AsRef<Path>,
    ) -> Result<Secret, SecretError> {
        let (name, path) = (name.into(), path.as_ref());
        let fail = |reason: String| SecretError {
            name: name.clone(),
            reason,
        };
        let bytes = Zeroizing::new(
            std::fs::read(path).map_err(|e| fail(format!("reading {}: {e}", path.display())))?,
        );
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| fail(format!("{} is not valid UTF-8", path.display())))?;
        let text = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(text);
        Secret::new(name.clone(), text)
            .map_err(|e| fail(format!("{} (read from {})", e.reason, path.display())))
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", self.name)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[secret {}]", self.name)
    }
}

/// Letters, digits and `_`, not starting with a digit, at most 64 bytes.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err("a secret's name is 1 to 64 letters, digits and `_`, not starting with a digit".into())
    }
}

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
            by_name.insert(secret.name.clone(), secret.clone());
            SecretSet::new(by_name)
        });
    }

    /// Replaces every secret with `secrets` (a later one of a name wins).
    pub fn replace(&self, secrets: impl IntoIterator<Item = Secret>) {
        let by_name = secrets
            .into_iter()
            .map(|secret| (secret.name.clone(), secret))
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
    fn values_never_print() {
        let secret = Secret::new("TOKEN", "s3cr3t-value-123").unwrap();
        for shown in [
            format!("{secret:?}"),
            secret.to_string(),
            format!("{secret:#?}"),
        ] {
            assert!(!shown.contains("s3cr3t"), "{shown}");
        }
        let secrets: Secrets = [secret].into_iter().collect();
        assert!(!format!("{secrets:?}").contains("s3cr3t"));
    }

    #[test]
    fn bad_secrets_are_named_without_their_value() {
        let long = "k".repeat(MAX_SECRET_BYTES + 1);
        assert!(Secret::new("T", &long[1..]).is_ok(), "16 KiB is the most");
        for (name, value, needle) in [
            ("T", "abc1", "shorter than 8"),
            ("T", long.as_str(), "longer than 16 KiB"),
            ("T", "line\nbreak-value", "control character"),
            ("1T", "long-enough-value", "not starting with a digit"),
            ("A-B", "long-enough-value", "letters, digits"),
        ] {
            let error = Secret::new(name, value).unwrap_err();
            assert!(error.to_string().contains(needle), "{error}");
            assert!(!error.to_string().contains(value), "{error}");
        }
        let missing = Secret::from_env("T", "TOOLCAGE_TEST_SURELY_UNSET").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "secret `T`: the environment variable TOOLCAGE_TEST_SURELY_UNSET is not set"
        );
        let missing = Secret::from_file("T", "/nonexistent/token").unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("secret `T`: reading /nonexistent/token: ")
        );
    }

    #[test]
    fn a_file_loses_one_trailing_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abcdefgh-1234\r\n").unwrap();
        assert_eq!(
            Secret::from_file("T", &path).unwrap().value(),
            "abcdefgh-1234"
        );
        std::fs::write(&path, "abcdefgh-1234 \n\n").unwrap();
        let error = Secret::from_file("T", &path).unwrap_err();
        assert!(error.reason.contains("control character"), "{error}");
        assert!(error.reason.contains("read from"), "{error}");
    }

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
