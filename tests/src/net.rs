//! Real HTTP and HTTPS servers on loopback for the network tests and the
//! network benchmark: hyper on 127.0.0.x, TLS by rustls with a test CA made
//! for the run. They record what reached them and how many connections are
//! open, so a test can say both what a tool got and what it never sent.
//!
//! Routes:
//! - `/hello`: `hello from ADDR`;
//! - `/bytes/N`: N bytes of `x`, streamed in 64 KiB chunks;
//! - `/redirect?to=URL`: `302` to URL;
//! - `/stall`: a head and 5 bytes, then nothing until the client goes;
//! - `/slow-head/MS`: waits MS milliseconds before the head;
//! - `/upload`: reads the whole body, answers its length;
//! - `/reflect`: answers every request header (`name: value` lines) and the
//!   request body, as a buggy API echoing a credential would; with
//!   `?encode=base64|percent` in that encoding, `&chunk=N` streamed N bytes
//!   at a time with a pause between, `&gzip=1` gzip-encoded, and
//!   `&header=1` with the `Authorization` value also in `x-echo-authorization`;
//! - `/part?from=A&to=B`: bytes A to B of the `Authorization` value;
//! - anything else: 404.
//!
//! [`TcpEcho`] and [`UdpEcho`] answer raw sockets.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What one request looked like when it arrived.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Every `Host` header, in order.
    pub host: Vec<String>,
    /// Every header, lowercase name and value.
    pub headers: Vec<(String, String)>,
}

/// A test CA and a server certificate it signed, for `localhost`,
/// `api.test`, `*.api.test`, 127.0.0.1 and 127.0.0.2.
pub struct TestCa {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The file `ca_pem` was written to (for `ca_file`).
    pub ca_file: PathBuf,
    server: Arc<rustls::ServerConfig>,
    _dir: tempfile::TempDir,
}

impl TestCa {
    /// A new CA, its certificate in a temporary file.
    pub fn new() -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "toolcage test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "api.test".to_string(),
            "*.api.test".to_string(),
        ])
        .unwrap();
        for ip in ["127.0.0.1", "127.0.0.2"] {
            params
                .subject_alt_names
                .push(SanType::IpAddress(ip.parse().unwrap()));
        }
        let certificate = params.signed_by(&key, &issuer).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![certificate.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        TestCa {
            ca_pem: ca.pem(),
            ca_file,
            server: Arc::new(server),
            _dir: dir,
        }
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// A server on a loopback address, running until dropped.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Plain HTTP on `ip` (127.0.0.x), a free port.
    pub async fn http(ip: &str) -> Server {
        Server::start(ip, None).await
    }

    /// HTTPS on `ip`, with a certificate from `ca`.
    pub async fn https(ip: &str, ca: &TestCa) -> Server {
        Server::start(ip, Some(ca.server.clone())).await
    }

    async fn start(ip: &str, tls: Option<Arc<rustls::ServerConfig>>) -> Server {
        assert!(
            ip.starts_with("127."),
            "test servers listen on loopback only"
        );
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let open: Arc<AtomicUsize> = Arc::default();
        let accepted: Arc<AtomicUsize> = Arc::default();
        let (seen_, open_, accepted_) = (seen.clone(), open.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                stream.set_nodelay(true).ok();
                accepted_.fetch_add(1, Ordering::AcqRel);
                let (seen, open, tls) = (seen_.clone(), open_.clone(), tls.clone());
                tokio::spawn(async move {
                    open.fetch_add(1, Ordering::AcqRel);
                    let _open = Decrement(open);
                    let service = hyper::service::service_fn(move |request| {
                        handle(request, addr, seen.clone())
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            http.serve_connection(TokioIo::new(stream), service)
                                .await
                                .ok();
                        }
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(stream) = acceptor.accept(stream).await {
                                http.serve_connection(TokioIo::new(stream), service)
                                    .await
                                    .ok();
                            }
                        }
                    }
                });
            }
        });
        Server {
            addr,
            seen,
            open,
            accepted,
            task,
        }
    }

    /// `ip:port`.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request that reached the server, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Acquire)
    }

    /// Waits up to `within` for the server to have no connection open.
    pub async fn wait_closed(&self, within: Duration) -> usize {
        let until = tokio::time::Instant::now() + within;
        while self.open_connections() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.open_connections()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Decrement(Arc<AtomicUsize>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(text: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(text.into()).boxed()
}

async fn handle(
    request: Request<Incoming>,
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<Body>, Infallible> {
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: request.method().to_string(),
        path: path.clone(),
        host: request
            .headers()
            .get_all(hyper::header::HOST)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect(),
        headers: request
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    });
    let route = path.split('?').next().unwrap_or_default().to_string();
    let query = path
        .split_once('?')
        .map(|(_, q)| q.to_string())
        .unwrap_or_default();
    let response = if route == "/hello" {
        Response::new(full(format!("hello from {addr}")))
    } else if let Some(n) = route.strip_prefix("/bytes/") {
        let total: usize = n.parse().unwrap_or(0);
        let chunks = (0..total.div_ceil(64 << 10)).map(move |i| {
            let size = (total - i * (64 << 10)).min(64 << 10);
            Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; size])))
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(futures::stream::iter(
            chunks,
        ))));
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_LENGTH, total.into());
        response
    } else if route == "/redirect" {
        let to = query.strip_prefix("to=").unwrap_or("/hello").to_string();
        Response::builder()
            .status(302)
            .header(hyper::header::LOCATION, to)
            .body(full(""))
            .unwrap()
    } else if route == "/stall" {
        let stream = futures::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(
            b"start",
        )))])
        .chain(futures::stream::pending());
        Response::new(BodyExt::boxed(StreamBody::new(stream)))
    } else if let Some(ms) = route.strip_prefix("/slow-head/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
        Response::new(full("slow"))
    } else if route == "/upload" {
        let mut body = request.into_body();
        let mut length = 0usize;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => length += frame.data_ref().map_or(0, Bytes::len),
                Err(_) => break,
            }
        }
        Response::new(full(length.to_string()))
    } else if route == "/reflect" {
        reflect(request, &query).await
    } else if route == "/part" {
        let authorization = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec())
            .unwrap_or_default();
        let from = query_value(&query, "from").unwrap_or(0);
        let to = query_value(&query, "to")
            .unwrap_or(authorization.len())
            .min(authorization.len());
        Response::new(full(authorization[from.min(to)..to].to_vec()))
    } else {
        Response::builder()
            .status(404)
            .body(full("not found"))
            .unwrap()
    };
    Ok(response)
}

