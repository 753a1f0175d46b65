//! An upstream server over Streamable HTTP, reached only through the egress
//! policy: its URL must be granted (`[network] allow`), a name must not
//! resolve into a private or special range unless `allow_private` lets it
//! (an address literal must be allowed, or named exactly by the grant), each
//! redirect is checked again, no proxy is used, and TLS trusts the web PKI
//! roots and the operator's CA files, as a component's requests do. Its
//! headers carry the operator's secrets only as `{{ secrets.NAME }}`
//! injections, and only over https (or plain http to a loopback literal).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolving};
use reqwest::redirect;

use crate::sandbox::net::NetPolicy;
use crate::sandbox::net::address;
use crate::sandbox::net::grant::{Destination, Host, Scheme};

/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 5;

/// An HTTP client for `url` under `policy`, or why `url` may not be
/// reached.
pub(super) fn client(url: &str, policy: &Arc<NetPolicy>) -> Result<reqwest::Client, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let exact = check(&parsed, policy)?;
    let redirects = {
        let policy = policy.clone();
        redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match check(attempt.url(), &policy) {
                Ok(_) => attempt.follow(),
                Err(why) => attempt.error(why),
            }
        })
    };
    let resolver = Resolver {
        policy: policy.clone(),
        localhost: exact && parsed.host_str() == Some("localhost"),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls((*policy.shared.tls).clone())
        .no_proxy()
        .redirect(redirects)
        .dns_resolver(Arc::new(resolver))
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// Whether `policy` lets a request go to `url`: `Ok(true)` when a grant
/// names its address (or `localhost`) exactly.
fn check(url: &reqwest::Url, policy: &NetPolicy) -> Result<bool, String> {
    let scheme = match url.scheme() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(format!("`{other}` is not http or https")),
    };
    let host = url.host_str().unwrap_or_default();
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let destination = Destination::http(scheme, &authority, url.path())?;
    let granted: Vec<_> = policy
        .grants
        .iter()
        .filter(|grant| grant.allows(&destination, None))
        .collect();
    if granted.is_empty() {
        return Err(format!(
            "{url} is not granted: add it to [network] allow (or --allow-net)"
        ));
    }
    let exact = granted.iter().any(|g| g.names_exactly(&destination.host));
    match &destination.host {
        Host::Ip(ip) if !exact && !address::allowed(*ip, &policy.allow_private) => {
            let why = address::special(*ip).unwrap_or("special");
            Err(format!(
                "{ip} is {why}; grant it by its address exactly, or allow the range with allow_private"
            ))
        }
        Host::Name(name) if !exact && (name == "localhost" || name.ends_with(".localhost")) => Err(
            format!("{name} is loopback; only a grant naming localhost itself reaches it"),
        ),
        _ => Ok(exact),
    }
}

/// Looks names up with the operator's resolver and refuses an answer with
/// any address in a private or special range that `allow_private` does not
/// let names resolve into (a rebinding attack looks like a mixed answer).
struct Resolver {
    policy: Arc<NetPolicy>,
    /// Whether a grant names `localhost` exactly.
    localhost: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let name = name.as_str().to_ascii_lowercase();
        let policy = self.policy.clone();
        let localhost = self.localhost;
        Box::pin(async move {
            if name == "localhost" && localhost {
                let loopback = [
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                ];
                return Ok(addresses(loopback.to_vec()));
            }
            let answer = lookup(&name, &policy).await?;
            Ok(addresses(answer))
        })
    }
}

/// The addresses of `name`, unless one of them is in a private or special
/// range that `policy` does not let names resolve into.
async fn lookup(name: &str, policy: &NetPolicy) -> Result<Vec<IpAddr>, String> {
    let answer = policy
        .shared
        .resolver
        .resolve(name)
        .await
        .map_err(|e| format!("looking up {name}: {e}"))?;
    match answer
        .iter()
        .find(|ip| !address::allowed(**ip, &policy.allow_private))
    {
        Some(bad) => {
            let why = address::special(*bad).unwrap_or("special");
            Err(format!(
                "{name} resolves to {bad}, which is {why}; let names resolve into that range with allow_private"
            ))
        }
        None => Ok(answer),
    }
}

/// Checks `url`'s name before anything is sent, so that a refusal says why
/// (the client's own errors do not carry the resolver's reason); every
/// connection is checked again as it is made.
pub(super) async fn preflight(url: &str, policy: &NetPolicy) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let host = parsed.host_str().unwrap_or_default();
    let literal = host.parse::<IpAddr>().is_ok() || host.starts_with('[');
    match literal || host == "localhost" {
        true => Ok(()),
        false => lookup(&host.to_ascii_lowercase(), policy).await.map(drop),
    }
}

fn addresses(ips: Vec<IpAddr>) -> Addrs {
    Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)))
}
