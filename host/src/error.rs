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
use crate::sandbox::compile::ComponentError;
use crate::sandbox::content::{ContentError, MAX_COMPONENT_BYTES};
use crate::sandbox::text::with_causes;

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
    /// A mount cannot be granted: its host directory cannot be used, or
    /// lending it would be unsafe.
    #[error(transparent)]
    Mount(#[from] crate::MountError),
    /// A tools directory cannot be read.
    #[error("cannot read tools directory {path}")]
    ToolsDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime could not be built: its engine, or its disk cache of
    /// compiled components.
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    /// TLS for tools' requests cannot be set up, such as with a CA file the
    /// operator named.
    #[error(transparent)]
    Tls(#[from] crate::TlsError),
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
    /// An upstream MCP server could not be started, or did not initialize
    /// and list its tools in time.
    #[error("{0}")]
    Upstream(String),
}

/// The sandbox's reasons as a load report says them.
impl From<ContentError> for LoadError {
    fn from(error: ContentError) -> LoadError {
        match error {
            ContentError::Changed => LoadError::Changed,
            ContentError::Read(e) => LoadError::Io(e.to_string()),
            ContentError::NotAFile => LoadError::Io("not a regular file".into()),
            ContentError::TooLarge => {
                LoadError::Io(format!("larger than {MAX_COMPONENT_BYTES} bytes"))
            }
            error @ ContentError::Thread { .. } => LoadError::Io(with_causes(&error)),
        }
    }
}

impl From<ComponentError> for LoadError {
    fn from(error: ComponentError) -> LoadError {
        match error {
            ComponentError::Content(error) => error.into(),
            ComponentError::NotWasm => LoadError::NotWasm,
            ComponentError::CoreModule => LoadError::CoreModule,
            ComponentError::UnknownImport(name) => LoadError::Import(format!(
                "`{name}` (toolcage provides the WASI 0.2 cli, clocks, filesystem, io, random and sockets interfaces, outgoing wasi:http, and toolcage:tool/host)"
            )),
            ComponentError::Engine(error) => LoadError::Compile(with_causes(&*error)),
            ComponentError::Compile(error) => LoadError::Compile(format!("{error:#}")),
            error @ ComponentError::CompilerThread(_) => LoadError::Compile(with_causes(&error)),
            ComponentError::Link(error) => LoadError::Import(format!("{error:#}")),
            ComponentError::Export(error) => LoadError::Export(format!("{error:#}")),
        }
    }
}