/// A TCP echo server on a loopback address: it reads a connection to its
/// end and answers `echo: ` and what it read.
pub struct TcpEcho {
    /// Where it listens.
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpEcho {
    /// An echo server on `ip` (127.0.0.x), a free port.
    pub async fn start(ip: &str) -> TcpEcho {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        assert!(
            ip.starts_with("127."),
            "test servers listen on loopback only"
        );
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted: Arc<AtomicUsize> = Arc::default();
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::AcqRel);
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    if stream.read_to_end(&mut read).await.is_ok() {
                        let mut reply = b"echo: ".to_vec();
                        reply.extend(read);
                        stream.write_all(&reply).await.ok();
                    }
                });
            }
        });
        TcpEcho {
            addr,
            accepted,
            task,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Acquire)
    }
}

impl Drop for TcpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A UDP echo server on a loopback address: it answers each datagram with
/// `echo: ` and its content.
pub struct UdpEcho {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl UdpEcho {
    /// An echo server on `ip` (127.0.0.x), a free port.
    pub async fn start(ip: &str) -> UdpEcho {
        assert!(
            ip.starts_with("127."),
            "test servers listen on loopback only"
        );
        let socket = tokio::net::UdpSocket::bind((ip, 0)).await.unwrap();
        let addr = socket.local_addr().unwrap();
        let received: Arc<AtomicUsize> = Arc::default();
        let counter = received.clone();
        let task = tokio::spawn(async move {
            let mut buffer = vec![0; 65536];
            while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
                counter.fetch_add(1, Ordering::AcqRel);
                let mut reply = b"echo: ".to_vec();
                reply.extend_from_slice(&buffer[..length]);
                socket.send_to(&reply, from).await.ok();
            }
        });
        UdpEcho {
            addr,
            received,
            task,
        }
    }

    /// Datagrams received so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::Acquire)
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn query_value(query: &str, key: &str) -> Option<usize> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
}

/// `escaped` as the body of an HTML error page, padded so that a reader
/// taking it in small windows sees the reflection split.
fn html_page(escaped: &str) -> Vec<u8> {
    format!(
        "<!doctype html><html><head><title>401</title></head><body>\
         <h1>Unauthorized</h1><p>{}</p><pre>{escaped}</pre></body></html>",
        "The credentials below were refused. ".repeat(3)
    )
    .into_bytes()
}

