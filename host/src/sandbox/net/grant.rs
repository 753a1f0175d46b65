//! Network grants: the operator's patterns, and the strict parse of the
//! destinations a tool asks for.
//!
//! Threat model: the tool writes the URL, so every trick of URL parsing is
//! the tool's to try: userinfo (`https://granted.com@evil.com`), odd ports,
//! IPv4 in non-standard forms (`127.1`, `0x7f.0.0.1`, `2130706433`), mixed
//! case, a trailing dot, `..` after a granted path prefix. A destination is
//! parsed once, strictly, and anything ambiguous is refused before any
//! lookup; grants are matched against that parse only, never against a
//! header the tool set.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A destination a tool may reach, as the operator wrote it: the grammar of
/// Spin's `allowed_outbound_hosts`, `scheme://host[:port][/path-prefix]`.
///
/// - scheme: `http`, `https`, `tcp`, `udp` (the last two for sockets), or
///   `*` for any of them;
/// - host: an exact name (matched after lowercasing and punycode, without
///   a trailing dot), `*.domain` (one or more labels under `domain`, never
///   `domain` itself), `*` (any host), an IP literal (`127.0.0.1`,
///   `[::1]`), or a CIDR (`10.0.0.0/8`, `[fd00::]/8`) matching IP literals
///   in that range;
/// - port: a number or `*`; when omitted, the default port of the scheme
///   the request uses (80 for `http`, 443 for `https`); `tcp` and `udp`
///   grants must give one;
/// - path prefix (HTTP only): the request's path must be the prefix, or
///   continue it after a `/`; a path that a server might read as another
///   (a `.` or `..` segment, a backslash, `;`, or `%2f`, `%5c`, `%2e`,
///   `%00` escapes) never matches a grant with a prefix.
///
/// [`Grant::methods`] limits an HTTP grant to some methods.
///
/// A grant lets requests through to public addresses. A special address
/// (loopback, private, link-local...) is reached only through a grant that
/// names it as an IP literal (or `localhost`), or through a range the
/// operator let names resolve into (`allow_private`).
///
/// ```
/// use toolcage::Grant;
///
/// let api: Grant = "https://*.example.com/v1".parse().unwrap();
/// assert_eq!(api.to_string(), "https://*.example.com/v1");
/// assert!("https://user@example.com".parse::<Grant>().is_err());
/// let get_only = Grant::parse("https://example.com").unwrap().methods(["GET"]).unwrap();
/// assert_eq!(get_only.to_string(), "https://example.com (GET)");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    text: String,
    scheme: Option<Scheme>,
    pub(crate) host: HostPattern,
    port: PortPattern,
    path: Option<String>,
    methods: Option<Vec<String>>,
}

/// A scheme a grant or a destination names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Http,
    Https,
    Tcp,
    Udp,
}

impl Scheme {
    fn parse(text: &str) -> Option<Scheme> {
        Some(match text {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "tcp" => Scheme::Tcp,
            "udp" => Scheme::Udp,
            _ => return None,
        })
    }

    pub(crate) fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            Scheme::Tcp | Scheme::Udp => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Tcp => "tcp",
            Scheme::Udp => "udp",
        }
    }
}

/// The host part of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    Any,
    Name(String),
    /// `*.domain`: the domain, without the `*.`.
    Under(String),
    Ip(IpAddr),
    Net(Cidr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    Any,
    Default,
    Exact(u16),
}

