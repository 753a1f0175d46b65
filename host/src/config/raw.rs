//! The file's shape, as serde reads it: every table and value as written,
//! before any check. Unknown keys are refused by `keys::check`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Deserialize)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) tools: Vec<String>,
    #[serde(default)]
    pub(super) oci: RawOci,
    #[serde(default)]
    pub(super) trust: RawTrust,
    pub(super) bundled: Option<bool>,
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) mounts: Vec<RawMount>,
    #[serde(default)]
    pub(super) network: RawNetwork,
    #[serde(default)]
    pub(super) secrets: BTreeMap<String, RawSecret>,
    #[serde(default)]
    pub(super) components: BTreeMap<String, RawComponent>,
    #[serde(default)]
    pub(super) code_mode: RawCodeMode,
    #[serde(default)]
    pub(super) state: RawState,
    #[serde(default)]
    pub(super) mcp_servers: BTreeMap<String, RawUpstreamServer>,
    #[serde(default)]
    pub(super) permissions: BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(super) struct RawUpstreamServer {
    pub(super) command: Option<String>,
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) prefix: Option<String>,
    pub(super) tools: Option<Vec<String>>,
    #[serde(default)]
    pub(super) exclude_tools: Vec<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) output_kib: Option<u64>,
    pub(super) startup_timeout_ms: Option<u64>,
    pub(super) sandbox: Option<String>,
    pub(super) network: Option<bool>,
    #[serde(default)]
    pub(super) mounts: Vec<RawMount>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawCodeMode {
    pub(super) enabled: Option<bool>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) print_kib: Option<u64>,
    pub(super) session_kib: Option<u64>,
    pub(super) sessions_per_caller: Option<u64>,
    pub(super) session_idle_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawState {
    pub(super) key_file: Option<PathBuf>,
    pub(super) expiry_ms: Option<u64>,
    pub(super) inline_kib: Option<u64>,
    pub(super) store_mib: Option<u64>,
    pub(super) backend: Option<String>,
    pub(super) url: Option<String>,
    pub(super) prefix: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) password_secret: Option<String>,
    pub(super) required: Option<bool>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawOci {
    #[serde(default)]
    pub(super) insecure_registries: Vec<String>,
    pub(super) store: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawTrust {
    pub(super) require_digest: Option<bool>,
    #[serde(default)]
    pub(super) keys: Vec<RawTrustKey>,
}

#[derive(Deserialize)]
pub(super) struct RawTrustKey {
    pub(super) prefix: String,
    pub(super) key: PathBuf,
    pub(super) require_signature: Option<bool>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawNetwork {
    #[serde(default)]
    pub(super) allow: Vec<RawGrant>,
    #[serde(default)]
    pub(super) allow_private: Vec<String>,
    pub(super) ca_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) inject: Vec<RawInject>,
}

#[derive(Deserialize)]
pub(super) struct RawInject {
    pub(super) url: String,
    pub(super) header: String,
    pub(super) value: String,
    pub(super) methods: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub(super) struct RawSecret {
    pub(super) env: Option<String>,
    pub(super) file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawGrant {
    Pattern(String),
    Table(RawGrantTable),
}

#[derive(Deserialize)]
pub(super) struct RawGrantTable {
    pub(super) url: String,
    pub(super) methods: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawLimits {
    pub(super) fuel: Option<Fuel>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) memory_mib: Option<u64>,
    pub(super) output_kib: Option<u64>,
    pub(super) log_kib: Option<u64>,
    pub(super) stack_kib: Option<u64>,
    pub(super) net_requests: Option<u32>,
    pub(super) net_out_kib: Option<u64>,
    pub(super) net_in_kib: Option<u64>,
    pub(super) net_connections: Option<u32>,
    pub(super) net_first_byte_ms: Option<u64>,
    pub(super) net_between_bytes_ms: Option<u64>,
    pub(super) nested_calls: Option<u32>,
    pub(super) nested_depth: Option<u32>,
    pub(super) nested_kib: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Fuel {
    Units(u64),
    Word(String),
}

#[derive(Deserialize)]
pub(super) struct RawMount {
    pub(super) host: PathBuf,
    pub(super) guest: String,
    #[serde(default)]
    pub(super) mode: MountMode,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum MountMode {
    #[default]
    Ro,
    Rw,
}

#[derive(Deserialize, Default)]
pub(super) struct RawComponent {
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) mounts: Vec<RawMount>,
    #[serde(default)]
    pub(super) network: RawNetwork,
    #[serde(default)]
    pub(super) config: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) calls: Vec<String>,
}
