//! Injections: which header of which requests carries which secret.
//!
//! An injection names an exact origin (`https://api.github.com`, optionally
//! with a path prefix), a header and a value template such as
//! `Bearer {{ secrets.GITHUB_TOKEN }}`, and optionally methods. It applies to
//! a request of its component only when the scheme, host and port are the
//! same, and the path and method are within it; the guest's own value for
//! the header is then replaced. Plain `http` is refused except toward a
//! loopback address literal, where nothing crosses a network.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderName, HeaderValue};
use zeroize::Zeroizing;

use super::secret::check_name;
use super::set::SecretSet;
use crate::sandbox::net::grant::{Destination, Grant, Host, Scheme};

/// Adds a header carrying a secret to the requests of one component that go
/// to an exact origin (and path prefix, and methods, when given). The tool
/// never sees the value: responses are redacted.
///
/// ```
/// use toolcage::Injection;
///
/// let github = Injection::new(
///     "https://api.github.com",
///     "Authorization",
///     "Bearer {{ secrets.GITHUB_TOKEN }}",
/// )
/// .unwrap()
/// .methods(["GET"])
/// .unwrap();
/// assert_eq!(github.secrets().collect::<Vec<_>>(), ["GITHUB_TOKEN"]);
/// assert!(Injection::new("https://*.github.com", "Authorization", "{{ secrets.T }}").is_err());
/// assert!(Injection::new("http://api.example.com", "Authorization", "{{ secrets.T }}").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Injection {
    target: Grant,
    header: HeaderName,
    template: Vec<Part>,
}

#[derive(Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Secret { name: String, base64: bool },
}

/// Why an injection was refused. It never holds a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret injection for `{url}`: {reason}")]
pub struct InjectionError {
    /// The URL as written.
    pub url: String,
    /// What is wrong.
    pub reason: String,
}

/// Headers an injection may not set: they frame the request or name its
/// destination.
const FRAMING: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "accept-encoding",
];

impl Injection {
    /// Adds `header: value` to requests toward `url`, an exact origin
    /// (`https://host[:port]`, or `http://` with a loopback IP literal) with
    /// an optional path prefix. `value` is text with `{{ secrets.NAME }}`
    /// where the secret goes, or `{{ secrets.NAME | base64 }}` for its
    /// base64 form.
    pub fn new(url: &str, header: &str, value: &str) -> Result<Injection, InjectionError> {
        let fail = |reason: String| InjectionError {
            url: url.to_string(),
            reason,
        };
        let target = Grant::parse(url).map_err(|e| fail(e.reason))?;
        let (scheme, host, _) = target.exact_origin().map_err(|e| fail(e.to_string()))?;
        if scheme == Scheme::Http && !matches!(host, Host::Ip(ip) if ip.is_loopback()) {
            return Err(fail(
                "plain http would send the secret in clear; use https (http is accepted only toward a loopback address literal, such as http://127.0.0.1:8080)".into(),
            ));
        }
        let header = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| fail(format!("`{header}` is not a header name")))?;
        if FRAMING.contains(&header.as_str()) {
            return Err(fail(format!(
                "`{header}` frames the request or names its destination; it cannot carry a secret"
            )));
        }
        let template = parse_template(value).map_err(fail)?;
        Ok(Injection {
            target,
            header,
            template,
        })
    }

    /// This injection for these HTTP methods only (such as `GET`). Default:
    /// every method.
    pub fn methods<S: AsRef<str>>(
        mut self,
        methods: impl IntoIterator<Item = S>,
    ) -> Result<Injection, InjectionError> {
        let url = self.target.to_string();
        self.target = self.target.methods(methods).map_err(|e| InjectionError {
            url,
            reason: e.reason,
        })?;
        Ok(self)
    }

    /// The names of the secrets the value uses.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.template.iter().filter_map(|part| match part {
            Part::Secret { name, .. } => Some(name.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The URL it applies to, as written (with its methods, if limited).
    pub fn url(&self) -> String {
        self.target.to_string()
    }

    /// The header it sets.
    pub fn header(&self) -> &str {
        self.header.as_str()
    }

    /// Where it applies, as a destination grants are matched against; and
    /// the methods it is limited to.
    pub(crate) fn destination(&self) -> (Destination, Option<&[String]>) {
        let (scheme, host, port) = self.target.exact_origin().expect("checked when made");
        let path = self.target.path_prefix().unwrap_or("/").to_string();
        let destination = Destination {
            scheme,
            host,
            port,
            path: Some(path),
        };
        (destination, self.target.method_list())
    }

    /// Whether it applies to `method` toward `destination`; `overridden`:
    /// the request carries a header asking for another path or method, which
    /// an injection limited to them does not allow.
    pub(crate) fn applies(
        &self,
        destination: &Destination,
        method: &str,
        overridden: bool,
    ) -> bool {
        self.target.allows(destination, Some(method)) && !(overridden && self.target.is_narrowed())
    }

    /// Whether `destination` is this injection's origin (whatever its path).
    pub(crate) fn same_origin(&self, destination: &Destination) -> bool {
        let (scheme, host, port) = self.target.exact_origin().expect("checked when made");
        scheme == destination.scheme && host == destination.host && port == destination.port
    }

    /// The header's value with the secrets of `set`, marked sensitive; or
    /// the name of a secret that is not set.
    pub(crate) fn render(&self, set: &SecretSet) -> Result<(HeaderName, HeaderValue), String> {
        let mut value = Zeroizing::new(Vec::new());
        for part in &self.template {
            match part {
                Part::Text(text) => value.extend_from_slice(text.as_bytes()),
                Part::Secret { name, base64 } => {
                    let secret = set.get(name).ok_or_else(|| name.clone())?;
                    if *base64 {
                        let encoded = Zeroizing::new(STANDARD.encode(secret.value()));
                        value.extend_from_slice(encoded.as_bytes());
                    } else {
                        value.extend_from_slice(secret.value().as_bytes());
                    }
                }
            }
        }
        // Secrets and the template's text hold no control characters.
        let mut value = HeaderValue::from_bytes(&value).map_err(|_| String::new())?;
        value.set_sensitive(true);
        Ok((self.header.clone(), value))
    }
}

