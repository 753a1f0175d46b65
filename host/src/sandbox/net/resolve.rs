//! Name lookup for the host's network layer, behind a seam an embedder (or
//! a test) can replace.
//!
//! Threat model: the answer to a lookup is the attacker's to choose when
//! the tool's author controls the name's DNS. It is asked for once per
//! request, every address in it is checked, and the connection goes to a
//! checked address: nothing looks the name up again (DNS rebinding).

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

/// What a lookup returns: the name's addresses, in the order to try them.
pub type Lookup = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Turns a host name into addresses, for every request a tool makes.
///
/// The default, [`SystemResolver`], asks the operating system
/// (`getaddrinfo`, so `/etc/hosts` and the system's DNS). Embedders with
/// their own DNS, and tests that need a name to point at a chosen address,
/// give their own: any `Fn(&str) -> io::Result<Vec<IpAddr>>` is one.
///
/// ```
/// use std::net::IpAddr;
/// use toolcage::Resolve;
///
/// let fixed = |name: &str| -> std::io::Result<Vec<IpAddr>> {
///     match name {
///         "api.test" => Ok(vec!["127.0.0.1".parse().unwrap()]),
///         _ => Err(std::io::ErrorKind::NotFound.into()),
///     }
/// };
/// let _: &dyn Resolve = &fixed;
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `name` (lowercase, punycode, no trailing dot). An
    /// error of kind [`NotFound`](io::ErrorKind::NotFound) means the name
    /// does not exist.
    fn resolve(&self, name: &str) -> Lookup;
}

impl<F> Resolve for F
where
    F: Fn(&str) -> io::Result<Vec<IpAddr>> + Send + Sync + 'static,
{
    fn resolve(&self, name: &str) -> Lookup {
        let answer = self(name);
        Box::pin(async move { answer })
    }
}

/// The operating system's resolver (`getaddrinfo`, on tokio's blocking
/// pool). Names are looked up as absolute (`name.`), so the system's search
/// domains never turn a granted name into another. At most
/// [`SystemResolver::MAX_LOOKUPS`] run at once across the process: a name
/// server that never answers holds that many threads, not the whole
/// blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl SystemResolver {
    /// The most system lookups at once.
    pub const MAX_LOOKUPS: usize = 16;
}

static LOOKUPS: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(SystemResolver::MAX_LOOKUPS)));

impl Resolve for SystemResolver {
    fn resolve(&self, name: &str) -> Lookup {
        let absolute = if name.ends_with('.') {
            name.to_string()
        } else {
            format!("{name}.")
        };
        let name = name.to_string();
        Box::pin(async move {
            let permit = LOOKUPS
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| io::Error::other("the resolver is closed"))?;
            // The permit goes with the thread: it is released when the
            // lookup returns, not when its caller gives up.
            let addresses = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                std::net::ToSocketAddrs::to_socket_addrs(&(absolute.as_str(), 0))
            })
            .await
            .map_err(io::Error::other)??;
            let mut ips: Vec<IpAddr> = Vec::new();
            for address in addresses {
                if !ips.contains(&address.ip()) {
                    ips.push(address.ip());
                }
            }
            if ips.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{name} has no addresses"),
                ));
            }
            Ok(ips)
        })
    }
}