/// Why a grant pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network grant `{pattern}`: {reason}")]
pub struct GrantError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Grant {
    /// Parses a pattern; the error says what is wrong with it.
    pub fn parse(pattern: &str) -> Result<Grant, GrantError> {
        let fail = |reason: &str| GrantError {
            pattern: pattern.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = pattern.split_once("://").ok_or_else(|| {
            fail("expected scheme://host[:port][/path], such as https://api.example.com")
        })?;
        let scheme = match scheme {
            "*" => None,
            other => Some(
                Scheme::parse(other)
                    .ok_or_else(|| fail("the scheme must be http, https, tcp, udp or *"))?,
            ),
        };
        if rest.contains(['@', '?', '#', '\\']) || rest.chars().any(|c| c.is_whitespace()) {
            return Err(fail(
                "a grant names a scheme, a host, a port and a path prefix, nothing else (no user@, ?query, #fragment or spaces)",
            ));
        }
        let (host, after_host) = split_host(rest).map_err(|reason| fail(&reason))?;
        let (port, path) = match after_host.strip_prefix(':') {
            Some(after_colon) => {
                let end = after_colon.find('/').unwrap_or(after_colon.len());
                let (port, path) = after_colon.split_at(end);
                let port =
                    match port {
                        "*" => PortPattern::Any,
                        digits => PortPattern::Exact(parse_port(digits).ok_or_else(|| {
                            fail("the port must be a number from 1 to 65535, or *")
                        })?),
                    };
                (port, path)
            }
            None => (PortPattern::Default, after_host),
        };
        if matches!(scheme, Some(Scheme::Tcp | Scheme::Udp)) && port == PortPattern::Default {
            return Err(fail("tcp and udp grants need a port: a number, or *"));
        }
        let path = match path {
            "" | "/" => None,
            path if matches!(scheme, Some(Scheme::Tcp | Scheme::Udp)) => {
                return Err(fail(&format!(
                    "a path ({path}) only makes sense for http and https"
                )));
            }
            path if has_dot_segment(path) || path.contains('%') => {
                return Err(fail(
                    "a path prefix may not contain `.` or `..` segments or percent-escapes",
                ));
            }
            path => Some(path.to_string()),
        };
        let host = parse_host_pattern(host).map_err(|reason| fail(&reason))?;
        Ok(Grant {
            text: pattern.to_string(),
            scheme,
            host,
            port,
            path,
            methods: None,
        })
    }

    /// This grant for these HTTP methods only (case-insensitive names, such
    /// as `GET`). Default: every method.
    pub fn methods<S: AsRef<str>>(
        mut self,
        methods: impl IntoIterator<Item = S>,
    ) -> Result<Grant, GrantError> {
        let fail = |reason: String| GrantError {
            pattern: self.text.clone(),
            reason,
        };
        if matches!(self.scheme, Some(Scheme::Tcp | Scheme::Udp)) {
            return Err(fail("methods only make sense for http and https".into()));
        }
        let mut names = Vec::new();
        for method in methods {
            let method = method.as_ref().to_ascii_uppercase();
            if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err(fail(format!("`{method}` is not an HTTP method")));
            }
            names.push(method);
        }
        if names.is_empty() {
            return Err(fail("an empty list of methods would allow nothing".into()));
        }
        self.methods = Some(names);
        Ok(self)
    }

    /// Whether this grant lets `method` reach `destination` (a path for
    /// HTTP, `None` for sockets).
    pub(crate) fn allows(&self, destination: &Destination, method: Option<&str>) -> bool {
        if self.scheme.is_some_and(|s| s != destination.scheme) {
            return false;
        }
        let port_ok = match self.port {
            PortPattern::Any => true,
            PortPattern::Exact(port) => port == destination.port,
            PortPattern::Default => destination.scheme.default_port() == Some(destination.port),
        };
        if !port_ok || !self.host.matches(&destination.host) {
            return false;
        }
        if let (Some(prefix), Some(path)) = (&self.path, &destination.path) {
            let path = path.split(['?', '#']).next().unwrap_or_default();
            let within = path == prefix.as_str()
                || prefix.ends_with('/') && path.starts_with(prefix.as_str())
                || path
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('/'));
            if !within || ambiguous_path(path) {
                return false;
            }
        }
        match (&self.methods, method) {
            (Some(methods), Some(method)) => methods.iter().any(|m| m == method),
            _ => true,
        }
    }

    /// Whether this grant names exactly `host`'s address as an IP literal
    /// (or `localhost` for loopback): the operator's written consent to a
    /// special address.
    pub(crate) fn names_exactly(&self, host: &Host) -> bool {
        match (&self.host, host) {
            (HostPattern::Ip(granted), Host::Ip(ip)) => granted == ip,
            (HostPattern::Name(granted), Host::Name(name)) => {
                granted == "localhost" && name == "localhost"
            }
            _ => false,
        }
    }
}