/// Splits a value template into text and secret references.
fn parse_template(value: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or("a `{{` without its `}}`; write {{ secrets.NAME }}")?;
        let inner = after[..close].trim();
        let (reference, filter) = match inner.split_once('|') {
            Some((reference, filter)) => (reference.trim(), Some(filter.trim())),
            None => (inner, None),
        };
        let name = reference.strip_prefix("secrets.").ok_or_else(|| {
            format!("`{{{{ {inner} }}}}`: only secrets can be used, as {{{{ secrets.NAME }}}}")
        })?;
        check_name(name).map_err(|e| format!("`{{{{ {inner} }}}}`: {e}"))?;
        let base64 = match filter {
            None => false,
            Some("base64") => true,
            Some(other) => {
                return Err(format!(
                    "`{{{{ {inner} }}}}`: unknown filter `{other}` (only base64)"
                ));
            }
        };
        parts.push(Part::Secret {
            name: name.to_string(),
            base64,
        });
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    if !parts.iter().any(|p| matches!(p, Part::Secret { .. })) {
        return Err("the value uses no secret; write {{ secrets.NAME }} where it goes".into());
    }
    for part in &parts {
        if let Part::Text(text) = part
            && !text
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err("the value's text must be printable ASCII".into());
        }
    }
    Ok(parts)
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Injection({} {}: ", self.target, self.header)?;
        for part in &self.template {
            match part {
                Part::Text(text) => f.write_str(text)?,
                Part::Secret {
                    name,
                    base64: false,
                } => write!(f, "{{{{ secrets.{name} }}}}")?,
                Part::Secret { name, base64: true } => {
                    write!(f, "{{{{ secrets.{name} | base64 }}}}")?
                }
            }
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::secrets::{Secret, Secrets};

    fn destination(url: &str) -> Destination {
        let uri: http::Uri = url.parse().unwrap();
        let scheme = match uri.scheme_str() {
            Some("https") => Scheme::Https,
            _ => Scheme::Http,
        };
        Destination::http(
            scheme,
            uri.authority().unwrap().as_str(),
            uri.path_and_query().map_or("/", |p| p.as_str()),
        )
        .unwrap()
    }

    #[test]
    fn applies_to_its_exact_origin_prefix_and_methods() {
        let inject = Injection::new(
            "https://api.test/v1",
            "Authorization",
            "Bearer {{ secrets.T }}",
        )
        .unwrap()
        .methods(["GET"])
        .unwrap();
        assert!(inject.applies(&destination("https://api.test/v1/x"), "GET", false));
        assert!(inject.applies(&destination("https://api.test:443/v1"), "GET", false));
        for (url, method) in [
            ("https://api.test/v1/x", "POST"),
            ("https://api.test/v2", "GET"),
            ("https://api.test/v10", "GET"),
            ("https://api.test/v1/../admin", "GET"),
            ("https://api.test:8443/v1", "GET"),
            ("http://api.test/v1", "GET"),
            ("https://x.api.test/v1", "GET"),
            ("https://api.test.evil/v1", "GET"),
        ] {
            assert!(
                !inject.applies(&destination(url), method, false),
                "{method} {url}"
            );
        }
        assert!(
            !inject.applies(&destination("https://api.test/v1"), "GET", true),
            "an override header defeats a narrowed injection"
        );
        assert!(inject.same_origin(&destination("https://api.test/other")));
    }

    #[test]
    fn renders_sensitive_values() {
        let secrets: Secrets = [Secret::new("T", "user:password").unwrap()]
            .into_iter()
            .collect();
        let set = secrets.current();
        let basic = Injection::new(
            "https://a.test",
            "authorization",
            "Basic {{secrets.T|base64}}",
        )
        .unwrap();
        let (name, value) = basic.render(&set).unwrap();
        assert_eq!(name, "authorization");
        assert_eq!(value, "Basic dXNlcjpwYXNzd29yZA==");
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("dXNlcjpw"));
        let missing = Injection::new("https://a.test", "x-key", "{{ secrets.OTHER }}").unwrap();
        assert_eq!(missing.render(&set).unwrap_err(), "OTHER");
        assert_eq!(
            format!("{basic:?}"),
            "Injection(https://a.test authorization: Basic {{ secrets.T | base64 }})"
        );
    }

    #[test]
    fn bad_injections_say_what_is_wrong() {
        for (url, header, value, needle) in [
            (
                "https://*.a.test",
                "x-key",
                "{{ secrets.T }}",
                "one name or one IP",
            ),
            (
                "https://10.0.0.0/8",
                "x-key",
                "{{ secrets.T }}",
                "not a wildcard or a range",
            ),
            ("https://a.test:*", "x-key", "{{ secrets.T }}", "not *"),
            ("*://a.test", "x-key", "{{ secrets.T }}", "http or https"),
            (
                "tcp://a.test:5432",
                "x-key",
                "{{ secrets.T }}",
                "http or https",
            ),
            ("http://a.test", "x-key", "{{ secrets.T }}", "in clear"),
            ("http://10.0.0.1", "x-key", "{{ secrets.T }}", "in clear"),
            (
                "https://a.test",
                "bad header",
                "{{ secrets.T }}",
                "not a header name",
            ),
            (
                "https://a.test",
                "Host",
                "{{ secrets.T }}",
                "cannot carry a secret",
            ),
            ("https://a.test", "x-key", "static", "uses no secret"),
            ("https://a.test", "x-key", "{{ env.HOME }}", "only secrets"),
            (
                "https://a.test",
                "x-key",
                "{{ secrets.T | upper }}",
                "unknown filter",
            ),
            ("https://a.test", "x-key", "{{ secrets.T ", "without its"),
            (
                "https://a.test",
                "x-key",
                "a\n{{ secrets.T }}",
                "printable ASCII",
            ),
        ] {
            let error = Injection::new(url, header, value).unwrap_err().to_string();
            assert!(error.contains(needle), "{url} {header} {value}: {error}");
        }
        assert!(Injection::new("http://127.0.0.1:8080", "x-key", "{{ secrets.T }}").is_ok());
        assert!(Injection::new("http://[::1]:8080", "x-key", "{{ secrets.T }}").is_ok());
    }
}
