//! Every key `toolcage.toml` takes, as data: the parser rejects any other
//! key with this table, and the book's reference lists the same table (a
//! test checks both ways), so neither can drift from the parser.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// One key of `toolcage.toml`.
///
/// `path` is dotted from the top: `*` stands for a name the operator
/// chooses (a component, a secret, a setting, a permission pattern), and a
/// segment ending in `[]` is an array whose tables hold the keys after it
/// (`mounts[].host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The dotted path, such as `limits.timeout_ms` or
    /// `components.*.mounts[].host`.
    pub path: &'static str,
    /// What an absent key means.
    pub default: &'static str,
    /// What the key sets, in one line.
    pub meaning: &'static str,
}

const fn key(path: &'static str, default: &'static str, meaning: &'static str) -> Key {
    Key {
        path,
        default,
        meaning,
    }
}

/// The per-call limits, under `[limits]` and `[components.*.limits]`.
macro_rules! limit_keys {
    ($prefix:literal) => {
        [
            key(
                concat!($prefix, "fuel"),
                "10_000_000_000",
                "instructions a call may run, or \"unlimited\"",
            ),
            key(
                concat!($prefix, "timeout_ms"),
                "30_000",
                "a call's wall-clock time, in milliseconds",
            ),
            key(
                concat!($prefix, "memory_mib"),
                "256",
                "a call's linear memory, in MiB",
            ),
            key(
                concat!($prefix, "output_kib"),
                "1024",
                "a call's output and details, in KiB",
            ),
            key(
                concat!($prefix, "log_kib"),
                "64",
                "stdout and stderr kept as logs, each, in KiB",
            ),
            key(
                concat!($prefix, "stack_kib"),
                "1024",
                "the wasm stack, in KiB (at most 262144)",
            ),
            key(
                concat!($prefix, "net_requests"),
                "50",
                "HTTP requests (and lookups, connects) a call may make",
            ),
            key(
                concat!($prefix, "net_out_kib"),
                "16_384",
                "request bytes a call may send, in KiB",
            ),
            key(
                concat!($prefix, "net_in_kib"),
                "65_536",
                "response bytes a call may receive, in KiB",
            ),
            key(
                concat!($prefix, "net_connections"),
                "4",
                "connections a call may hold at once",
            ),
            key(
                concat!($prefix, "net_first_byte_ms"),
                "10_000",
                "to connect, then to the response head, in milliseconds",
            ),
            key(
                concat!($prefix, "net_between_bytes_ms"),
                "10_000",
                "a response body's longest stall, in milliseconds",
            ),
            key(
                concat!($prefix, "nested_calls"),
                "100",
                "nested calls (tools calling tools) one call tree may make",
            ),
            key(
                concat!($prefix, "nested_depth"),
                "4",
                "how deep a call tree may nest",
            ),
            key(
                concat!($prefix, "nested_kib"),
                "16_384",
                "arguments and results a call tree's nested calls may pass, in KiB",
            ),
        ]
    };
}

/// The mount keys, under `[[mounts]]` and `[[components.*.mounts]]`.
macro_rules! mount_keys {
    ($prefix:literal) => {
        [
            key(
                concat!($prefix, "host"),
                "required",
                "the host directory, relative to the file's directory",
            ),
            key(
                concat!($prefix, "guest"),
                "required",
                "the absolute path the tools see it at",
            ),
            key(
                concat!($prefix, "mode"),
                "\"ro\"",
                "\"ro\" (read-only) or \"rw\" (read-write)",
            ),
        ]
    };
}

/// The grant keys, under `[network]` and `[components.*.network]`.
macro_rules! grant_keys {
    ($prefix:literal) => {
        [
            key(
                concat!($prefix, "allow"),
                "[]",
                "what tools may reach: patterns, or tables with url and methods",
            ),
            key(
                concat!($prefix, "allow[].url"),
                "required",
                "a grant's pattern, scheme://host[:port][/path]",
            ),
            key(
                concat!($prefix, "allow[].methods"),
                "every method",
                "the HTTP methods a grant allows",
            ),
            key(
                concat!($prefix, "allow_private"),
                "[]",
                "CIDR ranges granted names may resolve into",
            ),
        ]
    };
}

