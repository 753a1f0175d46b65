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
/// pool).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: &str) -> Lookup {
        let name = name.to_string();
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((name.as_str(), 0)).await?;
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
