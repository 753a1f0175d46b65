//! The HTTP sender's tests: requests to local servers, the budgets as they
//! stream, and the refusals.

use std::sync::Mutex;

use http_body_util::{BodyExt as _, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::sandbox::net::NetShared;
use crate::sandbox::secrets::{Secret, Secrets};

/// A server on 127.0.0.1 that reads one request head, answers `answer`
/// (or nothing, when `None`), and hands back the head it read.
async fn server(answer: Option<&'static str>) -> (u16, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8];
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        match answer {
            Some(answer) => stream.write_all(answer.as_bytes()).await.unwrap(),
            None => tokio::time::sleep(Duration::from_secs(30)).await,
        }
        String::from_utf8(head).unwrap()
    });
    (port, served)
}

struct Call {
    meter: Arc<Meter>,
    notes: Arc<Mutex<Vec<String>>>,
}

/// An outgoing request to `authority` (resolved by `resolver`), within
/// generous budgets but for `bytes_in` and a 200 ms first byte.
fn outgoing(
    authority: &str,
    resolver: Arc<dyn crate::sandbox::net::Resolve>,
    allow_private: Vec<crate::sandbox::net::Cidr>,
    bytes_in: u64,
    redactor: Option<Arc<Redactor>>,
) -> (Outgoing, Call) {
    let destination = Destination::http(Scheme::Http, authority, "/path").unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let policy = NetPolicy {
        grants: Vec::new(),
        allow_private,
        injections: Vec::new(),
        secrets: Secrets::new(),
        shared: Arc::new(NetShared {
            resolver,
            tls: Arc::new(tls),
            open_connections: Arc::default(),
        }),
    };
    let budget = Budget {
        requests: 10,
        bytes_out: 1 << 20,
        bytes_in,
        connections: 4,
        first_byte: Duration::from_millis(200),
        between_bytes: Duration::from_secs(5),
    };
    let call = Call {
        meter: Arc::default(),
        notes: Arc::default(),
    };
    let notes = call.notes.clone();
    let out = Outgoing {
        what: format!("GET http://{authority}/path"),
        named_exactly: matches!(destination.host, Host::Ip(_)),
        destination,
        policy: Arc::new(policy),
        budget,
        meter: call.meter.clone(),
        notes: Arc::new(move |line| notes.lock().unwrap().push(line)),
        deadline: Instant::now() + Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        first_byte_timeout: budget.first_byte,
        between_bytes_timeout: budget.between_bytes,
        identity_only: redactor.is_some(),
        redactor,
    };
    (out, call)
}

fn no_resolver() -> Arc<dyn crate::sandbox::net::Resolve> {
    Arc::new(|name: &str| -> io::Result<Vec<IpAddr>> { panic!("looked up {name}") })
}

fn get() -> http::Request<WasiBody> {
    let body = Empty::<Bytes>::new().map_err(|never| match never {});
    let mut request = http::Request::get("http://ignored/path")
        .body(body.boxed_unsync())
        .unwrap();
    request
        .headers_mut()
        .insert(http::header::HOST, "evil.example".parse().unwrap());
    request
}

/// Sends `out`, driving its connection, and reads the whole body.
async fn fetch(out: Outgoing) -> Result<(http::response::Parts, Result<Bytes, Error>), Error> {
    let (response, io) = send(out, get()).await?;
    tokio::spawn(Box::into_pin(io));
    let (head, body) = response.into_parts();
    let body = body.collect().await.map(|collected| collected.to_bytes());
    Ok((head, body))
}

#[tokio::test]
async fn a_loopback_answer_comes_back_metered_with_the_granted_host() {
    let (port, served) = server(Some(
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello",
    ))
    .await;
    let (out, call) = outgoing(
        &format!("127.0.0.1:{port}"),
        no_resolver(),
        vec![],
        1 << 20,
        None,
    );
    let (head, body) = fetch(out).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["x-a"], "b");
    assert_eq!(body.unwrap(), "hello");
    let sent = served.await.unwrap().to_ascii_lowercase();
    assert!(sent.starts_with("get /path http/1.1\r\n"), "{sent}");
    assert!(
        sent.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{sent}"
    );
    assert!(
        !sent.contains("evil.example"),
        "the guest's Host is replaced"
    );
    let usage = call.meter.usage();
    assert_eq!((usage.bytes_in, usage.limit), (5, None));
}

