//! HTTP requests from a tool, through `wasi:http`, sent by the host.
//!
//! The host decides where a tool may go: without a grant from the operator
//! every request fails with [`HttpError::Denied`], and the host's log says
//! which grant is missing. Redirects are never followed for you; a `3xx`
//! comes back as it is, and a new request to its `Location` is checked like
//! any other.
//!
//! ```no_run
//! use toolcage_guest::http;
//!
//! let response = http::get("https://api.github.com/repos/rust-lang/rust")?;
//! let text = response.text(1 << 20)?;
//! # Ok::<(), http::HttpError>(())
//! ```

use std::fmt;

use wasip2::http::outgoing_handler::{self, OutgoingRequest};
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, RequestOptions, Scheme,
};
use wasip2::io::streams::{InputStream, StreamError};

/// Why a request failed.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpError {
    /// The URL is not `http(s)://host[:port][/path]`.
    InvalidUrl(String),
    /// The host refused the request: no grant covers it, or a budget is
    /// spent. The call's log says which.
    Denied,
    /// The destination resolves to, or is, an address the host refuses
    /// (loopback, private, link-local...).
    AddressProhibited,
    /// Any other `wasi:http` error: a timeout, a refused connection, a TLS
    /// failure, a body over the host's limit.
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::InvalidUrl(why) => write!(f, "invalid URL: {why}"),
            HttpError::Denied => f.write_str(
                "the request was refused: the operator has not granted this destination (see the host's log)",
            ),
            HttpError::AddressProhibited => f.write_str(
                "the destination is a loopback, private or otherwise special address, which the operator has not granted",
            ),
            HttpError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<ErrorCode> for HttpError {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => HttpError::Denied,
            ErrorCode::DestinationIpProhibited => HttpError::AddressProhibited,
            ErrorCode::HttpRequestUriInvalid => HttpError::InvalidUrl("refused by the host".into()),
            other => HttpError::Failed(describe(&other)),
        }
    }
}

fn describe(code: &ErrorCode) -> String {
    match code {
        ErrorCode::DnsError(e) => format!(
            "the name could not be resolved ({})",
            e.rcode.as_deref().unwrap_or("no detail")
        ),
        ErrorCode::ConnectionRefused => "the connection was refused".into(),
        ErrorCode::ConnectionTimeout => "connecting timed out".into(),
        ErrorCode::ConnectionReadTimeout => "the server stopped sending".into(),
        ErrorCode::HttpResponseTimeout => "the server did not answer in time".into(),
        ErrorCode::TlsCertificateError => "the server's TLS certificate was not trusted".into(),
        ErrorCode::HttpResponseBodySize(limit) => format!(
            "the response is larger than this call may receive ({} bytes)",
            limit.unwrap_or_default()
        ),
        ErrorCode::ConnectionLimitReached => "too many open connections for this call".into(),
        other => format!("{other:?}"),
    }
}

/// An HTTP request, built then [sent](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout_ms: Option<u64>,
}

impl Request {
    /// A request with `method` (such as `GET`) to `url`.
    pub fn new(method: &str, url: &str) -> Request {
        Request {
            method: method.to_ascii_uppercase(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Waits at most this long for the response head (the host's own limit
    /// still applies).
    pub fn timeout_ms(mut self, ms: u64) -> Request {
        self.timeout_ms = Some(ms);
        self
    }

    /// Sends the request and waits for the response head.
    pub fn send(self) -> Result<Response, HttpError> {
        let (scheme, authority, path) = split_url(&self.url)?;
        let headers = Fields::new();
        for (name, value) in &self.headers {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| HttpError::Failed(format!("header {name}: {e:?}")))?;
        }
        let request = OutgoingRequest::new(headers);
        let method = match self.method.as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_string()),
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} refused"));
        request
            .set_method(&method)
            .map_err(|()| invalid("method"))?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("scheme"))?;
        request
            .set_authority(Some(authority))
            .map_err(|()| invalid("host"))?;
        request
            .set_path_with_query(Some(&path))
            .map_err(|()| invalid("path"))?;
        let body = request
            .body()
            .map_err(|()| HttpError::Failed("no request body".into()))?;
        let options = RequestOptions::new();
        if let Some(ms) = self.timeout_ms {
            options
                .set_first_byte_timeout(Some(ms * 1_000_000))
                .map_err(|()| HttpError::Failed("timeout refused".into()))?;
        }
        let future = outgoing_handler::handle(request, Some(options))?;
        if !self.body.is_empty() {
            let stream = body
                .write()
                .map_err(|()| HttpError::Failed("no request body stream".into()))?;
            for chunk in self.body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| HttpError::Failed(format!("sending the body: {e:?}")))?;
            }
        }
        OutgoingBody::finish(body, None)?;
        future.subscribe().block();
        let response = future
            .get()
            .ok_or_else(|| HttpError::Failed("no response".into()))?
            .map_err(|()| HttpError::Failed("the response was taken twice".into()))??;
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let status = response.status();
        let body = response
            .consume()
            .map_err(|()| HttpError::Failed("no response body".into()))?;
        let stream = body
            .stream()
            .map_err(|()| HttpError::Failed("no response body stream".into()))?;
        Ok(Response {
            status,
            headers,
            stream: Some(stream),
            _body: body,
            _response: response,
        })
    }
}

/// A GET of `url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::new("GET", url).send()
}

/// A response: its head, and its body to read.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, lowercase names, in order.
    pub headers: Vec<(String, String)>,
    stream: Option<InputStream>,
    _body: IncomingBody,
    _response: wasip2::http::types::IncomingResponse,
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The next chunk of the body, `None` at its end.
    pub fn chunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        let Some(stream) = &self.stream else {
            return Ok(None);
        };
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => Ok(Some(chunk)),
            Err(StreamError::Closed) => {
                self.stream = None;
                Ok(None)
            }
            Err(StreamError::LastOperationFailed(e)) => {
                self.stream = None;
                Err(HttpError::Failed(format!(
                    "reading the body: {}",
                    e.to_debug_string()
                )))
            }
        }
    }

    /// At most `max` bytes of the body, and whether there was more.
    pub fn bytes(mut self, max: usize) -> Result<(Vec<u8>, bool), HttpError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = self.chunk()? {
            let room = max - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                return Ok((bytes, true));
            }
            bytes.extend(chunk);
        }
        Ok((bytes, false))
    }

    /// The body as text (invalid UTF-8 replaced), at most `max` bytes.
    pub fn text(self, max: usize) -> Result<String, HttpError> {
        let (bytes, _) = self.bytes(max)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// `scheme://authority/path?query`, split; the fragment dropped.
fn split_url(url: &str) -> Result<(Scheme, &str, String), HttpError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| HttpError::InvalidUrl(format!("`{url}` has no scheme://")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => {
            return Err(HttpError::InvalidUrl(format!(
                "scheme `{other}` is not http or https"
            )));
        }
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(HttpError::InvalidUrl(format!("`{url}` has no host")));
    }
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok((scheme, authority, path))
}
