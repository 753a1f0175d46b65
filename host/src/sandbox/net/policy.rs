//! What a component may reach on the network, and what every component's
//! requests share: the resolver and TLS, with the operator's CA files.
//!
//! Threat model: grants and CA files come from the operator only. A CA file
//! that cannot be used fails the registry's build, naming it, rather than
//! leaving tools' requests to trust less (or more) than the operator meant.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::grant::{Cidr, Grant};
use super::resolve::Resolve;
use crate::sandbox::secrets::{Injection, Secrets};

/// What a component may reach: its grants, and the ranges its granted names
/// may resolve into; the secrets its requests carry; with what every
/// component shares.
pub(crate) struct NetPolicy {
    pub grants: Vec<Grant>,
    pub allow_private: Vec<Cidr>,
    pub injections: Vec<Injection>,
    pub secrets: Secrets,
    pub shared: Arc<NetShared>,
}

impl std::fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPolicy")
            .field("grants", &self.grants)
            .field("allow_private", &self.allow_private)
            .field("injections", &self.injections)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// What every component's requests share: the resolver, the TLS settings,
/// and the count of connections open across the runtime.
pub(crate) struct NetShared {
    pub resolver: Arc<dyn Resolve>,
    pub tls: Arc<rustls::ClientConfig>,
    pub open_connections: Arc<AtomicUsize>,
}

impl std::fmt::Debug for NetShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetShared").finish_non_exhaustive()
    }
}

impl NetShared {
    /// The resolver, and TLS trusting the web PKI roots plus the
    /// certificates in `ca_files` (PEM).
    pub(crate) fn new(
        resolver: Arc<dyn Resolve>,
        ca_files: &[PathBuf],
        open_connections: Arc<AtomicUsize>,
    ) -> Result<NetShared, TlsError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for path in ca_files {
            for certificate in read_certificates(path)? {
                roots
                    .add(certificate)
                    .map_err(|e| TlsError::CertificateRefused {
                        path: path.clone(),
                        source: e.into(),
                    })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Protocols(e.into()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(NetShared {
            resolver,
            tls: Arc::new(tls),
            open_connections,
        })
    }
}

/// Why TLS for tools' requests cannot be set up: a CA file the operator
/// named cannot be used, or rustls refused the configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The CA file cannot be read.
    #[error("cannot use the CA file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The CA file is not PEM certificates.
    #[error("cannot use the CA file {path}: not PEM certificates")]
    NotPem {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The CA file holds no certificate.
    #[error("cannot use the CA file {path}: it holds no PEM certificate")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A certificate in the CA file was refused as a root.
    #[error("cannot use the CA file {path}: a certificate in it was refused")]
    CertificateRefused {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// rustls refused the protocol versions.
    #[error("invalid TLS for tools' requests")]
    Protocols(#[source] Box<dyn std::error::Error + Send + Sync>),
}

fn read_certificates(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let path_buf = || path.to_path_buf();
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path_buf(),
        source,
    })?;
    let certificates = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::NotPem {
            path: path_buf(),
            source: e.into(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Empty { path: path_buf() });
    }
    Ok(certificates)
}

/// The shared network state a registry builds from the operator's settings.
#[derive(Default, Clone)]
pub(crate) struct NetSettings {
    pub resolver: Option<Arc<dyn Resolve>>,
    pub ca_files: Vec<PathBuf>,
}

impl std::fmt::Debug for NetSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetSettings")
            .field("resolver", &self.resolver.as_ref().map(|_| "custom"))
            .field("ca_files", &self.ca_files)
            .finish()
    }
}
