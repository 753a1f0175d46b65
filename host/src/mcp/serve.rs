//! What serving takes and gives back, in toolcage's own types: a
//! [`Shutdown`] signal, a bound [`Listener`], and a [`ServeError`]. The
//! crates underneath (tokio's listener, tokio-util's cancellation, rmcp's
//! errors) stay inside, so bumping them breaks no embedder; the places that
//! must speak them are in [`crate::integration`].
//!
//! Threat model: none of its own; these only carry the server's.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

use super::http::HttpOptionsError;

/// Tells a server to stop: it stops taking work, lets the calls in flight
/// finish and their results go out, then returns. Clones share the signal.
/// A new one is not triggered.
#[derive(Debug, Clone, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives the signal, to every clone. Giving it again does nothing.
    pub fn trigger(&self) {
        self.0.cancel();
    }

    /// Whether the signal was given.
    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Waits for the signal.
    pub async fn triggered(&self) {
        self.0.cancelled().await;
    }

    /// The token the transports stop on.
    pub(crate) fn token(&self) -> CancellationToken {
        self.0.clone()
    }
}

/// A TCP socket bound and listening, for
/// [`McpServer::serve_http`](super::McpServer::serve_http) or
/// [`serve_metrics`](super::http::serve_metrics). Binding first lets the
/// caller learn the address (port 0 picks a free one) before serving.
#[derive(Debug)]
pub struct Listener(tokio::net::TcpListener);

impl Listener {
    /// Binds `addr` (port 0: any free port). Must be called within a tokio
    /// runtime.
    pub async fn bind(addr: SocketAddr) -> Result<Listener, ServeError> {
        Ok(Listener(tokio::net::TcpListener::bind(addr).await?))
    }

    /// Takes over a socket the caller bound (or inherited, as with systemd
    /// socket activation), setting it non-blocking. Must be called within a
    /// tokio runtime.
    pub fn from_std(listener: std::net::TcpListener) -> Result<Listener, ServeError> {
        listener.set_nonblocking(true)?;
        Ok(Listener(tokio::net::TcpListener::from_std(listener)?))
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        Ok(self.0.local_addr()?)
    }

    pub(crate) fn into_tokio(self) -> tokio::net::TcpListener {
        self.0
    }
}

/// Why a server could not start, or stopped other than by its
/// [`Shutdown`] or its client leaving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The [`HttpOptions`](super::http::HttpOptions) cannot be served.
    #[error(transparent)]
    Options(#[from] HttpOptionsError),
    /// Binding, accepting, or starting the server's threads failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The MCP session on stdio failed: the client's initialization, or
    /// the loop serving it ended abnormally.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// How an MCP session failed (see [`ServeError::Session`]); its
/// [`source`](std::error::Error::source) is the protocol library's own
/// error.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SessionError(SessionFailure);

#[derive(Debug, thiserror::Error)]
enum SessionFailure {
    #[error(transparent)]
    Initialize(Box<rmcp::service::ServerInitializeError>),
    #[error(transparent)]
    Loop(tokio::task::JoinError),
    #[error("the stdio server ended abnormally: {0}")]
    Thread(#[source] tokio::task::JoinError),
}

impl SessionError {
    /// The client's initialization failed (or it left before it).
    pub(crate) fn initialize(error: rmcp::service::ServerInitializeError) -> Self {
        SessionError(SessionFailure::Initialize(Box::new(error)))
    }

    /// rmcp's service loop panicked or was aborted.
    pub(crate) fn service_loop(error: tokio::task::JoinError) -> Self {
        SessionError(SessionFailure::Loop(error))
    }

    /// The thread serving stdio panicked or was aborted.
    pub(crate) fn thread(error: tokio::task::JoinError) -> Self {
        SessionError(SessionFailure::Thread(error))
    }
}
