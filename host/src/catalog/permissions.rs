//! Which tools a model may call: `allow`, `ask` or `deny`, by tool name.
//!
//! Threat model: the model chooses which tool to call and with what, and may
//! have been steered by anything it read (prompt injection). The operator's
//! rules are checked before a call runs; a denied call never reaches its
//! tool, and its result tells the model not to retry. `ask` defers to an
//! [`Approver`] the embedder supplies (typically a human); with none, `ask`
//! denies. A tool's side-effect hints are the tool's own claims and play no
//! part here.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use serde_json::Value;

use super::pattern::{glob_match, is_pattern};
use super::table::ToolInfo;

/// What the rules say about a call. Ordered from the most permissive to the
/// most restrictive, which is how ties between equally specific rules are
/// broken.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// The call runs.
    Allow,
    /// The call runs if the [`Approver`] approves it.
    Ask,
    /// The call is refused.
    Deny,
}

impl Permission {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Allow => "allow",
            Permission::Ask => "ask",
            Permission::Deny => "deny",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A permission that is none of `allow`, `ask`, `deny`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission {0:?}; expected \"allow\", \"ask\" or \"deny\"")]
pub struct UnknownPermission(pub String);

impl FromStr for Permission {
    type Err = UnknownPermission;

    /// Parses `allow`, `ask` or `deny` (lowercase).
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "allow" => Ok(Permission::Allow),
            "ask" => Ok(Permission::Ask),
            "deny" => Ok(Permission::Deny),
            other => Err(UnknownPermission(other.to_string())),
        }
    }
}

/// A bad permission rule. The message names the rule's key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PermissionsError {
    /// A value is not a permission.
    #[error(
        "permissions: `{key}` = {value:?} is not a permission; expected \"allow\", \"ask\" or \"deny\""
    )]
    Value {
        /// The rule's key (a pattern, or `default`).
        key: String,
        /// The bad value.
        value: String,
    },
    /// A key is not a tool name pattern.
    #[error(
        "permissions: `{pattern}` is not a tool name pattern: use letters, digits, `_` and `-`, \
         with `*` for any run of characters"
    )]
    Pattern {
        /// The bad pattern.
        pattern: String,
    },
}

/// Rules saying, by tool name, which calls may run.
///
/// A rule's pattern is a tool name in which `*` stands for any run of
/// characters (possibly empty); there is no other wildcard. For a given tool
/// the most specific matching rule wins:
///
/// 1. a rule without `*` (the exact name) beats every wildcard;
/// 2. among wildcards, the one with more literal (non-`*`) characters wins,
///    so `write_file*` beats `write_*`, which beats `*`;
/// 3. between equally specific wildcards, the most restrictive wins
///    (`deny` over `ask` over `allow`).
///
/// A tool no rule matches gets the default. There is no `Default` impl: say
/// what the default is with [`Permissions::new`], [`Permissions::allow_all`]
/// or [`Permissions::deny_all`].
///
/// ```
/// use toolcage::agent::{Permission, Permissions};
///
/// let rules = Permissions::allow_all()
///     .rule("write_*", Permission::Ask)?
///     .rule("edit_file", Permission::Deny)?;
/// assert_eq!(rules.permission_for("read_file"), Permission::Allow);
/// assert_eq!(rules.permission_for("write_file"), Permission::Ask);
/// assert_eq!(rules.permission_for("edit_file"), Permission::Deny);
/// # Ok::<(), toolcage::agent::PermissionsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    default: Permission,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    pattern: String,
    permission: Permission,
}

impl Rule {
    fn is_exact(&self) -> bool {
        !self.pattern.contains('*')
    }

    fn literal_chars(&self) -> usize {
        self.pattern.chars().filter(|&c| c != '*').count()
    }
}

impl Permissions {
    /// No rules, and `default` for every tool.
    pub fn new(default: Permission) -> Self {
        Permissions {
            default,
            rules: Vec::new(),
        }
    }

    /// No rules, every tool allowed: `Permissions::new(Permission::Allow)`.
    pub fn allow_all() -> Self {
        Permissions::new(Permission::Allow)
    }

    /// No rules, every tool denied: `Permissions::new(Permission::Deny)`.
    pub fn deny_all() -> Self {
        Permissions::new(Permission::Deny)
    }