impl Grant {
    /// The origin this grant names exactly: `http` or `https`, a name or an
    /// IP literal (no wildcard, no range), a port or the scheme's default.
    pub(crate) fn exact_origin(&self) -> Result<(Scheme, Host, u16), &'static str> {
        let scheme = match self.scheme {
            Some(scheme @ (Scheme::Http | Scheme::Https)) => scheme,
            _ => return Err("the scheme must be http or https"),
        };
        let host = match &self.host {
            HostPattern::Name(name) => Host::Name(name.clone()),
            HostPattern::Ip(ip) => Host::Ip(*ip),
            _ => {
                return Err(
                    "the host must be one name or one IP address, not a wildcard or a range",
                );
            }
        };
        let port = match self.port {
            PortPattern::Exact(port) => port,
            PortPattern::Default => scheme.default_port().unwrap_or_default(),
            PortPattern::Any => return Err("the port must be a number, not *"),
        };
        Ok((scheme, host, port))
    }

    /// The path prefix, if the grant has one.
    pub(crate) fn path_prefix(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The methods the grant is limited to, if it is.
    pub(crate) fn method_list(&self) -> Option<&[String]> {
        self.methods.as_deref()
    }

    /// Whether this grant lets raw TCP or UDP sockets out (a socket always
    /// names its port, so a grant without one never matches it).
    pub(crate) fn allows_sockets(&self) -> bool {
        (self.for_scheme(Scheme::Tcp) || self.for_scheme(Scheme::Udp))
            && self.port != PortPattern::Default
    }

    /// Whether this grant reaches `host` (whatever the scheme and port).
    pub(crate) fn reaches(&self, host: &Host) -> bool {
        self.host.matches(host)
    }

    /// Whether a lookup of `name` is something this grant could need.
    pub(crate) fn covers_name(&self, name: &str) -> bool {
        self.host.matches(&Host::Name(name.to_string()))
    }

    /// Whether this grant is for `scheme` (or any scheme).
    pub(crate) fn for_scheme(&self, scheme: Scheme) -> bool {
        self.scheme.is_none_or(|s| s == scheme)
    }
}

impl HostPattern {
    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Name(granted), Host::Name(name)) => granted == name,
            (HostPattern::Under(domain), Host::Name(name)) => name
                .strip_suffix(domain.as_str())
                .is_some_and(|label| label.len() > 1 && label.ends_with('.')),
            (HostPattern::Ip(granted), Host::Ip(ip)) => granted == ip,
            (HostPattern::Net(net), Host::Ip(ip)) => net.contains(*ip),
            _ => false,
        }
    }
}

impl FromStr for Grant {
    type Err = GrantError;