const TOP: [Key; 2] = [
    key(
        "tools",
        "[]",
        "tools directories and oci:// references, loaded in order",
    ),
    key(
        "bundled",
        "true",
        "whether the standard toolset is registered, first",
    ),
];
const LIMITS: [Key; 15] = limit_keys!("limits.");
const MOUNTS: [Key; 3] = mount_keys!("mounts[].");
const NETWORK: [Key; 5] = {
    let [a, b, c, d] = grant_keys!("network.");
    [
        a,
        b,
        c,
        d,
        key(
            "network.ca_file",
            "none",
            "a PEM file of TLS roots trusted besides the web PKI's",
        ),
    ]
};
const SECRETS: [Key; 2] = [
    key(
        "secrets.*.env",
        "one of env or file",
        "the environment variable holding the secret",
    ),
    key(
        "secrets.*.file",
        "one of env or file",
        "the file holding the secret (less one trailing line break)",
    ),
];
const COMPONENT_LIMITS: [Key; 15] = limit_keys!("components.*.limits.");
const COMPONENT_MOUNTS: [Key; 3] = mount_keys!("components.*.mounts[].");
const COMPONENT_NETWORK: [Key; 4] = grant_keys!("components.*.network.");
const COMPONENT_REST: [Key; 6] = [
    key(
        "components.*.calls",
        "[]",
        "the tools (name patterns, `*` a wildcard) the component's tools may call",
    ),
    key(
        "components.*.network.inject[].url",
        "required",
        "the exact origin (and path prefix) a secret is added to",
    ),
    key(
        "components.*.network.inject[].header",
        "required",
        "the header the secret goes in",
    ),
    key(
        "components.*.network.inject[].value",
        "required",
        "the header's value, with {{ secrets.NAME }}",
    ),
    key(
        "components.*.network.inject[].methods",
        "every method",
        "the methods that get the header",
    ),
    key(
        "components.*.config.*",
        "none",
        "a setting the component's tools read (a string)",
    ),
];
const DISTRIBUTION: [Key; 6] = [
    key(
        "oci.insecure_registries",
        "[]",
        "registries (host:port) spoken to over plain HTTP",
    ),
    key(
        "oci.store",
        "$XDG_CACHE_HOME/toolcage/oci",
        "the content store of pulled components",
    ),
    key(
        "trust.require_digest",
        "true",
        "a tag is used only through the digest toolcage.lock recorded",
    ),
    key(
        "trust.keys[].prefix",
        "required",
        "the oci:// references a key covers",
    ),
    key(
        "trust.keys[].key",
        "required",
        "the cosign public key (PEM)",
    ),
    key(
        "trust.keys[].require_signature",
        "true",
        "whether a signature by the key is required",
    ),
];
const CODE_MODE: [Key; 6] = [
    key(
        "code_mode.enabled",
        "true",
        "whether run_code (with search_tools, describe_tool) is registered",
    ),
    key(
        "code_mode.tools",
        "[\"*\"]",
        "the tools (name patterns) a run_code script may call, under [permissions]",
    ),
    key(
        "code_mode.print_kib",
        "64",
        "what a script may print, in KiB",
    ),
    key(
        "code_mode.session_kib",
        "4096",
        "the largest session a run_code script keeps, in KiB; a larger one is not saved, and the run says so",
    ),
    key(
        "code_mode.sessions_per_caller",
        "16",
        "the sessions one caller keeps; saving one more drops the one idle longest",
    ),
    key(
        "code_mode.session_idle_ms",
        "1800000",
        "how long a session lasts unused, in milliseconds",
    ),
];
const STATE: [Key; 10] = [
    key(
        "state.key_file",
        "none",
        "the key (32 bytes, or 64 hex digits) sealing a paused run's state; without it, a key of the server process's own",
    ),
    key(
        "state.expiry_ms",
        "600000",
        "how long a paused run's state lasts, in milliseconds",
    ),
    key(
        "state.inline_kib",
        "64",
        "the largest state a client carries, in KiB; a larger one stays in the server's store",
    ),
    key(
        "state.store_mib",
        "64",
        "what the server's state store holds in memory, in MiB",
    ),
    key(
        "state.backend",
        "\"memory\"",
        "where the state store is: \"memory\" (this process's) or \"redis\" (shared by replicas)",
    ),
    key(
        "state.url",
        "none",
        "Redis's address, redis://host:port/db or rediss:// for TLS (backend = \"redis\")",
    ),
    key(
        "state.password_secret",
        "none",
        "the [secrets] entry holding Redis's password",
    ),
    key(
        "state.prefix",
        "\"toolcage:\"",
        "what every Redis key begins with: one per deployment",
    ),
    key(
        "state.timeout_ms",
        "1000",
        "how long connecting to Redis and each command may take, in milliseconds",
    ),
    key(
        "state.required",
        "true",
        "whether serve stops (exit 2) when Redis cannot be reached at start; false serves with a store of its own, saying so",
    ),
];
const MCP_SERVERS_SANDBOX: [Key; 2] = [
    key(
        "mcp_servers.*.sandbox",
        "\"none\"",
        "\"bubblewrap\" to confine the server with bwrap, or \"none\" (it runs with toolcage's rights)",
    ),
    key(
        "mcp_servers.*.network",
        "false",
        "whether a confined server shares toolcage's network",
    ),
];
const MCP_SERVER_MOUNTS: [Key; 3] = mount_keys!("mcp_servers.*.mounts[].");
const MCP_SERVERS: [Key; 12] = [
    key(
        "mcp_servers.*.command",
        "one of command or url",
        "the program that runs a stdio server (on toolcage's PATH, or a path)",
    ),
    key(
        "mcp_servers.*.url",
        "one of command or url",
        "a remote server's Streamable HTTP endpoint, granted by [network] allow",
    ),
    key(
        "mcp_servers.*.headers.*",
        "none",
        "a header sent to a remote server: text, with {{ secrets.NAME }}",
    ),
    key("mcp_servers.*.args", "[]", "the program's arguments"),
    key(
        "mcp_servers.*.env.*",
        "none",
        "a variable of the server's otherwise empty environment: text, or {{ secrets.NAME }}",
    ),
    key(
        "mcp_servers.*.cwd",
        "toolcage's",
        "the directory the server starts in",
    ),
    key(
        "mcp_servers.*.prefix",
        "\"mcp__NAME__\"",
        "what the server's tool names are prefixed with in the registry",
    ),
    key(
        "mcp_servers.*.tools",
        "[\"*\"]",
        "the server's tools (name patterns, by the server's names) to take",
    ),
    key(
        "mcp_servers.*.exclude_tools",
        "[]",
        "the server's tools (name patterns) to leave out",
    ),
    key(
        "mcp_servers.*.timeout_ms",
        "limits.timeout_ms",
        "a call's wall-clock time, in milliseconds (then it is cancelled upstream)",
    ),
    key(
        "mcp_servers.*.output_kib",
        "limits.output_kib",
        "an answer's text and structured content, in KiB",
    ),
    key(
        "mcp_servers.*.startup_timeout_ms",
        "30_000",
        "how long the server has to initialize and list its tools",
    ),
];
const PERMISSIONS: [Key; 2] = [
    key(
        "permissions.default",
        "\"allow\"",
        "allow, ask or deny for calls no rule matches",
    ),
    key(
        "permissions.*",
        "none",
        "allow, ask or deny for the tools a name pattern (with *) matches",
    ),
];

