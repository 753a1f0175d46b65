//! Raw sockets and name lookup for tools, under the same grants as HTTP.
//!
//! Threat model: a socket reaches whatever address it names, and a lookup
//! is itself a message to the world (DNS can carry data out). So a TCP
//! connect or a UDP datagram goes only to a destination a `tcp://` or
//! `udp://` grant (or `*://`) allows, by IP literal or by a name this call
//! looked up; the special-address rule applies as for HTTP. Listening,
//! accepting and binding anything but the unspecified address with port 0
//! (the implicit bind of a connect or a send) are refused. A name is looked
//! up only when a socket grant of the component names it, through the
//! operator's resolver, and an answer with a refused address is refused as
//! a whole. A tool with only HTTP grants can look nothing up.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{
    self, Host, HostResolveAddressStream, ResolveAddressStream,
};
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode, IpAddress, Network};
use wasmtime_wasi::p2::{DynPollable, Pollable, SocketError};
use wasmtime_wasi::sockets::SocketAddrUse;

use super::address;
use super::grant::{Destination, Host as DestinationHost, Scheme};
use super::meter::{Budget, Meter, NetLimit, Notes};
use super::policy::NetPolicy;

/// Which names this call looked up, by the addresses they answered: a
/// connect to one of those addresses is judged by the name's grants.
/// Made only for a component with grants (nothing else can look up).
type Resolved = Arc<Mutex<HashMap<IpAddr, Vec<String>>>>;

/// A call's sockets policy: the component's grants, its budgets, and the
/// names it has looked up.
#[derive(Clone)]
pub(crate) struct Sockets {
    policy: Option<Arc<NetPolicy>>,
    budget: Budget,
    meter: Arc<Meter>,
    notes: Notes,
    /// `Some` when there is a policy.
    resolved: Option<Resolved>,
}

impl Sockets {
    pub(super) fn new(
        policy: Option<Arc<NetPolicy>>,
        budget: Budget,
        meter: Arc<Meter>,
        notes: Notes,
    ) -> Self {
        Sockets {
            resolved: policy.as_ref().map(|_| Resolved::default()),
            policy,
            budget,
            meter,
            notes,
        }
    }

    /// A call's WASI context: no environment, arguments, stdin or files (a
    /// call's mounts and stdout are set apart), and the sockets its grants
    /// allow. A component without socket grants (most) gets the context's
    /// defaults, which allow no socket, without its builder: the builder
    /// seeds the context's random generators twice, on every call.
    pub(crate) fn wasi_ctx(&self) -> WasiCtx {
        let grants = self
            .policy
            .as_ref()
            .map(|p| p.grants.as_slice())
            .unwrap_or_default();
        let tcp = grants.iter().any(|g| g.for_scheme(Scheme::Tcp));
        let udp = grants.iter().any(|g| g.for_scheme(Scheme::Udp));
        if !tcp && !udp {
            return WasiCtx::default();
        }
        // TCP and UDP as far as the grants need, each use checked by
        // `allows`. Lookups go through toolcage's own `ip-name-lookup`
        // (below); wasmtime-wasi's is never reached.
        let mut wasi = WasiCtx::builder();
        let sockets = self.clone();
        wasi.allow_tcp(tcp)
            .allow_udp(udp)
            .allow_ip_name_lookup(false)
            .socket_addr_check(move |addr, using| {
                let allowed = sockets.allows(addr, using);
                Box::pin(std::future::ready(allowed))
            });
        wasi.build()
    }

