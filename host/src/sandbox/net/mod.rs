//! Egress: what a tool may reach on the network, and how its requests leave.
//!
//! Threat model: a tool is hostile and may try to reach anything its host
//! can: the cloud metadata address, an internal API, a database on
//! loopback, or a server of its own to send what it read to; and it writes
//! every byte of the URL it asks for. So:
//! - every component is linked with `wasi:http` (a tool built with `fetch()`
//!   loads), but wasmtime-wasi-http's own sender is compiled out: no request
//!   leaves except through [`Egress`];
//! - nothing is reachable until the operator grants it ([`Grant`]); the
//!   grants come from the operator only, never from a tool or a model;
//! - a destination is parsed once, strictly ([`grant`]), and matched before
//!   anything is resolved;
//! - loopback, private, link-local and other special addresses are refused
//!   in every encoding ([`address`]) unless the operator names them;
//! - a name is resolved once, every address checked, and the connection
//!   made to a checked address ([`send`]), so DNS rebinding gains nothing;
//! - each call has budgets: requests, bytes each way, open connections,
//!   time to first byte and between bytes ([`Limits`](crate::Limits)), and
//!   its result carries what it used ([`NetUsage`]);
//! - each refusal is noted in the call's logs with the destination and the
//!   missing grant (at most [`MAX_REFUSALS_NOTED`] lines a call).
//!
//! - raw TCP and UDP go only where `tcp://` and `udp://` grants allow, and a
//!   tool looks up only names such grants name ([`sockets`]).

pub(crate) mod address;
pub(crate) mod grant;
mod meter;
mod policy;
mod resolve;
mod send;
pub(crate) mod sockets;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

pub use grant::{Cidr, Grant, GrantError};
pub(crate) use meter::{Budget, Meter, Notes, redacted, redacted_cut};
pub use meter::{NetLimit, NetUsage};
pub use policy::TlsError;
pub(crate) use policy::{NetPolicy, NetSettings, NetShared};
pub use resolve::{Lookup, Resolve, SystemResolver};

use grant::{Destination, Host, Scheme};

use super::limits::Limits;
use super::secrets::redact::Redactor;

/// The most refusals a call's logs note; later ones are counted in one last
/// line.
pub(crate) const MAX_REFUSALS_NOTED: usize = 100;

/// The longest destination a refusal names, in bytes.
const MAX_DESTINATION_NOTED: usize = 512;

/// How many of a component's grants a refusal lists.
const MAX_GRANTS_NOTED: usize = 5;

/// A call's network hooks: each request checked against the component's
/// policy and budgets, then sent by toolcage's sender, or refused and
/// noted.
pub(crate) struct Egress {
    policy: Option<Arc<NetPolicy>>,
    budget: Budget,
    deadline: Instant,
    meter: Arc<Meter>,
    notes: Notes,
    /// The call's secrets, redacted from every line noted or traced.
    redactor: Option<Arc<Redactor>>,
}

impl Egress {
    /// The hooks of a call under `policy` and the budgets of `limits`,
    /// noting refusals through `note` (see [`bounded`]).
    pub(crate) fn new(
        policy: Option<Arc<NetPolicy>>,
        limits: &Limits,
        deadline: Instant,
        meter: Arc<Meter>,
        note: impl Fn(String) + Send + Sync + 'static,
        redactor: Option<Arc<Redactor>>,
    ) -> Self {
        Egress {
            policy,
            budget: Budget::of(limits),
            deadline,
            notes: bounded(note, redactor.clone(), meter.clone()),
            meter,
            redactor,
        }
    }

    /// The call's sockets policy, sharing this call's budgets, figures and
    /// notes.
    pub(crate) fn sockets(&self) -> sockets::Sockets {
        sockets::Sockets::new(
            self.policy.clone(),
            self.budget,
            self.meter.clone(),
            self.notes.clone(),
        )
    }

    /// Counts and notes a refusal before anything was sent.
    fn refuse(&self, what: &str, why: &str, code: Error) -> Sent {
        self.meter.denied.fetch_add(1, Ordering::AcqRel);
        let what = redacted_cut(
            self.redactor.as_deref(),
            &self.meter,
            what.to_string(),
            MAX_DESTINATION_NOTED,
        );
        (self.notes)(format!("toolcage: {what} refused: {why}"));
        Box::new(async move { Err(code) })
    }

