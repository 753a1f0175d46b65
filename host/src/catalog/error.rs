//! Errors at the library boundary.
//!
//! Two kinds of failure exist and they never mix. [`Error`] is for the
//! operator: a bad configuration, a mount that does not exist. It is returned
//! as `Err` and stops whatever asked for it. [`ErrorKind`] is for the model:
//! anything a tool or a model can cause (bad arguments, a trap, a breached
//! limit) becomes a [`CallResult`](crate::CallResult) with that kind, and the
//! host goes on.

use std::path::PathBuf;
use std::sync::Arc;

use crate::sandbox::compile::ComponentError;
use crate::sandbox::content::{ContentError, MAX_COMPONENT_BYTES};
use crate::sandbox::outcome::ErrorKind;
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
    #[error("invalid config file {path}: {error}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key: a
        /// [`ConfigError`](crate::ConfigError), to downcast (boxed, since
        /// the registry's errors are below the config's in the layering).
        /// The message says it already, so it is not this error's `source`.
        error: Box<dyn std::error::Error + Send + Sync>,
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
    Mount(#[from] crate::sandbox::mount::MountError),
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
    Runtime(#[from] crate::sandbox::engine::RuntimeError),
    /// TLS for tools' requests cannot be set up, such as with a CA file the
    /// operator named.
    #[error(transparent)]
    Tls(#[from] crate::sandbox::net::TlsError),
    /// A network grant pattern is not valid.
    #[error(transparent)]
    Grant(#[from] crate::sandbox::net::GrantError),
    /// A secret could not be read, or was refused. The message names the
    /// secret and where it was looked for, never its value.
    #[error(transparent)]
    Secret(#[from] crate::sandbox::secrets::SecretError),
    /// A secret injection is not valid for its component: it uses a secret
    /// that is not set, or no grant of the component lets its requests out.
    #[error("component `{component}`: {source}")]
    Injection {
        /// The component.
        component: String,
        /// What is wrong.
        #[source]
        source: crate::sandbox::secrets::InjectionError,
    },
    /// Something of distribution: a reference, a key, the lock, the store,
    /// a registry.
    #[error(transparent)]
    Oci(#[from] crate::catalog::oci::OciError),
}

/// What caused a load to fail, kept typed for programs that look into it
/// ([`std::error::Error::source`] gives the error itself, to downcast),
/// and shared, so that a report stays cheap to clone. Its text is what a
/// load report says of it.
#[derive(Debug, Clone)]
pub struct Cause {
    text: String,
    error: Arc<dyn std::error::Error + Send + Sync + 'static>,
}

type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl Cause {
    /// `error`, said with all its causes.
    fn new(error: impl Into<BoxedError>) -> Self {
        let error: Arc<dyn std::error::Error + Send + Sync> = Arc::from(error.into());
        Cause {
            text: with_causes(&*error),
            error,
        }
    }

    /// `error`, said as its own message says it (which names its causes).
    fn said(error: impl Into<BoxedError>) -> Self {
        let error: Arc<dyn std::error::Error + Send + Sync> = Arc::from(error.into());
        Cause {
            text: error.to_string(),
            error,
        }
    }

    /// A cause that is only a message (no error of its own beneath it).
    fn message(message: String) -> Self {
        Cause::said(message)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

/// Two causes are the same when they say the same.
impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.text == other.text
    }
}

impl Eq for Cause {}

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
    Compile(#[source] Cause),
    /// The component imports something the host does not provide.
    #[error("imports something toolcage does not provide: {0}")]
    Import(#[source] Cause),
    /// The component does not export `toolcage:tool/tool`.
    #[error("does not export the `toolcage:tool/tool` interface of the `toolset` world: {0}")]
    Export(#[source] Cause),
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
    #[error("describe() returned {0} tools; a component may declare at most {max}", max = crate::catalog::registry::MAX_TOOLS_PER_COMPONENT)]
    TooManyTools(usize),
    /// A mount granted to the component could not be reopened through the
    /// handle held for it (the host's fault, not the component's).
    #[error("cannot lend its mounts: {0}")]
    Mount(#[source] Cause),
    /// An `oci://` reference could not be loaded from the lock and the
    /// store, or failed the trust policy.
    #[error("{0}")]
    Distribution(crate::catalog::oci::OciError),
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
    Upstream(#[source] Cause),
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

impl LoadError {
    /// A mount that could not be lent, for `error`.
    pub(crate) fn mount(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        LoadError::Mount(Cause::new(error))
    }

    /// An upstream server that could not be started or listed, for `error`.
    #[cfg(feature = "mcp-client")]
    pub(crate) fn upstream(error: impl Into<BoxedError>) -> Self {
        LoadError::Upstream(Cause::said(error))
    }
}

impl From<ComponentError> for LoadError {
    fn from(error: ComponentError) -> LoadError {
        match error {
            ComponentError::Content(error) => error.into(),
            ComponentError::NotWasm => LoadError::NotWasm,
            ComponentError::CoreModule => LoadError::CoreModule,
            ComponentError::UnknownImport(name) => LoadError::Import(Cause::message(format!(
                "`{name}` (toolcage provides the WASI 0.2 cli, clocks, filesystem, io, random and sockets interfaces, outgoing wasi:http, and toolcage:tool/host)"
            ))),
            ComponentError::Engine(error) => LoadError::Compile(Cause::new(error)),
            ComponentError::Compile(error) => LoadError::Compile(Cause::new(error)),
            error @ ComponentError::CompilerThread(_) => LoadError::Compile(Cause::new(error)),
            ComponentError::Link(error) => LoadError::Import(Cause::new(error)),
            ComponentError::Export(error) => LoadError::Export(Cause::new(error)),
        }
    }
}