    /// Whether the tool may use `addr` so; a refusal is counted and noted
    /// (but for a datagram received, which is dropped silently).
    fn allows(&self, addr: SocketAddr, using: SocketAddrUse) -> bool {
        let scheme = match using {
            // The implicit bind before a connect or a send (and an explicit
            // bind to the same): any local address, any port.
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                if addr.ip().is_unspecified() && addr.port() == 0 {
                    return true;
                }
                self.refuse(
                    &format!("bind to {addr}"),
                    "tools may not bind a chosen local address or port",
                );
                return false;
            }
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                self.refuse(
                    &format!("listen on {addr}"),
                    "tools may not accept connections",
                );
                return false;
            }
            SocketAddrUse::UdpReceive => return self.permitted(Scheme::Udp, addr).is_ok(),
            SocketAddrUse::TcpConnect => Scheme::Tcp,
            SocketAddrUse::UdpSend => Scheme::Udp,
            #[allow(unreachable_patterns)]
            _ => return false,
        };
        let what = format!(
            "{}://{}",
            scheme.as_str(),
            SocketAddr::new(addr.ip().to_canonical(), addr.port())
        );
        if let Err(why) = self.permitted(scheme, addr) {
            self.refuse(&what, &why);
            return false;
        }
        if scheme == Scheme::Tcp {
            let sent = self.meter.requests.fetch_add(1, Ordering::AcqRel);
            if sent >= u64::from(self.budget.requests) {
                self.meter.requests.fetch_sub(1, Ordering::AcqRel);
                self.meter.breach(NetLimit::Requests);
                let why = format!(
                    "the call has made {} requests and connections, its limit",
                    self.budget.requests
                );
                self.refuse(&what, &why);
                return false;
            }
        }
        true
    }

    /// Whether a grant lets `scheme` reach `addr`: by IP literal, or by a
    /// name this call looked up; and why not.
    fn permitted(&self, scheme: Scheme, addr: SocketAddr) -> Result<(), String> {
        let Some(policy) = &self.policy else {
            return Err("the operator granted this tool no network access".into());
        };
        let ip = addr.ip().to_canonical();
        let literal = Destination {
            scheme,
            host: DestinationHost::Ip(ip),
            port: addr.port(),
            path: None,
        };
        let private_ok = address::allowed(ip, &policy.allow_private);
        let by_literal = policy
            .grants
            .iter()
            .any(|g| g.allows(&literal, None) && (private_ok || g.names_exactly(&literal.host)));
        if by_literal {
            return Ok(());
        }
        let resolved = self.resolved.as_ref();
        let names = resolved.and_then(|r| r.lock().unwrap().get(&ip).cloned());
        for name in names.unwrap_or_default() {
            let by_name = Destination {
                host: DestinationHost::Name(name),
                ..literal.clone()
            };
            if policy
                .grants
                .iter()
                .any(|g| g.allows(&by_name, None) && (private_ok || g.names_exactly(&by_name.host)))
            {
                return Ok(());
            }
        }
        Err(match address::special(ip) {
            Some(reason) => format!(
                "{ip} is {reason}, and no {} grant names it exactly",
                scheme.as_str()
            ),
            None => format!(
                "no network grant allows {}://{}",
                scheme.as_str(),
                SocketAddr::new(ip, addr.port())
            ),
        })
    }

    fn refuse(&self, what: &str, why: &str) {
        self.meter.denied.fetch_add(1, Ordering::AcqRel);
        (self.notes)(format!("toolcage: {what} refused: {why}"));
    }

    /// Looks `name` up for the tool, if a socket grant names it.
    fn lookup(&self, name: &str) -> Result<Pending, ErrorCode> {
        let refused = |why: &str| {
            self.refuse(&format!("lookup of {name}"), why);
            ErrorCode::AccessDenied
        };
        let Some(policy) = self.policy.clone() else {
            return Err(refused("the operator granted this tool no network access"));
        };
        if let Ok(ip) = name.parse::<IpAddr>() {
            return Ok(Box::pin(std::future::ready(Ok(vec![ip]))));
        }
        let host = match Destination::http(Scheme::Http, name, "/") {
            Ok(Destination {
                host: DestinationHost::Name(host),
                ..
            }) => host,
            Ok(Destination {
                host: DestinationHost::Ip(ip),
                ..
            }) => return Ok(Box::pin(std::future::ready(Ok(vec![ip])))),
            Err(_) => return Err(ErrorCode::InvalidArgument),
        };
        let socket_grants = policy
            .grants
            .iter()
            .filter(|g| g.for_scheme(Scheme::Tcp) || g.for_scheme(Scheme::Udp));
        let named: Vec<_> = socket_grants.filter(|g| g.covers_name(&host)).collect();
        if named.is_empty() {
            return Err(refused("no tcp or udp grant names it"));
        }
        // A lookup is itself a message to the world: it counts as a request.
        let sent = self.meter.requests.fetch_add(1, Ordering::AcqRel);
        if sent >= u64::from(self.budget.requests) {
            self.meter.requests.fetch_sub(1, Ordering::AcqRel);
            self.meter.breach(NetLimit::Requests);
            return Err(refused(&format!(
                "the call has made {} requests, lookups and connections, its limit",
                self.budget.requests
            )));
        }
        let Some(resolved) = self.resolved.clone() else {
            // Made with the policy: cannot happen, and refused if it did.
            return Err(refused("the operator granted this tool no network access"));
        };
        let (meter, notes) = (self.meter.clone(), self.notes.clone());
        if host == "localhost" || host.ends_with(".localhost") {
            let exact = named
                .iter()
                .any(|g| g.names_exactly(&DestinationHost::Name(host.clone())));
            if !exact {
                return Err(refused(
                    "it is loopback; only a grant naming localhost itself reaches it",
                ));
            }
            let answer = vec![
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ];
            remember(&resolved, &host, &answer);
            return Ok(Box::pin(std::future::ready(Ok(answer))));
        }
        let lookup = policy.shared.resolver.resolve(&host);
        Ok(Box::pin(async move {
            let answer = lookup.await.map_err(|error| {
                notes(format!("toolcage: lookup of {host} failed: {error}"));
                if error.kind() == std::io::ErrorKind::NotFound {
                    ErrorCode::NameUnresolvable
                } else {
                    ErrorCode::TemporaryResolverFailure
                }
            })?;
            if let Some(bad) = answer
                .iter()
                .find(|ip| !address::allowed(**ip, &policy.allow_private))
            {
                meter.denied.fetch_add(1, Ordering::AcqRel);
                notes(format!(
                    "toolcage: lookup of {host} refused: it resolves to {bad}, which is {}; let names resolve into that range with allow_private",
                    address::special(*bad).unwrap_or("special")
                ));
                return Err(ErrorCode::AccessDenied);
            }
            remember(&resolved, &host, &answer);
            Ok(answer)
        }))
    }
}