    /// Why no grant lets `destination` through, naming what is granted.
    fn missing_grant(&self, destination: &Destination, method: &str) -> String {
        let grants = self
            .policy
            .as_ref()
            .map(|p| p.grants.as_slice())
            .unwrap_or_default();
        if grants.is_empty() {
            return "the operator granted this tool no network access".into();
        }
        let mut listed: Vec<String> = grants
            .iter()
            .take(MAX_GRANTS_NOTED)
            .map(ToString::to_string)
            .collect();
        if grants.len() > MAX_GRANTS_NOTED {
            listed.push(format!("and {} more", grants.len() - MAX_GRANTS_NOTED));
        }
        format!(
            "no network grant allows {method} {destination}{}; this tool's grants: {}",
            destination.path.as_deref().unwrap_or_default(),
            listed.join(", ")
        )
    }

    fn timeout(&self, guest: Option<Duration>, ours: Duration) -> Duration {
        let left = self.deadline.saturating_duration_since(Instant::now());
        guest.unwrap_or(ours).min(ours).min(left)
    }
}

/// `note`, capped at [`MAX_REFUSALS_NOTED`] lines a call, with each line
/// redacted and cut before anything sees it, and sent to the tracing log
/// too.
fn bounded(
    note: impl Fn(String) + Send + Sync + 'static,
    redactor: Option<Arc<Redactor>>,
    meter: Arc<Meter>,
) -> Notes {
    Arc::new(move |line: String| {
        let line = redacted_cut(
            redactor.as_deref(),
            &meter,
            line,
            MAX_DESTINATION_NOTED + 200,
        );
        tracing::warn!(target: "toolcage::net", "{}", line.escape_debug());
        let noted = meter.refusals_noted.fetch_add(1, Ordering::AcqRel) + 1;
        if noted <= MAX_REFUSALS_NOTED {
            note(line);
        } else if noted == MAX_REFUSALS_NOTED + 1 {
            note(format!(
                "toolcage: more than {MAX_REFUSALS_NOTED} network refusals in this call; the rest are not noted"
            ));
        }
    })
}

/// Headers that ask a server to act on another path or method than the
/// request line's.
const OVERRIDE_HEADERS: [&str; 6] = [
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
];

/// What the request head costs on the wire, near enough: the request line
/// and every header.
fn head_bytes(request: &http::Request<WasiBody>, path: &str) -> u64 {
    let line = request.method().as_str().len() + path.len() + 12;
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    (line + headers + 2) as u64
}

/// A future of wasmtime-wasi-http's: a request's or a response's end.
type Done = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// What [`WasiHttpHooks::send_request`] returns: the response, and the
/// future of its connection.
type Sent = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Done), Error>> + Send>;

impl WasiHttpHooks for Egress {
    /// Checks `request` against the grants and the budgets, adds the
    /// operator's credentials, and hands it to toolcage's sender; or
    /// refuses it, noted, before anything leaves.
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Done,
    ) -> Sent {
        let method = request.method().as_str().to_string();
        let what = format!("{method} {}", request.uri());
        let (destination, path) = match self.destination(request.uri(), &what) {
            Ok(parsed) => parsed,
            Err(refused) => return refused,
        };
        let mut request = request;
        let granted = self
            .granted(&destination, &method, request.headers(), &what)
            .and_then(|grant| self.inject(grant, &destination, &method, &mut request, &what))
            .and_then(|grant| self.charge(&request, &path, &what).map(|()| grant));
        let Granted {
            policy,
            named_exactly,
            identity_only,
            redactor,
            ..
        } = match granted {
            Ok(granted) => granted,
            Err(refused) => return refused,
        };
        if tracing::enabled!(target: "toolcage::net", tracing::Level::DEBUG) {
            let line = format!("{method} {destination}{path}");
            let line = redacted_cut(self.redactor.as_deref(), &self.meter, line, usize::MAX);
            tracing::debug!(target: "toolcage::net", "{}", line.escape_debug());
        }
        set_path(&mut request, &path);
        let options = options.unwrap_or_default();
        let outgoing = send::Outgoing {
            connect_timeout: self.timeout(options.connect_timeout, self.budget.first_byte),
            first_byte_timeout: self.timeout(options.first_byte_timeout, self.budget.first_byte),
            between_bytes_timeout: self
                .timeout(options.between_bytes_timeout, self.budget.between_bytes),
            destination,
            named_exactly,
            policy,
            budget: self.budget,
            meter: self.meter.clone(),
            notes: self.notes.clone(),
            deadline: self.deadline,
            what,
            identity_only,
            redactor,
        };
        sent_safely(outgoing, request)
    }
}

