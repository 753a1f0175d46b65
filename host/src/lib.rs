//! toolcage: run an AI agent's tools as untrusted WebAssembly components.
//!
//! Each tool is a component exporting the `toolcage:tool/tool` interface of
//! `wit/toolcage.wit`. A [`Registry`] loads components from bytes, files or
//! directories (first name wins), validates every call's arguments against
//! the tool's JSON Schema, and runs each call in a fresh sandbox bounded by
//! [`Limits`], seeing only the [`Mount`]s the operator granted.
//!
//! ```no_run
//! use toolcage::{Mount, Registry};
//!
//! # async fn demo() -> Result<(), toolcage::Error> {
//! let mut registry = Registry::builder()
//!     .mount(Mount::read_only("./src", "/workspace"))
//!     .build()?;
//! for report in registry.load_dir("tools").await? {
//!     if let Some(error) = &report.error {
//!         eprintln!("skipped {}: {error}", report.source);
//!     }
//! }
//! let result = registry.call("grep", r#"{"pattern": "TODO", "path": "/workspace"}"#).await;
//! println!("{}", result.output); // for the model
//! # Ok(())
//! # }
//! ```
//!
//! # Security model
//!
//! A tool component is untrusted code. It can compute, read the clocks and
//! randomness, log, report progress, and use the filesystem only under the
//! mounts granted to its component, read-only unless granted read-write. It
//! cannot see the host's environment, arguments or other directories, and
//! reaches the network only where the operator granted it ([`Grant`]):
//! loopback, private and other special addresses stay refused unless named,
//! and every request is sent by the host, within per-call budgets. The
//! credentials its requests need are added by the host ([`Injection`]) and
//! redacted from whatever comes back, so it never holds one ([`Secret`]). It is
//! stopped when it exhausts its fuel, its wall-clock time, its
//! memory or its output budget, and only its own call fails. Its name cannot
//! replace a tool registered before it. A component pulled from a registry
//! ([`oci`]) runs only by the digest the lock recorded, after its bytes,
//! its layout and its signature (where a trust key covers it) were checked
//! at the pull and again at every load. Everything a tool or a model can
//! cause comes back as a [`CallResult`] with an [`ErrorKind`], never as a
//! panic or an `Err`.
//!
//! # Other crates' types
//!
//! The API speaks toolcage's own types. Where an embedder must integrate
//! with axum, rmcp or the OpenTelemetry SDK (mounting the MCP server in an
//! axum application, serving it on a transport of one's own, passing one's
//! own tracer provider), the signatures that name those crates are in
//! [`integration`], each following its crate's version.

pub mod agent;
mod call;
mod catalog;
pub mod code_mode;
mod config;
#[cfg(any(feature = "mcp", feature = "otel"))]
pub mod integration;
#[cfg(feature = "mcp")]
pub mod mcp;
mod sandbox;
pub mod state;
#[cfg(feature = "otel")]
pub mod telemetry;
pub mod upstream;

pub use call::{
    Arguments, CallOptions, CallPolicy, CallReport, CallResult, MAX_ARGUMENT_BYTES,
    MAX_LISTED_NESTED, Metrics, NestedCall, NestedEvent, NestedUsage,
};
pub use catalog::component::{Descriptor, Hints, Source};
pub use catalog::elicit::{Elicitation, ElicitationRequest};
pub use catalog::error::{Cause, Error, LoadError};
pub use catalog::live::{ChangeKind, LiveRegistry, ReloadReport, ToolChange};
pub use catalog::oci;
pub use catalog::registry::{
    FileReport, MAX_TOOLS_PER_COMPONENT, Registry, RegistryBuilder, Shadowed, ToolsSource,
};
pub use catalog::table::ToolInfo;
pub use catalog::watch::{WatchOptions, Watcher};
pub use config::{
    CONFIG_FILE_NAME, ComponentConfig, Config, ConfigError, ConfigKey, NetworkConfig, OciConfig,
    RedisConfig, SecretSource, StateBackend, StateConfig, StateError, TrustConfig, TrustKeyConfig,
};
pub use sandbox::cache::{DEFAULT_DISK_CACHE_BYTES, OwnedDirError};
pub use sandbox::content::MAX_COMPONENT_BYTES;
pub use sandbox::engine::{
    DEFAULT_MAX_CONCURRENT_CALLS, KEEP_RESIDENT_BYTES, Runtime, RuntimeBuilder, RuntimeError,
};
pub use sandbox::limits::{LimitOverrides, Limits};
pub use sandbox::mount::{Mount, MountError};
pub use sandbox::net::{
    Cidr, Grant, GrantError, Lookup, NetLimit, NetUsage, Resolve, SystemResolver, TlsError,
};
pub use sandbox::outcome::{CancelToken, ErrorKind, GuestEvent, LogLevel, Logs};
pub use sandbox::secrets::{
    Injection, InjectionError, MIN_SECRET_BYTES, Secret, SecretError, Secrets,
    UNREDACTED_LOG_TARGETS, may_carry_unredacted_bytes,
};
