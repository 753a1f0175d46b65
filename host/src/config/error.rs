//! Why a `toolcage.toml` was refused, naming the key at fault.

use std::fmt::Display;
use std::ops::Range;

use crate::catalog::permissions::PermissionsError;

/// A `toolcage.toml` that [`Config::parse`](super::Config::parse) refused.
/// Every message names the key at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, or a value of the wrong type (`bundled = "yes"`); the
    /// message points at it in the text.
    #[error("{}", .0.to_string().trim_end())]
    Toml(#[source] toml::de::Error),
    /// A key no table entry ([`keys()`](crate::Config::keys)) takes, pointed at in
    /// the text, with the keys taken there.
    #[error("{message}")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// Where it is and what is taken there.
        message: String,
    },
    /// A value the key does not take.
    #[error("{key}: {message}")]
    Invalid {
        /// The dotted key, such as `limits.timeout_ms` or `tools[1]`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A `[permissions]` rule that is not `allow`, `ask` or `deny`, or a
    /// pattern that is not a tool name.
    #[error("{0}")]
    Permissions(#[source] PermissionsError),
}

impl ConfigError {
    pub(super) fn invalid(key: impl Into<String>, message: impl Display) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            message: message.to_string(),
        }
    }

    /// An unknown `key` at `span` of `text`, in the words and layout of the
    /// toml crate's own errors (as serde's `deny_unknown_fields` put it).
    pub(super) fn unknown_key(
        text: &str,
        span: Range<usize>,
        key: &str,
        expected: &[&str],
    ) -> ConfigError {
        let expected = match expected {
            [] => "there are no fields".to_string(),
            [one] => format!("expected `{one}`"),
            many => {
                let names: Vec<String> = many.iter().map(|n| format!("`{n}`")).collect();
                format!("expected one of {}", names.join(", "))
            }
        };
        let message = format!("{}unknown field `{key}`, {expected}", pointer(text, span));
        ConfigError::UnknownKey {
            key: key.to_string(),
            message,
        }
    }
}

/// The toml crate's pointer at `span`: the line and column, the line, and
/// carets under the span.
fn pointer(text: &str, span: Range<usize>) -> String {
    let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..line_start].matches('\n').count();
    let column = text[line_start..span.start].chars().count();
    let content = text[line_start..].split('\n').next().unwrap_or("");
    let number = (line + 1).to_string();
    let gutter = " ".repeat(number.len() + 1);
    let width = (span.end - span.start)
        .min(content.len().saturating_sub(column))
        .max(1);
    format!(
        "TOML parse error at line {number}, column {}\n{gutter}|\n{number} | {content}\n{gutter}|{} {}\n",
        column + 1,
        " ".repeat(column),
        "^".repeat(width)
    )
}