/// Every key, in the order of the book's reference.
const KEYS: &[&[Key]] = &[
    &TOP,
    &LIMITS,
    &MOUNTS,
    &NETWORK,
    &SECRETS,
    &COMPONENT_LIMITS,
    &COMPONENT_MOUNTS,
    &COMPONENT_NETWORK,
    &COMPONENT_REST,
    &DISTRIBUTION,
    &CODE_MODE,
    &STATE,
    &MCP_SERVERS,
    &MCP_SERVERS_SANDBOX,
    &MCP_SERVER_MOUNTS,
    &PERMISSIONS,
];

/// Every key `toolcage.toml` takes, in the order of the book's reference.
pub(super) fn keys() -> impl Iterator<Item = &'static Key> {
    KEYS.iter().flat_map(|group| group.iter())
}

/// Keys the parser knows only to refuse with a pointer to the right place
/// (`Config::parse` says where they go).
const REDIRECTED: &[&str] = &["network.inject", "components.*.network.ca_file"];

/// Whether a table's segment (`mounts[]`, `*`, `limits`) matches a
/// concrete one (`mounts[]`, `fs`, `limits`): `*` is any name, never an
/// array's tables.
fn segment_matches(pattern: &str, concrete: &str) -> bool {
    pattern == concrete || (pattern == "*" && !concrete.ends_with("[]"))
}