#[tokio::test]
async fn a_body_past_the_budget_fails_the_read_and_names_the_limit() {
    let (port, _served) = server(Some(
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789",
    ))
    .await;
    let (out, call) = outgoing(&format!("127.0.0.1:{port}"), no_resolver(), vec![], 4, None);
    let (_, body) = fetch(out).await.unwrap();
    assert!(body.is_err(), "{body:?}");
    assert_eq!(call.meter.usage().limit, Some(NetLimit::BytesIn));
}

#[tokio::test]
async fn a_server_that_never_answers_breaches_the_first_byte_timeout() {
    let (port, _served) = server(None).await;
    let (out, call) = outgoing(
        &format!("127.0.0.1:{port}"),
        no_resolver(),
        vec![],
        1 << 20,
        None,
    );
    let started = std::time::Instant::now();
    let error = fetch(out).await.unwrap_err();
    assert!(matches!(error, Error::HttpResponseTimeout), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(call.meter.usage().limit, Some(NetLimit::FirstByte));
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_unless_its_range_is_allowed() {
    let (port, _served) = server(Some("HTTP/1.1 204 No Content\r\n\r\n")).await;
    let loopback: Arc<dyn crate::sandbox::net::Resolve> =
        Arc::new(|_: &str| Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]));
    let authority = format!("api.test:{port}");
    let (out, call) = outgoing(&authority, loopback.clone(), vec![], 1 << 20, None);
    let error = fetch(out).await.unwrap_err();
    assert!(matches!(error, Error::DestinationIpProhibited), "{error:?}");
    assert_eq!(call.meter.usage().denied, 1);
    let notes = call.notes.lock().unwrap().clone();
    assert!(notes[0].contains("resolves to 127.0.0.1"), "{notes:?}");
    let allowed = vec!["127.0.0.0/8".parse().unwrap()];
    let (out, _) = outgoing(&authority, loopback, allowed, 1 << 20, None);
    assert_eq!(fetch(out).await.unwrap().0.status, 204);
}

#[tokio::test]
async fn secrets_are_redacted_and_encoded_answers_refused_where_they_are_held() {
    let secret = Secret::new("TOKEN", "s3cr3t-value-123").unwrap();
    let redactor = Arc::new(Redactor::new([&secret]).unwrap());
    let (port, _served) = server(Some(
        "HTTP/1.1 200 OK\r\nX-Echo: s3cr3t-value-123\r\nContent-Length: 21\r\n\r\nkey=s3cr3t-value-123;",
    ))
    .await;
    let authority = format!("127.0.0.1:{port}");
    let (out, call) = outgoing(
        &authority,
        no_resolver(),
        vec![],
        1 << 20,
        Some(redactor.clone()),
    );
    let (head, body) = fetch(out).await.unwrap();
    let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(
        !body.contains("s3cr3t") && body.starts_with("key="),
        "{body}"
    );
    assert!(!head.headers["x-echo"].to_str().unwrap().contains("s3cr3t"));
    assert!(!head.headers.contains_key(http::header::CONTENT_LENGTH));
    assert_eq!(call.meter.usage().redactions, 2);
    let (port, _served) = server(Some(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n",
    ))
    .await;
    let (out, _) = outgoing(
        &format!("127.0.0.1:{port}"),
        no_resolver(),
        vec![],
        1 << 20,
        Some(redactor),
    );
    let error = fetch(out).await.unwrap_err();
    assert!(
        matches!(error, Error::HttpResponseContentCoding(_)),
        "{error:?}"
    );
}