/// What a request's grant check decided, for sending it.
struct Granted {
    policy: Arc<NetPolicy>,
    /// Whether a matching grant names the host exactly (lets a special
    /// address through).
    named_exactly: bool,
    /// Whether the request carries a header that asks for another path or
    /// method.
    overridden: bool,
    /// Whether the response must come unencoded, to be searched for secrets.
    identity_only: bool,
    /// What redacts the secrets current when the request went out.
    redactor: Option<Arc<Redactor>>,
}

impl Egress {
    /// Where `uri` goes, and its path (`/` when empty), parsed strictly.
    fn destination(&self, uri: &http::Uri, what: &str) -> Result<(Destination, String), Sent> {
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            _ => {
                return Err(self.refuse(
                    what,
                    "only http and https are supported",
                    Error::HttpProtocolError,
                ));
            }
        };
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        // A query without a path (`?q=1`) is the root's.
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_string(),
            Some(p) if !p.starts_with('/') => format!("/{p}"),
            Some(p) => p.to_string(),
        };
        match Destination::http(scheme, authority, &path) {
            Ok(destination) => Ok((destination, path)),
            Err(why) => Err(self.refuse(what, &why, Error::HttpRequestUriInvalid)),
        }
    }

    /// The grants that let `destination` through for `method`: refused when
    /// none does, when an override header meets only narrowed grants, or
    /// when a special address is not named exactly.
    fn granted(
        &self,
        destination: &Destination,
        method: &str,
        headers: &http::HeaderMap,
        what: &str,
    ) -> Result<Granted, Sent> {
        let Some(policy) = self.policy.clone() else {
            let why = self.missing_grant(destination, method);
            return Err(self.refuse(what, &why, Error::HttpRequestDenied));
        };
        let mut matching: Vec<&Grant> = policy
            .grants
            .iter()
            .filter(|g| g.allows(destination, Some(method)))
            .collect();
        if matching.is_empty() {
            let why = self.missing_grant(destination, method);
            return Err(self.refuse(what, &why, Error::HttpRequestDenied));
        }
        // Headers some servers obey to take another path or method would
        // get around a grant that limits them.
        let override_header = OVERRIDE_HEADERS
            .iter()
            .find(|name| headers.contains_key(**name));
        if let Some(name) = override_header {
            matching.retain(|g| !g.is_narrowed());
            if matching.is_empty() {
                let why = format!(
                    "it carries {name}, which a grant limited to a path or to methods does not allow"
                );
                return Err(self.refuse(what, &why, Error::HttpRequestDenied));
            }
        }
        let named_exactly = matching.iter().any(|g| g.names_exactly(&destination.host));
        if let Host::Ip(ip) = destination.host
            && !named_exactly
            && !address::allowed(ip, &policy.allow_private)
        {
            let why = format!(
                "{ip} is {}; only a grant naming {ip} exactly, or allow_private, lets it through",
                address::special(ip).unwrap_or("special")
            );
            return Err(self.refuse(what, &why, Error::DestinationIpProhibited));
        }
        Ok(Granted {
            policy,
            named_exactly,
            overridden: override_header.is_some(),
            identity_only: false,
            redactor: None,
        })
    }

    /// Adds the operator's credentials where an injection matches, asks for
    /// an unencoded response from an origin that receives secrets, and
    /// takes the redaction of the secrets current now.
    fn inject(
        &self,
        mut granted: Granted,
        destination: &Destination,
        method: &str,
        request: &mut http::Request<WasiBody>,
        what: &str,
    ) -> Result<Granted, Sent> {
        let policy = &granted.policy;
        let secrets = policy.secrets.current();
        for injection in &policy.injections {
            if !injection.applies(destination, method, granted.overridden) {
                continue;
            }
            match injection.render(&secrets) {
                // Replaces whatever the guest set, every value of it.
                Ok((name, value)) => {
                    request.headers_mut().insert(name, value);
                }
                Err(missing) => {
                    let why = format!(
                        "its {} header needs the secret `{missing}`, which is not set (the operator's secrets changed since the start?)",
                        injection.header()
                    );
                    return Err(self.refuse(what, &why, Error::HttpRequestDenied));
                }
            }
        }
        // Compressed bytes cannot be searched for secrets: a response from
        // an origin that receives secrets must come unencoded.
        granted.identity_only = policy
            .injections
            .iter()
            .any(|injection| injection.same_origin(destination));
        if granted.identity_only {
            request.headers_mut().insert(
                http::header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("identity"),
            );
        }
        granted.redactor = secrets.redactor().cloned();
        Ok(granted)
    }

    /// Counts the request and its head against the call's budgets, or
    /// refuses it when either is spent.
    fn charge(
        &self,
        request: &http::Request<WasiBody>,
        path: &str,
        what: &str,
    ) -> Result<(), Sent> {
        let head = head_bytes(request, path);
        let before = self.meter.bytes_out.fetch_add(head, Ordering::AcqRel);
        if before.saturating_add(head) > self.budget.bytes_out {
            self.meter.bytes_out.fetch_sub(head, Ordering::AcqRel);
            self.meter.breach(NetLimit::BytesOut);
            let why = format!(
                "its head ({head} bytes) would take the call past its limit of {} bytes sent",
                self.budget.bytes_out
            );
            let code = Error::HttpRequestHeaderSectionSize(u32::try_from(head).ok());
            return Err(self.refuse(what, &why, code));
        }
        // Counted from here on, whatever its lookup answers: a lookup is
        // itself a message to the world.
        let sent = self.meter.requests.fetch_add(1, Ordering::AcqRel);
        if sent >= u64::from(self.budget.requests) {
            self.meter.requests.fetch_sub(1, Ordering::AcqRel);
            self.meter.bytes_out.fetch_sub(head, Ordering::AcqRel);
            self.meter.breach(NetLimit::Requests);
            let why = format!(
                "the call has sent {} requests, its limit",
                self.budget.requests
            );
            return Err(self.refuse(what, &why, Error::HttpRequestDenied));
        }
        Ok(())
    }
}