/// Whether `path` is a key the parser refuses with a pointer, whatever it
/// holds.
fn redirected(path: &[String]) -> bool {
    REDIRECTED.iter().any(|redirected| {
        let segments: Vec<&str> = redirected.split('.').collect();
        segments.len() == path.len()
            && segments
                .iter()
                .zip(path)
                .all(|(p, c)| segment_matches(p, c))
    })
}

/// The segments the table takes under `parent` (a concrete path).
fn children(parent: &[String]) -> Vec<&'static str> {
    let mut names = Vec::new();
    let paths = keys().map(|k| k.path).chain(REDIRECTED.iter().copied());
    for path in paths {
        let segments: Vec<&str> = path.split('.').collect();
        let under = segments.len() > parent.len()
            && segments
                .iter()
                .zip(parent)
                .all(|(p, c)| segment_matches(p, c));
        if under && !names.contains(&segments[parent.len()]) {
            names.push(segments[parent.len()]);
        }
    }
    names
}

/// Checks every key of `text` against the table: the first unknown one is
/// an error naming it and what is taken there, pointing at it in the text.
pub(super) fn check(text: &str) -> Result<(), ConfigError> {
    match DeTable::parse(text) {
        Ok(document) => check_table(document.get_ref(), &mut Vec::new(), text),
        Err(error) => Err(ConfigError::Toml(error)),
    }
}

fn check_table(table: &DeTable, path: &mut Vec<String>, text: &str) -> Result<(), ConfigError> {
    let taken = children(path);
    for (key, value) in table {
        let name: &str = key.get_ref();
        let known = taken
            .iter()
            .any(|t| *t == "*" || t.trim_end_matches("[]") == name);
        if !known {
            let mut expected: Vec<&str> = Vec::new();
            for t in taken.iter().map(|t| t.trim_end_matches("[]")) {
                if t != "*" && !expected.contains(&t) {
                    expected.push(t);
                }
            }
            return Err(ConfigError::unknown_key(text, key.span(), name, &expected));
        }
        path.push(name.to_string());
        if !redirected(path) {
            check_value(value, path, text)?;
        }
        path.pop();
    }
    Ok(())
}

fn check_value(
    value: &Spanned<DeValue>,
    path: &mut Vec<String>,
    text: &str,
) -> Result<(), ConfigError> {
    match value.get_ref() {
        DeValue::Table(table) => check_table(table, path, text),
        DeValue::Array(items) => {
            if let Some(last) = path.last_mut() {
                last.push_str("[]");
            }
            for item in items {
                if let DeValue::Table(table) = item.get_ref() {
                    check_table(table, path, text)?;
                }
            }
            if let Some(last) = path.last_mut() {
                last.truncate(last.len() - 2);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document setting only `key` (to 1: types are serde's business).
    fn document(key: &Key) -> String {
        let segments: Vec<String> = key
            .path
            .split('.')
            .map(|s| s.replace('*', "name"))
            .collect();
        let (leaf, tables) = segments.split_last().unwrap();
        match tables.last() {
            None => format!("{leaf} = 1"),
            Some(last) if last.ends_with("[]") => {
                format!("[[{}]]\n{leaf} = 1", tables.join(".").replace("[]", ""))
            }
            Some(_) => format!("[{}]\n{leaf} = 1", tables.join(".")),
        }
    }

    #[test]
    fn every_key_in_the_table_passes_the_check() {
        for key in keys() {
            let text = document(key);
            assert_eq!(check(&text), Ok(()), "{text}");
        }
    }

    #[test]
    fn an_unknown_key_is_pointed_at_as_the_toml_crate_does() {
        let error = check("[limits]\ntimeout = 5\n").unwrap_err().to_string();
        assert!(
            error.starts_with(
                "TOML parse error at line 2, column 1\n  |\n2 | timeout = 5\n  | ^^^^^^^\nunknown field `timeout`, expected one of `fuel`, `timeout_ms`,"
            ),
            "{error}"
        );
        let error = check("[[mounts]]\nhost = \".\"\nmod = 1")
            .unwrap_err()
            .to_string();
        assert!(
            error.ends_with("unknown field `mod`, expected one of `host`, `guest`, `mode`"),
            "{error}"
        );
    }
}