    fn from_str(pattern: &str) -> Result<Grant, GrantError> {
        Grant::parse(pattern)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if let Some(methods) = &self.methods {
            write!(f, " ({})", methods.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Grant({self})")
    }
}

/// An IP range in CIDR notation: `10.0.0.0/8`, `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in this range. An IPv4-mapped IPv6 address counts as
    /// the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `address/prefix`; the address may be bracketed when it is IPv6. Host
    /// bits must be zero, so a typo cannot widen the range unseen.
    fn from_str(text: &str) -> Result<Cidr, String> {
        let (address, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not a CIDR range such as 10.0.0.0/8"))?;
        let address = address
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(address);
        let network = parse_ip_literal(address)
            .ok_or_else(|| format!("`{address}` is not an IP address in standard form"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p: &u8| *p <= max && prefix.len() <= 3 && !prefix.starts_with('+'))
            .ok_or_else(|| format!("`{prefix}` is not a prefix length from 0 to {max}"))?;
        let cidr = Cidr { network, prefix };
        let masked = match network {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        };
        if masked != network {
            return Err(format!(
                "`{text}` has bits set past its prefix; did you mean {masked}/{prefix}?"
            ));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A destination's host, parsed strictly: a lowercase ASCII name without a
/// trailing dot, or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Where a tool asked to go, parsed once: what grants are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    /// The path and query, for HTTP.
    pub path: Option<String>,
}

impl Destination {
    /// Parses an HTTP request's scheme and authority (`host[:port]`), as the
    /// tool wrote them. Refused: userinfo, a port that is not 1 to 65535 in
    /// plain digits, an empty or malformed host, percent-escapes, IPv6 zone
    /// ids, and IPv4 in any form but dotted decimal.
    pub(crate) fn http(scheme: Scheme, authority: &str, path: &str) -> Result<Self, String> {
        if authority.contains('@') {
            return Err(
                "the URL carries user information (user@host), which toolcage refuses".into(),
            );
        }
        let (host, after) = split_host(authority)?;
        let port = match after.strip_prefix(':') {
            None if after.is_empty() => scheme.default_port().expect("http has a default port"),
            Some(digits) => parse_port(digits)
                .ok_or_else(|| format!("`{digits}` is not a port from 1 to 65535"))?,
            None => return Err(format!("`{authority}` is not a host and port")),
        };
        Ok(Destination {
            scheme,
            host: parse_host(host)?,
            port,
            path: Some(path.to_string()),
        })
    }

    /// `host:port` as it goes in the `Host` header (no port when it is the
    /// scheme's default).
    pub(crate) fn host_header(&self) -> String {
        if self.scheme.default_port() == Some(self.port) {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// Splits `host` (bracketed when IPv6, with its `/prefix` when it is a
/// CIDR) from what follows it.
fn split_host(text: &str) -> Result<(&str, &str), String> {
    let end = if text.starts_with('[') {
        text.find(']')
            .ok_or_else(|| format!("`{text}`: an IPv6 address without its closing ]"))?
            + 1
    } else {
        text.find([':', '/']).unwrap_or(text.len())
    };
    if let Some(after) = text[end..].strip_prefix('/') {
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let literal = text[..end]
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok();
        if digits > 0 && matches!(after.as_bytes().get(digits), None | Some(b':')) && literal {
            return Ok(text.split_at(end + 1 + digits));
        }
    }
    Ok(text.split_at(end))
}

fn parse_port(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|port| *port != 0)
}

/// Whether a server might read `path` as another path: dot segments (also
/// escaped), backslashes, `;` parameters, escaped slashes and NULs.
fn ambiguous_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    has_dot_segment(path)
        || lower.contains(['\\', ';'])
        || ["%2f", "%5c", "%00", "%2e"]
            .iter()
            .any(|e| lower.contains(e))
}

impl Grant {
    /// Whether this grant limits the path or the methods.
    pub(crate) fn is_narrowed(&self) -> bool {
        self.path.is_some() || self.methods.is_some()
    }
}

fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let segment = segment.to_ascii_lowercase().replace("%2e", ".");
        segment == "." || segment == ".."
    })
}

/// An IP address in its standard text form only: dotted decimal with no
/// leading zeros, or IPv6 (no zone).
fn parse_ip_literal(text: &str) -> Option<IpAddr> {
    // Rust's parser already refuses `127.1`, hex, octal and leading zeros.
    text.parse().ok()
}

/// A destination host: `[v6]`, dotted-decimal IPv4, or a DNS name.
fn parse_host(text: &str) -> Result<Host, String> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').unwrap_or(inner);
        return match inner.parse::<Ipv6Addr>() {
            Ok(v6) => Ok(Host::Ip(IpAddr::V6(v6))),
            Err(_) => Err(format!(
                "`{text}` is not an IPv6 address (zone ids are refused)"
            )),
        };
    }
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if name.is_empty() {
        return Err("the URL has no host".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Err(format!(
            "`{text}` is not a host name (letters, digits, `-`, `_` and dots only; a Unicode name goes in punycode)"
        ));
    }
    if name.len() > 253
        || name
            .split('.')
            .any(|label| label.is_empty() || label.len() > 63)
    {
        return Err(format!("`{text}` is not a valid host name"));
    }
    // A name whose last label is a number is an IPv4 address to every URL
    // parser that matters; only dotted decimal is taken as one.
    let last = name.rsplit('.').next().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit());
    if numeric {
        return match name.parse::<Ipv4Addr>() {
            Ok(v4) => Ok(Host::Ip(IpAddr::V4(v4))),
            Err(_) => Err(format!(
                "`{text}` is an IPv4 address in a non-standard form; write it in dotted decimal (such as 127.0.0.1)"
            )),
        };
    }
    Ok(Host::Name(name))
}

/// A grant's host: `*`, `*.domain`, a name (Unicode allowed, turned into
/// punycode), an IP literal or a CIDR.
fn parse_host_pattern(text: &str) -> Result<HostPattern, String> {
    if text.is_empty() {
        return Err("the host is missing".into());
    }
    if text == "*" {
        return Ok(HostPattern::Any);
    }
    if text.contains('/') {
        return text.parse::<Cidr>().map(HostPattern::Net);
    }
    let ascii = |name: &str| -> Result<String, String> {
        if name.contains('*') {
            return Err("`*` may only stand alone or as the first label (`*.domain`)".into());
        }
        let ascii = idna::domain_to_ascii(name)
            .map_err(|_| format!("`{name}` is not a valid host name"))?;
        match parse_host(&ascii)? {
            Host::Name(name) => Ok(name),
            Host::Ip(_) => Err(format!("`{name}` is not a host name")),
        }
    };
    if let Some(domain) = text.strip_prefix("*.") {
        return Ok(HostPattern::Under(ascii(domain)?));
    }
    if text.starts_with('[') {
        return match parse_host(text)? {
            Host::Ip(ip) => Ok(HostPattern::Ip(ip)),
            Host::Name(_) => unreachable!("a bracketed host is an address"),
        };
    }
    match parse_host(text) {
        Ok(Host::Ip(ip)) => Ok(HostPattern::Ip(ip)),
        Ok(Host::Name(_)) | Err(_) => ascii(text).map(HostPattern::Name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url: &str) -> Destination {
        let (scheme, rest) = url.split_once("://").unwrap();
        let end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = if path.is_empty() { "/" } else { path };
        Destination::http(Scheme::parse(scheme).unwrap(), authority, path).unwrap()
    }

    fn allows(grant: &str, url: &str) -> bool {
        Grant::parse(grant).unwrap().allows(&dest(url), Some("GET"))
    }

    #[test]
    fn grants_match_scheme_host_port_and_path() {
        let table = [
            ("https://api.example.com", "https://api.example.com/x", true),
            (
                "https://api.example.com",
                "https://API.Example.COM./x",
                true,
            ),
            ("https://api.example.com", "http://api.example.com/x", false),
            (
                "https://api.example.com",
                "https://api.example.com:8443/",
                false,
            ),
            (
                "https://api.example.com:8443",
                "https://api.example.com:8443/",
                true,
            ),
            (
                "https://api.example.com:*",
                "https://api.example.com:1/",
                true,
            ),
            ("*://api.example.com", "http://api.example.com/", true),
            ("*://api.example.com", "https://api.example.com/", true),
            ("*://api.example.com", "https://api.example.com:80/", false),
            ("https://*.example.com", "https://a.example.com/", true),
            ("https://*.example.com", "https://a.b.example.com/", true),
            ("https://*.example.com", "https://example.com/", false),
            ("https://*.example.com", "https://example.com.evil/", false),
            ("https://*.example.com", "https://evilexample.com/", false),
            ("https://*", "https://anything.test/", true),
            ("*://*:*", "http://x.test:1234/", true),
            ("https://example.com/v1", "https://example.com/v1", true),
            (
                "https://example.com/v1",
                "https://example.com/v1/users?q=1",
                true,
            ),
            ("https://example.com/v1", "https://example.com/v1?q=1", true),
            ("https://example.com/v1", "https://example.com/v10", false),
            (
                "https://example.com/v1",
                "https://example.com/v1/../admin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/%2e%2e/admin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/..;/admin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/..%2fadmin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/%2E%2E%5cadmin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/..%5Cadmin",
                false,
            ),
            (
                "https://example.com/v1",
                "https://example.com/v1/a%00",
                false,
            ),
            ("https://example.com", "https://example.com/..;/admin", true),
            ("https://example.com/v1/", "https://example.com/v1/x", true),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/", true),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8081/", false),
            (
                "http://127.0.0.1:8080",
                "http://[::ffff:127.0.0.1]:8080/",
                false,
            ),
            ("http://[::1]:8080", "http://[::1]:8080/", true),
            ("http://10.0.0.0/8:80", "http://10.1.2.3/", true),
            ("http://10.0.0.0/8:80", "http://11.1.2.3/", false),
            ("http://[fd00::]/8:*", "http://[fd12::1]:9/", true),
            (
                "https://bücher.example",
                "https://xn--bcher-kva.example/",
                true,
            ),
        ];
        for (grant, url, expected) in table {
            assert_eq!(allows(grant, url), expected, "{grant} against {url}");
        }
    }

    #[test]
    fn methods_limit_a_grant() {
        let grant = Grant::parse("https://example.com")
            .unwrap()
            .methods(["get", "HEAD"])
            .unwrap();
        let to = dest("https://example.com/");
        assert!(grant.allows(&to, Some("GET")));
        assert!(grant.allows(&to, Some("HEAD")));
        assert!(!grant.allows(&to, Some("POST")));
        assert!(
            Grant::parse("tcp://db.internal:5432")
                .unwrap()
                .methods(["GET"])
                .is_err()
        );
        assert!(
            Grant::parse("https://x.test")
                .unwrap()
                .methods(Vec::<&str>::new())
                .is_err()
        );
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for (pattern, says) in [
            ("example.com", "scheme://host"),
            ("ftp://example.com", "scheme must be"),
            ("https://user@example.com", "no user@"),
            ("https://example.com:0", "port must be"),
            ("https://example.com:99999", "port must be"),
            ("https://example.com:http", "port must be"),
            ("https://", "host is missing"),
            ("https://a*.example.com", "`*` may only"),
            ("https://*example.com", "`*` may only"),
            ("tcp://db.internal", "need a port"),
            ("tcp://db.internal:5432/path", "only makes sense"),
            ("https://10.0.0.1/8", "bits set past its prefix"),
            ("https://127.1", "non-standard form"),
            ("https://example.com/a/../b", "segments"),
            ("https://example.com?x", "?query"),
        ] {
            let error = Grant::parse(pattern).unwrap_err().to_string();
            assert!(error.contains(says), "{pattern}: {error}");
            assert!(error.contains(pattern), "{error}");
        }
    }

    #[test]
    fn destinations_are_parsed_strictly() {
        for authority in [
            "user@example.com",
            "example.com@evil.test",
            ":80",
            "example.com:",
            "example.com:+80",
            "example.com:0",
            "example.com:65536",
            "example.com:8O",
            "127.1",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "2130706433",
            "127.000.000.001",
            "[fe80::1%25eth0]",
            "exa%6dple.com",
            "a..b",
            "[::1",
        ] {
            assert!(
                Destination::http(Scheme::Http, authority, "/").is_err(),
                "{authority} was accepted"
            );
        }
        let parsed = Destination::http(Scheme::Https, "Example.COM.:8443", "/").unwrap();
        assert_eq!(parsed.host, Host::Name("example.com".into()));
        assert_eq!(parsed.port, 8443);
        assert_eq!(parsed.host_header(), "example.com:8443");
        let v6 = Destination::http(Scheme::Http, "[::ffff:127.0.0.1]", "/").unwrap();
        assert_eq!(v6.host, Host::Ip("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!(v6.host_header(), "[::ffff:127.0.0.1]");
    }

    #[test]
    fn only_exact_literals_name_a_special_address() {
        let literal = Grant::parse("http://127.0.0.1:8080").unwrap();
        let any = Grant::parse("http://*:*").unwrap();
        let local = Grant::parse("http://localhost:8080").unwrap();
        let loopback = Host::Ip("127.0.0.1".parse().unwrap());
        assert!(literal.names_exactly(&loopback));
        assert!(!any.names_exactly(&loopback));
        assert!(local.names_exactly(&Host::Name("localhost".into())));
        assert!(!any.names_exactly(&Host::Name("localhost".into())));
    }

    #[test]
    fn cidrs_parse_strictly_and_contain_mapped_addresses() {
        let ten: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(ten.contains("10.255.0.1".parse().unwrap()));
        assert!(ten.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!ten.contains("11.0.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let ula: Cidr = "fd00::/8".parse().unwrap();
        assert!(ula.contains("fd12::1".parse().unwrap()));
        assert!("10.0.0.1/8".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        assert!("010.0.0.0/8".parse::<Cidr>().is_err());
    }
}