/// Gives `request` the path checked, where the guest's differed (no path,
/// or a query without one).
fn set_path(request: &mut http::Request<WasiBody>, path: &str) {
    let uri = request.uri();
    if uri.path_and_query().map(|p| p.as_str()) == Some(path) {
        return;
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path.parse().ok();
    if let Ok(fixed) = http::Uri::from_parts(parts) {
        *request.uri_mut() = fixed;
    }
}

/// Sends `request` with toolcage's sender. A bug in the sender (or a
/// panicking resolver of the embedder's) fails this request, not the call
/// or the host. The panic's own message went to the panic hook; nothing
/// here formats a request, so no secret is in it.
fn sent_safely(outgoing: send::Outgoing, request: http::Request<WasiBody>) -> Sent {
    let (notes, what) = (outgoing.notes.clone(), outgoing.what.clone());
    Box::new(async move {
        use futures::FutureExt as _;
        match std::panic::AssertUnwindSafe(send::send(outgoing, request))
            .catch_unwind()
            .await
        {
            Ok(sent) => sent,
            Err(_) => {
                notes(format!(
                    "toolcage: {what} failed: toolcage's HTTP sender panicked (a bug; the host's stderr has the panic)"
                ));
                Err(Error::InternalError(Some(
                    "toolcage's HTTP sender panicked".into(),
                )))
            }
        }
    })
}