    /// Adds the rule `pattern` → `permission`, replacing an earlier rule with
    /// the same pattern. Fails if `pattern` is not made of tool name
    /// characters (`[A-Za-z0-9_-]`) and `*`.
    pub fn rule(
        mut self,
        pattern: impl Into<String>,
        permission: Permission,
    ) -> Result<Self, PermissionsError> {
        let pattern = pattern.into();
        if !is_pattern(&pattern) {
            return Err(PermissionsError::Pattern { pattern });
        }
        self.rules.retain(|rule| rule.pattern != pattern);
        self.rules.push(Rule {
            pattern,
            permission,
        });
        Ok(self)
    }

    /// Rules from a configuration table such as
    /// `[permissions]` `default = "allow"`, `"write_*" = "ask"`,
    /// `edit_file = "deny"`: the key `default` sets the default (so no rule
    /// can name a tool called `default`), and `default` (the argument) is the
    /// default when the table has no such key. Every value must be `allow`,
    /// `ask` or `deny`; the error names the offending key.
    pub fn from_rules<K, V>(
        default: &str,
        rules: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, PermissionsError>
    where
        K: Into<String>,
        V: AsRef<str>,
    {
        let parse = |key: &str, value: &str| {
            value
                .parse::<Permission>()
                .map_err(|_| PermissionsError::Value {
                    key: key.to_string(),
                    value: value.to_string(),
                })
        };
        let mut permissions = Permissions::new(parse("default", default)?);
        for (key, value) in rules {
            let key: String = key.into();
            let permission = parse(&key, value.as_ref())?;
            if key == "default" {
                permissions.default = permission;
            } else {
                permissions = permissions.rule(key, permission)?;
            }
        }
        Ok(permissions)
    }

    /// The permission for tools no rule matches.
    pub fn default_permission(&self) -> Permission {
        self.default
    }

    /// What the rules say about the tool called `tool`.
    pub fn permission_for(&self, tool: &str) -> Permission {
        if let Some(rule) = self
            .rules
            .iter()
            .find(|rule| rule.is_exact() && rule.pattern == tool)
        {
            return rule.permission;
        }
        self.rules
            .iter()
            .filter(|rule| !rule.is_exact() && glob_match(&rule.pattern, tool))
            .max_by_key(|rule| (rule.literal_chars(), rule.permission))
            .map_or(self.default, |rule| rule.permission)
    }
}

/// Rules an operator may replace while calls run (a reload of
/// `[permissions]`): every handle to them sees the latest. A policy made
/// with [`CallPolicy::following`](crate::CallPolicy::following) checks a
/// call against them when it starts, and so does each nested call of its
/// tree: a script running when the rules change is held to the new ones
/// at its next call.
#[derive(Debug, Clone)]
pub struct LiveRules(Arc<ArcSwap<Permissions>>);

impl LiveRules {
    /// Rules that start as `permissions`.
    pub fn new(permissions: Permissions) -> Self {
        LiveRules(Arc::new(ArcSwap::from_pointee(permissions)))
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Permissions> {
        self.0.load_full()
    }

    /// Replaces the rules; calls that start from now on are checked
    /// against `permissions`.
    pub fn set(&self, permissions: Permissions) {
        self.0.store(Arc::new(permissions));
    }
}

/// What the [`Approver`] is asked about: one call whose tool's rule is `ask`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments, parsed (only calls whose arguments are JSON are
    /// asked about: the others fail without running).
    pub arguments: Value,
    /// The tool: its descriptor (title, description, hints) and component.
    pub info: ToolInfo,
    /// For a nested call, the tool that made it (and whose call id is its
    /// parent); `None` for a call from the model.
    pub caller: Option<String>,
}

/// The [`Approver`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call.
    Approve,
    /// Do not run it.
    Refuse {
        /// Why, for the model (for example what the user said instead).
        reason: Option<String>,
    },
}

/// Decides on calls whose rule is `ask`, typically by asking a human. Calls
/// of one batch are asked about one at a time, in the batch's order.
///
/// Any `Fn(ApprovalRequest) -> impl Future<Output = Approval>` closure is an
/// approver:
///
/// ```
/// use toolcage::agent::{Approval, ApprovalRequest};
///
/// let approver = |request: ApprovalRequest| async move {
///     if request.info.descriptor.hints.destructive {
///         Approval::Refuse { reason: Some("no destructive tools today".into()) }
///     } else {
///         Approval::Approve
///     }
/// };
/// # let _: &dyn toolcage::agent::Approver = &approver;
/// ```
pub trait Approver: Send + Sync {
    /// Approves or refuses `request`.
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'_, Approval>;
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = Approval> + Send + 'static,
{
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'_, Approval> {
        Box::pin(self(request))
    }
}