fn remember(resolved: &Resolved, name: &str, answer: &[IpAddr]) {
    let mut resolved = resolved.lock().unwrap();
    for ip in answer {
        let names = resolved.entry(ip.to_canonical()).or_default();
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
}

type Pending = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, ErrorCode>> + Send>>;

/// A lookup in progress, then its answer.
enum LookupState {
    Pending(Pending),
    Ready(Result<std::vec::IntoIter<IpAddr>, ErrorCode>),
}

/// The `resolve-address-stream` a tool reads a lookup's answer from.
pub(crate) struct AddressStream(LookupState);

impl AddressStream {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let LookupState::Pending(pending) = &mut self.0 {
            match pending.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(answer) => self.0 = LookupState::Ready(answer.map(Vec::into_iter)),
            }
        }
        Poll::Ready(())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for AddressStream {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.poll(cx)).await;
    }
}

/// What toolcage's `ip-name-lookup` works on: the call's table and its
/// sockets policy.
pub(crate) struct LookupView<'a> {
    pub table: &'a mut ResourceTable,
    pub sockets: &'a Sockets,
}

/// [`HasData`] for [`LookupView`].
pub(crate) struct Lookups;

impl HasData for Lookups {
    type Data<'a> = LookupView<'a>;
}

// The bindings name wasmtime-wasi's own stream type; the table holds a
// [`AddressStream`] under the same handle, and only this code reads it.
fn ours(resource: &Resource<ResolveAddressStream>) -> Resource<AddressStream> {
    Resource::new_borrow(resource.rep())
}

// `ip-name-lookup`'s errors are `network`'s: converted as wasmtime-wasi
// converts them.
impl network::Host for LookupView<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        error.downcast()
    }

    fn network_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        let err = self.table.get(&err)?;
        Ok(err.downcast_ref::<std::io::Error>().map(ErrorCode::from))
    }
}

impl network::HostNetwork for LookupView<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl Host for LookupView<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ResolveAddressStream>, SocketError> {
        self.table.get(&network)?;
        let pending = self.sockets.lookup(&name)?;
        let lookup = self
            .table
            .push(AddressStream(LookupState::Pending(pending)))?;
        Ok(Resource::new_own(lookup.rep()))
    }
}

impl HostResolveAddressStream for LookupView<'_> {
    fn resolve_next_address(
        &mut self,
        resource: Resource<ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        let lookup = self.table.get_mut(&ours(&resource))?;
        if lookup
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            .is_pending()
        {
            return Err(ErrorCode::WouldBlock.into());
        }
        match &mut lookup.0 {
            LookupState::Ready(Ok(addresses)) => Ok(addresses.next().map(IpAddress::from)),
            LookupState::Ready(Err(code)) => Err((*code).into()),
            LookupState::Pending(_) => Err(ErrorCode::WouldBlock.into()),
        }
    }

    fn subscribe(
        &mut self,
        resource: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        wasmtime_wasi::p2::subscribe(self.table, ours(&resource))
    }

    fn drop(&mut self, resource: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        self.table
            .delete(Resource::<AddressStream>::new_own(resource.rep()))?;
        Ok(())
    }
}

/// Replaces wasmtime-wasi's `ip-name-lookup` in `linker` with toolcage's.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> LookupView<'_>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    ip_name_lookup::add_to_linker::<T, Lookups>(linker, view)?;
    linker.allow_shadowing(false);
    Ok(())
}