/// The `/reflect` route.
async fn reflect(request: Request<Incoming>, query: &str) -> Response<Body> {
    let flag = |key: &str| query.split('&').any(|pair| pair == key);
    let (head, body) = request.into_parts();
    let mut text: Vec<u8> = Vec::new();
    for (name, value) in &head.headers {
        text.extend_from_slice(format!("{name}: ").as_bytes());
        text.extend_from_slice(value.as_bytes());
        text.push(b'\n');
    }
    if let Ok(body) = body.collect().await {
        text.extend_from_slice(&body.to_bytes());
    }
    if flag("encode=base64") {
        use base64::Engine as _;
        text = base64::engine::general_purpose::STANDARD
            .encode(&text)
            .into_bytes();
    } else if flag("encode=percent") {
        text = percent(&text, b"");
    } else if flag("encode=quote") {
        // Python's urllib.parse.quote: `/` left as it is.
        text = percent(&text, b"/");
    } else if flag("encode=json-php") {
        // PHP's json_encode: `/` escaped as `\/`.
        let json = serde_json::to_string(&String::from_utf8_lossy(&text)).unwrap();
        text = json.replace('/', "\\/").into_bytes();
    } else if flag("encode=json-dotnet") {
        // .NET's System.Text.Json: HTML-sensitive characters and `+` as
        // `\uXXXX`, upper-case hex.
        let escaped: String = String::from_utf8_lossy(&text)
            .chars()
            .map(|c| match c {
                '+' | '<' | '>' | '&' | '\'' | '"' | '`' => format!("\\u{:04X}", c as u32),
                '\n' => "\\n".into(),
                '\\' => "\\\\".into(),
                c => c.to_string(),
            })
            .collect();
        text = format!("\"{escaped}\"").into_bytes();
    } else if flag("encode=html") {
        // An error page: the text HTML-escaped, as a template engine does.
        let escaped = String::from_utf8_lossy(&text)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;");
        text = html_page(&escaped);
    } else if flag("encode=html-numeric") {
        // Every character but letters and digits as a hex reference, with
        // leading zeros, as some escapers write them.
        let escaped: String = String::from_utf8_lossy(&text)
            .chars()
            .map(|c| match c {
                c if c.is_ascii_alphanumeric() || c == '\n' => c.to_string(),
                c => format!("&#x{:04X};", c as u32),
            })
            .collect();
        text = html_page(&escaped);
    }
    let mut response = Response::builder();
    if flag("encode=html") || flag("encode=html-numeric") {
        response = response.header(hyper::header::CONTENT_TYPE, "text/html; charset=utf-8");
    }
    if flag("coding=echo")
        && let Some(value) = head.headers.get(hyper::header::AUTHORIZATION)
    {
        // The token as the response's content coding, as a server that
        // reflects what it was sent into any header would.
        let token = value
            .as_bytes()
            .strip_prefix(b"Bearer ")
            .unwrap_or(value.as_bytes());
        response = response.header(hyper::header::CONTENT_ENCODING, token);
    }
    if flag("gzip=1") {
        text = gzip_stored(&text);
        response = response.header(hyper::header::CONTENT_ENCODING, "gzip");
    }
    if flag("header=1")
        && let Some(value) = head.headers.get(hyper::header::AUTHORIZATION)
    {
        response = response.header("x-echo-authorization", value);
    }
    let chunk = query_value(query, "chunk").unwrap_or(usize::MAX).max(1);
    let pieces: Vec<Bytes> = text.chunks(chunk).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::iter(pieces).then(|piece| async move {
        // A pause, so each piece reaches the client as a read of its own.
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok::<_, Infallible>(Frame::data(piece))
    });
    response
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

/// `data` with every byte but the unreserved ones and `safe` as `%XX`.
fn percent(data: &[u8], safe: &[u8]) -> Vec<u8> {
    data.iter()
        .flat_map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => vec![*b],
            b if safe.contains(b) => vec![*b],
            _ => format!("%{b:02X}").into_bytes(),
        })
        .collect()
}

/// `data` as a gzip member of stored (uncompressed) deflate blocks: real
/// gzip, made without a compression library.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let blocks: Vec<&[u8]> = data.chunks(0xffff).collect();
    if blocks.is_empty() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    for (i, block) in blocks.iter().enumerate() {
        let last = u8::from(i + 1 == blocks.len());
        let length = block.len() as u16;
        out.push(last);
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&(!length).to_le_bytes());
        out.extend_from_slice(block);
    }
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    out.extend_from_slice(&(!crc).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}
