//! A secret: a name and a value held by the host, zeroed on drop, never
//! printed.
//!
//! Threat model: a value must not reach a log, an error or a report, and
//! must be long enough that redacting it does not garble ordinary text. So
//! `Debug` and `Display` show the name only, every error names the secret
//! and where it was looked for but never its value, and a value shorter
//! than [`MIN_SECRET_BYTES`] is refused.

use std::fmt;
use std::path::Path;

use zeroize::Zeroizing;

/// The shortest secret value accepted: a shorter one would match ordinary
/// text, and its redaction would garble what tools receive.
pub const MIN_SECRET_BYTES: usize = 8;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::secrets::Secrets;

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
}
