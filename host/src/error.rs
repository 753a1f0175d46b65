//! Errors at the library boundary.
//!
//! Two kinds of failure exist and they never mix. [`Error`] is for the
//! operator: a bad configuration, a mount that does not exist. It is returned
//! as `Err` and stops whatever asked for it. [`ErrorKind`] is for the model:
//! anything a tool or a model can cause (bad arguments, a trap, a breached
//! limit) becomes a [`CallResult`](crate::CallResult) with that kind, and the
//! host goes on.

use std::path::PathBuf;

use crate::ErrorKind;

/// An operator-side error: configuration, mounts, files the operator named.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid: a syntax error, an unknown key or
    /// a bad value. The message names the key.
    #[error("invalid config file {path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A value given on the command line or through the API is not valid.
    #[error("invalid {what}: {message}")]
    InvalidSetting {
        /// What setting.
        what: &'static str,
        /// Why it is invalid.
        message: String,
    },
    /// A mount's host directory cannot be used.
    #[error("cannot mount {host} at {guest}: {reason}")]
    Mount {
        /// The host directory.
        host: PathBuf,
        /// The guest path.
        guest: String,
        /// Why.
        reason: String,
    },
    /// A tools directory cannot be read.
    #[error("cannot read tools directory {path}")]
    ToolsDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The WebAssembly engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
    /// A file of extra TLS roots for tools' requests cannot be used.
    #[error("cannot use the CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A network grant pattern is not valid.
    #[error(transparent)]
    Grant(#[from] crate::GrantError),
    /// A secret could not be read, or was refused. The message names the
    /// secret and where it was looked for, never its value.
    #[error(transparent)]
    Secret(#[from] crate::SecretError),
    /// A secret injection is not valid for its component: it uses a secret
    /// that is not set, or no grant of the component lets its requests out.
    #[error("component `{component}`: {source}")]
    Injection {
        /// The component.
        component: String,
        /// What is wrong.
        #[source]
        source: crate::InjectionError,
    },
    /// Something of distribution: a reference, a key, the lock, the store,
    /// a registry.
    #[error(transparent)]
    Oci(#[from] crate::oci::OciError),
    /// The disk cache of compiled components cannot be used.
    #[error("cannot use the compile cache {path}: {reason}")]
    DiskCache {
        /// The cache directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Why a component file was skipped at load. Every variant but
/// [`Mount`](LoadError::Mount) is the component's fault: the load goes on
/// with the next file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Io(String),
    /// The file changed between being hashed and being read to compile it,
    /// twice in a row.
    #[error("the file kept changing while it was being loaded; load it again once it is written")]
    Changed,
    /// The bytes are not WebAssembly.
    #[error("not a WebAssembly file (no `\\0asm` header)")]
    NotWasm,
    /// A core WebAssembly module, not a component.
    #[error(
        "a core WebAssembly module, not a component: build it for wasm32-wasip2, or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    /// The component failed to compile.
    #[error("invalid component: {0}")]
    Compile(String),
    /// The component imports something the host does not provide.
    #[error("imports something toolcage does not provide: {0}")]
    Import(String),
    /// The component does not export `toolcage:tool/tool`.
    #[error("does not export the `toolcage:tool/tool` interface of the `toolset` world: {0}")]
    Export(String),
    /// `describe()` trapped or breached a limit.
    #[error("describe() failed ({kind}): {message}")]
    Describe {
        /// Which limit, or `trap`.
        kind: ErrorKind,
        /// What happened.
        message: String,
    },
    /// `describe()` returned no tools.
    #[error("describe() returned no tools")]
    NoTools,
    /// `describe()` returned more than
    /// [`MAX_TOOLS_PER_COMPONENT`](crate::MAX_TOOLS_PER_COMPONENT) tools.
    #[error("describe() returned {0} tools; a component may declare at most {max}", max = crate::MAX_TOOLS_PER_COMPONENT)]
    TooManyTools(usize),
    /// A mount granted to the component could not be reopened through the
    /// handle held for it (the host's fault, not the component's).
    #[error("cannot lend its mounts: {0}")]
    Mount(String),
    /// An `oci://` reference could not be loaded from the lock and the
    /// store, or failed the trust policy.
    #[error("{0}")]
    Distribution(crate::oci::OciError),
    /// A descriptor failed its checks.
    #[error("tool {tool:?}: {reason}")]
    InvalidDescriptor {
        /// The tool's name as declared.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}
