//! The network as a tool sees it, against real HTTP and HTTPS servers on
//! 127.0.0.1 and 127.0.0.2 (the second stands for an internal service that
//! must never be reached). Names are mapped to loopback by the library's
//! resolver seam, never `/etc/hosts`. Every destination a tool is told to
//! try is on loopback, except in the one test that runs in a network
//! namespace of its own with nothing but loopback (`unshare --net`), so no
//! packet leaves this machine even were the sender wrong.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolcage::{
    CallOptions, CallResult, CancelToken, Cidr, ErrorKind, Grant, GuestEvent, Limits, LogLevel,
    NetLimit, Registry, RegistryBuilder, Runtime,
};
use toolcage_tests::net::{Server, TcpEcho, TestCa, UdpEcho};
use toolcage_tests::{builder, guests, quick_limits, registry};

fn grant(pattern: &str) -> Grant {
    Grant::parse(pattern).unwrap()
}

fn cidr(text: &str) -> Cidr {
    text.parse().unwrap()
}

async fn netprobe(builder: RegistryBuilder) -> Registry {
    registry(builder, &[guests::FIXTURE_NETPROBE]).await
}

/// The netprobe fixture, granted `http://{authority}` only, under `limits`.
async fn granted(authority: &str, limits: Limits) -> Registry {
    netprobe(
        builder()
            .limits(limits)
            .allow_net(grant(&format!("http://{authority}"))),
    )
    .await
}

async fn probe(registry: &Registry, requests: Value) -> (CallResult, Vec<GuestEvent>) {
    probe_with(registry, requests, CallOptions::new()).await
}

async fn probe_with(
    registry: &Registry,
    requests: Value,
    options: CallOptions,
) -> (CallResult, Vec<GuestEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let options = options.on_event(move |event| seen.lock().unwrap().push(event));
    let result = registry
        .call_with("netprobe", json!({ "requests": requests }), options)
        .await;
    let events = events.lock().unwrap().clone();
    (result, events)
}

/// The per-request reports of a call that must have succeeded.
fn reports(result: &CallResult) -> Vec<Value> {
    assert!(!result.is_error, "{}", result.output);
    result.details.clone().unwrap().as_array().unwrap().clone()
}

fn error_of(report: &Value) -> &str {
    report["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {report}"))
}

/// Each name's answers, in the order they are given.
type Answers = Vec<(String, Vec<Vec<IpAddr>>)>;

/// A resolver mapping test names to chosen addresses, counting lookups.
#[derive(Clone, Default)]
struct Names {
    map: Arc<Mutex<Answers>>,
    lookups: Arc<AtomicUsize>,
}

impl Names {
    /// `name` answers `answers` in turn, the last one from then on.
    fn with(self, name: &str, answers: &[&[&str]]) -> Self {
        let answers = answers
            .iter()
            .map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect())
            .collect();
        self.map.lock().unwrap().push((name.to_string(), answers));
        self
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::Acquire)
    }

    fn resolver(&self) -> impl toolcage::Resolve {
        let names = self.clone();
        move |name: &str| -> std::io::Result<Vec<IpAddr>> {
            names.lookups.fetch_add(1, Ordering::AcqRel);
            let mut map = names.map.lock().unwrap();
            match map.iter_mut().find(|(n, _)| n == name) {
                Some((_, answers)) if answers.len() > 1 => Ok(answers.remove(0)),
                Some((_, answers)) => Ok(answers[0].clone()),
                None => Err(std::io::ErrorKind::NotFound.into()),
            }
        }
    }
}

#[tokio::test]
async fn without_a_grant_every_request_is_refused_and_noted() {
    let server = Server::http("127.0.0.1").await;
    let names = Names::default();
    let registry = netprobe(builder().limits(quick_limits()).resolver(names.resolver())).await;
    let authority = server.authority();
    let (result, events) = probe(
        &registry,
        json!([
            { "scheme": "http", "authority": authority, "path": "/first" },
            { "method": "POST", "scheme": "https", "authority": authority, "path": "/upload",
              "headers": [["x-note", "from the tool"]] },
            { "scheme": "https", "authority": "api.test", "path": "/" },
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(error_of(&report).contains("HttpRequestDenied"), "{report}");
    }
    // The call's logs name each destination and why it was refused.
    let why = "refused: the operator granted this tool no network access";
    let lines = [
        format!("toolcage: GET http://{authority}/first {why}"),
        format!("toolcage: POST https://{authority}/upload {why}"),
        format!("toolcage: GET https://api.test/ {why}"),
    ];
    assert_eq!(result.logs.stderr, format!("{}\n", lines.join("\n")));
    let warnings: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            GuestEvent::Log {
                level: LogLevel::Warn,
                message,
            } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        warnings,
        lines.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(result.net.denied, 3);
    assert_eq!(result.net.requests, 0);
    assert_eq!(server.accepted(), 0, "a request reached the server");
    assert_eq!(names.lookups(), 0, "a name was looked up without a grant");
}

#[tokio::test]
async fn refusals_noted_in_a_call_are_bounded() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = netprobe(builder().limits(quick_limits())).await;
    let requests: Vec<Value> = (0..150)
        .map(|i| json!({ "scheme": "https", "authority": authority, "path": format!("/{i}") }))
        .collect();
    let (result, events) = probe(&registry, json!(requests)).await;
    assert!(!result.is_error, "{}", result.output);
    let lines: Vec<&str> = result.logs.stderr.lines().collect();
    assert_eq!(lines.len(), 101, "{}", result.logs.stderr);
    assert!(
        lines[99].contains(&format!("GET https://{authority}/99 refused")),
        "{}",
        lines[99]
    );
    assert_eq!(
        lines[100],
        "toolcage: more than 100 network refusals in this call; the rest are not noted"
    );
    assert_eq!(events.len(), 101);
    assert_eq!(result.net.denied, 150);
    assert_eq!(server.accepted(), 0);
}

#[tokio::test]
async fn a_granted_request_reaches_the_server_with_the_host_from_the_url() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(&authority, quick_limits()).await;
    let (result, _) = probe(
        &registry,
        json!([{ "scheme": "http", "authority": authority, "path": "/hello?x=1",
                 "headers": [["x-tool", "yes"]] }]),
    )
    .await;
    let report = &reports(&result)[0];
    assert_eq!(report["status"], 200, "{report}");
    let body = format!("hello from {authority}");
    assert_eq!(report["body"], body.as_str());
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/hello?x=1");
    assert_eq!(seen[0].host, std::slice::from_ref(&authority));
    assert!(seen[0].headers.contains(&("x-tool".into(), "yes".into())));
    assert_eq!(result.net.requests, 1);
    assert_eq!(result.net.denied, 0);
    assert_eq!(result.net.bytes_in, body.len() as u64);
    assert_eq!(result.net.limit, None);
    assert_eq!(result.logs.stderr, "");
}

#[tokio::test]
async fn a_guest_cannot_set_its_own_host_header() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(&authority, quick_limits()).await;
    let (result, _) = probe(
        &registry,
        json!([{ "scheme": "http", "authority": authority, "path": "/hello",
                 "headers": [["host", "internal.test"]] }]),
    )
    .await;
    let report = &reports(&result)[0];
    assert!(
        error_of(report).contains("header host: HeaderError::Forbidden"),
        "{report}"
    );
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn https_is_verified_against_the_operators_ca() {
    let ca = TestCa::new();
    let server = Server::https("127.0.0.1", &ca).await;
    let authority = server.authority();
    let request = json!([{ "scheme": "https", "authority": authority, "path": "/hello" }]);
    let allow = grant(&format!("https://{authority}"));

    // Without the operator's CA the certificate is refused.
    let untrusting = netprobe(builder().limits(quick_limits()).allow_net(allow.clone())).await;
    let (result, _) = probe(&untrusting, request.clone()).await;
    assert!(error_of(&reports(&result)[0]).contains("TlsCertificateError"));
    assert!(
        result.logs.stderr.contains("failed: TLS: "),
        "{}",
        result.logs.stderr
    );
    assert!(server.seen().is_empty());

    let trusting = netprobe(
        builder()
            .limits(quick_limits())
            .allow_net(allow)
            .ca_file(&ca.ca_file),
    )
    .await;
    let (result, _) = probe(&trusting, request).await;
    assert_eq!(
        reports(&result)[0]["body"],
        format!("hello from {authority}")
    );
}

#[tokio::test]
async fn a_ca_file_that_is_not_pem_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, "not a certificate").unwrap();
    let error = builder().ca_file(&path).build().err().unwrap().to_string();
    assert!(
        error.contains("ca.pem") && error.contains("no PEM certificate"),
        "{error}"
    );
    let missing = builder().ca_file(dir.path().join("missing.pem")).build();
    assert!(missing.err().unwrap().to_string().contains("missing.pem"));
}

#[tokio::test]
async fn grants_match_scheme_port_and_host_exactly() {
    let server = Server::http("127.0.0.1").await;
    let port = server.port();
    let names = Names::default()
        .with("api.test", &[&["127.0.0.1"]])
        .with("x.api.test", &[&["127.0.0.1"]])
        .with("api.test.evil", &[&["127.0.0.1"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_private(cidr("127.0.0.1/32"))
            .allow_net(grant(&format!("http://*.api.test:{port}")))
            .allow_net(
                grant(&format!("http://127.0.0.1:{port}/hello"))
                    .methods(["GET"])
                    .unwrap(),
            ),
    )
    .await;
    let request = |scheme: &str, authority: String, path: &str, method: &str| json!({ "method": method, "scheme": scheme, "authority": authority, "path": path });
    let (result, _) = probe(
        &registry,
        json!([
            request("http", format!("x.api.test:{port}"), "/hello", "GET"),
            request("http", format!("api.test:{port}"), "/hello", "GET"),
            request("http", format!("api.test.evil:{port}"), "/hello", "GET"),
            request("https", format!("x.api.test:{port}"), "/hello", "GET"),
            request(
                "http",
                format!("x.api.test:{}", port.wrapping_add(1).max(1)),
                "/hello",
                "GET"
            ),
            request("http", format!("127.0.0.1:{port}"), "/hello", "GET"),
            request("http", format!("127.0.0.1:{port}"), "/hello", "POST"),
            request("http", format!("127.0.0.1:{port}"), "/other", "GET"),
            request(
                "http",
                format!("127.0.0.1:{port}"),
                "/hello/../other",
                "GET"
            ),
        ]),
    )
    .await;
    let reports = reports(&result);
    let outcomes: Vec<String> = reports
        .iter()
        .map(|r| match r["status"].as_u64() {
            Some(status) => status.to_string(),
            None => r["error"].as_str().unwrap().replace("ErrorCode::", ""),
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            "200",
            "HttpRequestDenied",
            "HttpRequestDenied",
            "HttpRequestDenied",
            "HttpRequestDenied",
            "200",
            "HttpRequestDenied",
            "HttpRequestDenied",
            "HttpRequestDenied",
        ]
    );
    // Only the granted name was looked up; refusals name the grants.
    assert_eq!(names.lookups(), 1);
    assert_eq!(server.seen().len(), 2);
    assert!(
        result.logs.stderr.contains(&format!(
            "refused: no network grant allows GET http://api.test:{port}/hello; this tool's grants: http://*.api.test:{port}, http://127.0.0.1:{port}/hello (GET)"
        )),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn ip_literals_in_any_other_form_and_userinfo_are_refused_before_anything_is_sent() {
    let server = Server::http("127.0.0.1").await;
    let port = server.port();
    let names = Names::default();
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_net(grant(&format!("http://127.0.0.1:{port}")))
            .allow_net(grant("http://*:*")),
    )
    .await;
    const URI: &str = "ErrorCode::HttpRequestUriInvalid";
    const ADDRESS: &str = "ErrorCode::DestinationIpProhibited";
    let authorities = [
        (format!("127.1:{port}"), URI),
        (format!("0x7f.0.0.1:{port}"), URI),
        (format!("0177.0.0.1:{port}"), URI),
        (format!("2130706433:{port}"), URI),
        (format!("127.000.000.001:{port}"), URI),
        (format!("[::ffff:127.0.0.1]:{port}"), ADDRESS),
        (format!("[::ffff:7f00:1]:{port}"), ADDRESS),
        (format!("[::ffff:0:7f00:1]:{port}"), ADDRESS),
        (format!("[::127.0.0.1]:{port}"), ADDRESS),
        (format!("[64:ff9b::7f00:1]:{port}"), ADDRESS),
        (format!("[2002:7f00:1::]:{port}"), ADDRESS),
        (format!("[::1]:{port}"), ADDRESS),
        (format!("0.0.0.0:{port}"), ADDRESS),
        (format!("localhost:{port}"), ADDRESS),
        (format!("a.localhost:{port}"), ADDRESS),
        (format!("granted.test@127.0.0.1:{port}"), URI),
        (format!("127.0.0.1:{port}@granted.test"), URI),
    ];
    let requests: Vec<Value> = authorities
        .iter()
        .map(|(a, _)| json!({ "scheme": "http", "authority": a, "path": "/hello" }))
        .collect();
    let (result, _) = probe(&registry, json!(requests)).await;
    for ((authority, code), report) in authorities.iter().zip(reports(&result)) {
        assert_eq!(error_of(&report), *code, "{authority}");
    }
    assert_eq!(server.accepted(), 0, "a request reached the server");
    assert_eq!(names.lookups(), 0);
    assert!(
        result.logs.stderr.contains("non-standard form"),
        "{}",
        result.logs.stderr
    );
    assert!(
        result
            .logs
            .stderr
            .contains("::ffff:127.0.0.1 is a special IPv4 address in IPv4-mapped form; only a grant naming ::ffff:127.0.0.1 exactly"),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn a_name_is_checked_on_what_it_resolves_to_once_per_request() {
    let public = Server::http("127.0.0.1").await;
    let internal = Server::http("127.0.0.2").await;
    let port = public.port();
    // 127.0.0.1 stands for a public address (let through by allow_private),
    // 127.0.0.2 for an internal one.
    let names = Names::default()
        .with("rebind.test", &[&["127.0.0.1"], &["127.0.0.2"]])
        .with("mixed.test", &[&["127.0.0.1", "127.0.0.2"]])
        .with("internal.test", &[&["127.0.0.2"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_private(cidr("127.0.0.1/32"))
            .allow_net(grant("http://*.test:*"))
            // Naming the internal address in another grant does not let a
            // name resolve into it.
            .allow_net(grant(&format!("http://127.0.0.2:{}", internal.port()))),
    )
    .await;
    let get = |host: &str, port: u16| json!({ "scheme": "http", "authority": format!("{host}:{port}"), "path": "/hello" });
    let (result, _) = probe(
        &registry,
        json!([
            get("rebind.test", port),
            get("rebind.test", internal.port()),
            get("mixed.test", port),
            get("internal.test", internal.port()),
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(
        reports[0]["body"],
        format!("hello from {}", public.authority())
    );
    for report in &reports[1..] {
        assert!(
            error_of(report).contains("DestinationIpProhibited"),
            "{report}"
        );
    }
    assert_eq!(names.lookups(), 4, "one lookup per request");
    assert_eq!(internal.accepted(), 0, "the internal server was reached");
    assert_eq!(public.seen().len(), 1);
    assert!(
        result
            .logs
            .stderr
            .contains("mixed.test resolves to 127.0.0.2, which is loopback (127.0.0.0/8)"),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn redirects_are_never_followed() {
    let public = Server::http("127.0.0.1").await;
    let internal = Server::http("127.0.0.2").await;
    let authority = public.authority();
    let registry = granted(&authority, quick_limits()).await;
    let targets = [
        format!("http://{}/hello", internal.authority()),
        format!("http://127.0.0.1:{}/hello", internal.port()),
        format!("https://{authority}/hello"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ];
    let mut requests: Vec<Value> = targets
        .iter()
        .map(|to| json!({ "scheme": "http", "authority": authority, "path": format!("/redirect?to={to}") }))
        .collect();
    // The tool's own next request, to where it was sent, is checked again.
    requests.push(json!({ "scheme": "http", "authority": internal.authority(), "path": "/hello" }));
    let (result, _) = probe(&registry, json!(requests)).await;
    let reports = reports(&result);
    for (to, report) in targets.iter().zip(&reports) {
        assert_eq!(report["status"], 302, "{report}");
        assert_eq!(report["location"], to.as_str());
    }
    assert!(error_of(&reports[4]).contains("HttpRequestDenied"));
    assert_eq!(internal.accepted(), 0);
    assert_eq!(public.seen().len(), 4);
}

#[tokio::test]
async fn the_request_budget_is_enforced_and_reported() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(
        &authority,
        Limits {
            net_requests: 2,
            ..quick_limits()
        },
    )
    .await;
    let hello = json!({ "scheme": "http", "authority": authority, "path": "/hello" });
    let (result, _) = probe(&registry, json!([hello, hello, hello])).await;
    let reports = reports(&result);
    assert_eq!(reports[1]["status"], 200);
    assert!(error_of(&reports[2]).contains("HttpRequestDenied"));
    assert_eq!(result.net.requests, 2);
    assert_eq!(result.net.denied, 1);
    assert_eq!(result.net.limit, Some(NetLimit::Requests));
    assert!(
        result
            .logs
            .stderr
            .contains("the call has sent 2 requests, its limit")
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn bytes_in_are_counted_as_they_stream_and_stopped_at_the_budget() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(
        &authority,
        Limits {
            net_bytes_in: 1 << 20,
            ..quick_limits()
        },
    )
    .await;
    let (result, _) = probe(
        &registry,
        json!([
            { "scheme": "http", "authority": authority, "path": "/bytes/524288", "length_only": true },
            { "scheme": "http", "authority": authority, "path": "/bytes/10485760", "length_only": true },
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(reports[0]["length"], 524288);
    assert!(
        error_of(&reports[1]).contains("body size exceeds limit: 1048576 bytes"),
        "{}",
        reports[1]
    );
    // Only what reached the tool is counted.
    assert!(
        (524288..=1 << 20).contains(&result.net.bytes_in),
        "{:?}",
        result.net
    );
    assert_eq!(result.net.limit, Some(NetLimit::BytesIn));
    assert_eq!(server.wait_closed(Duration::from_secs(2)).await, 0);
}

#[tokio::test]
async fn bytes_out_are_stopped_at_the_budget() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(
        &authority,
        Limits {
            net_bytes_out: 1 << 20,
            ..quick_limits()
        },
    )
    .await;
    let (result, _) = probe(
        &registry,
        json!([
            { "method": "POST", "scheme": "http", "authority": authority, "path": "/upload",
              "body_bytes": 262144 },
            { "method": "POST", "scheme": "http", "authority": authority, "path": "/upload",
              "body_bytes": 2097152 },
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(reports[0]["body"], "262144");
    assert!(
        error_of(&reports[1]).contains("HttpRequestBodySize"),
        "{}",
        reports[1]
    );
    // Heads and bodies, up to the chunk that would have crossed the limit.
    assert!(
        ((1 << 20) - (64 << 10)..=1 << 20).contains(&result.net.bytes_out),
        "{:?}",
        result.net
    );
    assert_eq!(result.net.limit, Some(NetLimit::BytesOut));
}

#[tokio::test]
async fn stalls_and_slow_servers_hit_the_time_budgets() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(
        &authority,
        Limits {
            net_first_byte_timeout: Duration::from_millis(300),
            net_between_bytes_timeout: Duration::from_millis(300),
            ..quick_limits()
        },
    )
    .await;
    let (result, _) = probe(
        &registry,
        json!([
            { "scheme": "http", "authority": authority, "path": "/stall", "length_only": true },
            // A tool may ask for less time than the operator's, never more.
            { "scheme": "http", "authority": authority, "path": "/slow-head/1000",
              "first_byte_ms": 60000 },
            { "scheme": "http", "authority": authority, "path": "/slow-head/200",
              "first_byte_ms": 50 },
        ]),
    )
    .await;
    let reports = reports(&result);
    assert!(
        error_of(&reports[0]).contains("connection read timeout"),
        "{}",
        reports[0]
    );
    assert!(
        error_of(&reports[1]).contains("HttpResponseTimeout"),
        "{}",
        reports[1]
    );
    assert!(
        error_of(&reports[2]).contains("HttpResponseTimeout"),
        "{}",
        reports[2]
    );
    assert_eq!(result.net.limit, Some(NetLimit::BetweenBytes));
    assert_eq!(server.wait_closed(Duration::from_secs(2)).await, 0);
}

#[tokio::test]
async fn open_connections_are_limited_per_call() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(
        &authority,
        Limits {
            net_connections: 1,
            ..quick_limits()
        },
    )
    .await;
    let held = json!({ "scheme": "http", "authority": authority, "path": "/stall", "hold": true });
    let (result, _) = probe(&registry, json!([held, held])).await;
    let reports = reports(&result);
    assert_eq!(reports[0]["held"], true);
    assert!(
        error_of(&reports[1]).contains("ConnectionLimitReached"),
        "{}",
        reports[1]
    );
    assert_eq!(result.net.limit, Some(NetLimit::Connections));
    assert_eq!((result.net.requests, result.net.denied), (1, 1));
    assert_eq!(server.accepted(), 1);
    assert_eq!(server.wait_closed(Duration::from_secs(2)).await, 0);
}

#[tokio::test]
async fn a_timeout_or_a_cancel_mid_request_leaves_nothing_open() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    // A runtime of its own, so that its count of open connections is this
    // test's alone.
    let runtime = Runtime::new().unwrap();
    let registry = netprobe(
        Registry::builder()
            .runtime(&runtime)
            .limits(Limits {
                timeout: Duration::from_millis(500),
                ..quick_limits()
            })
            .allow_net(grant(&format!("http://{authority}"))),
    )
    .await;
    let stall = json!([{ "scheme": "http", "authority": authority, "path": "/stall",
                         "length_only": true }]);
    let (result, _) = probe(&registry, stall.clone()).await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::Timeout),
        "{}",
        result.output
    );
    assert_eq!(runtime.open_connections(), 0);
    assert_eq!(server.wait_closed(Duration::from_secs(2)).await, 0);

    let cancel = CancelToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        later.cancel();
    });
    let (result, _) = probe_with(&registry, stall, CallOptions::new().cancel_token(cancel)).await;
    assert_eq!(
        result.error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        result.output
    );
    assert_eq!(runtime.open_connections(), 0);
    assert_eq!(server.wait_closed(Duration::from_secs(2)).await, 0);
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn concurrent_calls_under_different_grants_share_nothing() {
    let first = Server::http("127.0.0.1").await;
    let second = Server::http("127.0.0.2").await;
    let to_first = netprobe(
        builder()
            .limits(quick_limits())
            .allow_net(grant(&format!("http://{}", first.authority()))),
    )
    .await;
    let to_second = netprobe(
        builder()
            .limits(quick_limits())
            .allow_net(grant(&format!("http://{}", second.authority()))),
    )
    .await;
    let both = json!([
        { "scheme": "http", "authority": first.authority(), "path": "/hello" },
        { "scheme": "http", "authority": second.authority(), "path": "/hello" },
    ]);
    let calls = (0..8).map(|i| {
        let registry = if i % 2 == 0 { &to_first } else { &to_second };
        probe(registry, both.clone())
    });
    for (i, (result, _)) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let reports = reports(&result);
        let (granted, refused) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
        assert_eq!(reports[granted]["status"], 200, "{reports:?}");
        assert!(error_of(&reports[refused]).contains("HttpRequestDenied"));
        assert_eq!((result.net.requests, result.net.denied), (1, 1));
    }
    assert_eq!(first.seen().len(), 4);
    assert_eq!(second.seen().len(), 4);
}

/// Runs in a network namespace of its own with only loopback up, so that the
/// addresses it asks for (the metadata service, a private network, a public
/// one) cannot be reached even were the policy wrong: what it asserts is the
/// policy's error code, not a failed connect. The test re-runs itself under
/// `unshare --net`.
#[tokio::test]
async fn non_loopback_destinations_are_refused_by_policy_in_an_isolated_namespace() {
    const INSIDE: &str = "TOOLCAGE_TEST_IN_NETNS";
    if std::env::var_os(INSIDE).is_none() {
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new("unshare")
            .args([
                "--net",
                "sh",
                "-c",
                "ip link set lo up && exec \"$@\"",
                "sh",
            ])
            .arg(exe)
            .args([
                "--exact",
                "network::non_loopback_destinations_are_refused_by_policy_in_an_isolated_namespace",
                "--test-threads=1",
            ])
            .env(INSIDE, "1")
            .output()
            .expect("unshare runs (tests run as root)");
        let stdout = String::from_utf8_lossy(&status.stdout);
        assert!(
            status.status.success(),
            "the test failed inside its namespace: {stdout}{}",
            String::from_utf8_lossy(&status.stderr)
        );
        // Renamed without this filter following, it would run nothing.
        assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
        return;
    }
    // Inside: prove the namespace has no route off the machine.
    assert!(
        std::net::TcpStream::connect_timeout(
            &"192.0.2.1:80".parse().unwrap(),
            Duration::from_millis(200)
        )
        .is_err()
    );
    let names = Names::default()
        .with("metadata.test", &[&["169.254.169.254"]])
        .with("private.test", &[&["10.0.0.5"]])
        .with("mapped.test", &[&["::ffff:10.0.0.5"]])
        .with("public.test", &[&["192.0.2.200", "8.8.8.8"]])
        .with("only-public.test", &[&["8.8.8.8"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_net(grant("*://*:*")),
    )
    .await;
    let get = |authority: &str| json!({ "scheme": "http", "authority": authority, "path": "/" });
    let (result, _) = probe(
        &registry,
        json!([
            get("169.254.169.254"),
            get("10.0.0.5"),
            get("[fd00::5]"),
            get("[::ffff:169.254.169.254]"),
            get("metadata.test"),
            get("private.test"),
            get("mapped.test"),
            get("public.test"),
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(
            error_of(&report).contains("DestinationIpProhibited"),
            "{report}"
        );
    }
    assert_eq!(result.net.denied, 8);
    // The four names were looked up: each lookup counts as a request.
    assert_eq!(result.net.requests, 4);
    // A public answer passes the policy; the namespace has no route for it.
    let (result, _) = probe(&registry, json!([get("only-public.test"), get("8.8.8.8")])).await;
    for report in reports(&result) {
        assert!(
            error_of(&report).contains("DestinationUnavailable"),
            "{report}"
        );
    }
    assert_eq!((result.net.requests, result.net.denied), (2, 0));
    // Sockets and lookups under the same rule.
    let result = sockprobe(
        &registry,
        json!([
            { "op": "tcp", "address": "169.254.169.254:80", "send": "x" },
            { "op": "udp", "address": "10.0.0.5:53", "send": "x" },
            { "op": "lookup", "name": "metadata.test" },
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(error_of(&report).contains("access-denied"), "{report}");
    }
}

async fn sockprobe(registry: &Registry, ops: Value) -> CallResult {
    registry.call("sockprobe", json!({ "ops": ops })).await
}

#[tokio::test]
async fn sockets_reach_only_granted_destinations() {
    let tcp = TcpEcho::start("127.0.0.1").await;
    let udp = UdpEcho::start("127.0.0.1").await;
    let internal = TcpEcho::start("127.0.0.2").await;
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .allow_net(grant(&format!("tcp://{}", tcp.addr)))
            .allow_net(grant(&format!("udp://{}", udp.addr))),
    )
    .await;
    let result = sockprobe(
        &registry,
        json!([
            // The implicit bind of 0.0.0.0:0 before the connect passes.
            { "op": "tcp", "address": tcp.addr.to_string(), "send": "over tcp" },
            { "op": "udp", "address": udp.addr.to_string(), "send": "over udp" },
            { "op": "tcp", "address": internal.addr.to_string(), "send": "x" },
            { "op": "tcp", "address": format!("127.0.0.1:{}", udp.addr.port()), "send": "x" },
            { "op": "udp", "address": tcp.addr.to_string(), "send": "x" },
            { "op": "listen" },
            { "op": "listen", "address": "127.0.0.1:0" },
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(reports[0]["reply"], "echo: over tcp", "{reports:?}");
    assert_eq!(reports[1]["reply"], "echo: over udp", "{reports:?}");
    for report in &reports[2..] {
        assert!(error_of(report).contains("access-denied"), "{report}");
    }
    assert_eq!(internal.accepted(), 0);
    assert_eq!(tcp.accepted(), 1);
    assert_eq!(udp.received(), 1);
    let stderr = &result.logs.stderr;
    assert!(
        stderr.contains(&format!(
            "toolcage: tcp://{} refused: 127.0.0.2 is loopback (127.0.0.0/8), and no tcp grant names it exactly",
            internal.addr
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("refused: tools may not accept connections"),
        "{stderr}"
    );
    assert!(
        stderr.contains("refused: tools may not bind a chosen local address or port"),
        "{stderr}"
    );
    assert_eq!(result.net.requests, 1, "a TCP connect counts as a request");
}

#[tokio::test]
async fn without_a_socket_grant_sockets_and_lookups_are_refused() {
    let tcp = TcpEcho::start("127.0.0.1").await;
    let names = Names::default().with("api.test", &[&["127.0.0.1"]]);
    // An HTTP grant for the name gives no lookup and no socket.
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_private(cidr("127.0.0.1/32"))
            .allow_net(grant("https://api.test")),
    )
    .await;
    let result = sockprobe(
        &registry,
        json!([
            { "op": "lookup", "name": "api.test" },
            { "op": "tcp", "address": tcp.addr.to_string(), "send": "x" },
            { "op": "udp", "address": tcp.addr.to_string(), "send": "x" },
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(error_of(&report).contains("access-denied"), "{report}");
    }
    assert_eq!(names.lookups(), 0, "DNS is no side channel");
    assert_eq!(tcp.accepted(), 0);
    assert!(
        result
            .logs
            .stderr
            .contains("toolcage: lookup of api.test refused: no tcp or udp grant names it"),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn lookups_answer_granted_names_through_the_address_rule() {
    let tcp = TcpEcho::start("127.0.0.1").await;
    let internal = TcpEcho::start("127.0.0.2").await;
    let port = tcp.addr.port();
    let names = Names::default()
        .with("db.test", &[&["127.0.0.1"]])
        .with("internal.test", &[&["127.0.0.2"]])
        .with("other.test", &[&["127.0.0.1"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_private(cidr("127.0.0.1/32"))
            .allow_net(grant(&format!("tcp://db.test:{port}")))
            .allow_net(grant("tcp://internal.test:*")),
    )
    .await;
    let result = sockprobe(
        &registry,
        json!([
            { "op": "lookup", "name": "db.test" },
            // A connect to the address a granted name answered.
            { "op": "tcp", "address": tcp.addr.to_string(), "send": "by name" },
            { "op": "lookup", "name": "internal.test" },
            { "op": "lookup", "name": "other.test" },
            { "op": "tcp", "address": internal.addr.to_string(), "send": "x" },
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(reports[0]["addresses"], json!(["127.0.0.1"]), "{reports:?}");
    assert_eq!(reports[1]["reply"], "echo: by name", "{reports:?}");
    for report in &reports[2..] {
        assert!(error_of(report).contains("access-denied"), "{report}");
    }
    assert_eq!(names.lookups(), 2, "only the granted names were looked up");
    assert_eq!(internal.accepted(), 0);
    assert!(
        result.logs.stderr.contains(
            "toolcage: lookup of internal.test refused: it resolves to 127.0.0.2, which is loopback (127.0.0.0/8)"
        ),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn paths_a_server_might_read_otherwise_and_override_headers_never_match_a_narrowed_grant() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = netprobe(
        builder().limits(quick_limits()).allow_net(
            grant(&format!("http://{authority}/hello"))
                .methods(["GET"])
                .unwrap(),
        ),
    )
    .await;
    let get = |path: &str, headers: Value| json!({ "scheme": "http", "authority": authority, "path": path, "headers": headers });
    let (result, _) = probe(
        &registry,
        json!([
            get("/hello?q=1", json!([])),
            get("/hello/..;/admin", json!([])),
            get("/hello/..%2fadmin", json!([])),
            get("/hello/%2e%2e%5cadmin", json!([])),
            get("/hello/..\\admin", json!([])),
            get("/hello", json!([["x-http-method-override", "DELETE"]])),
            get("/hello", json!([["x-original-url", "/admin"]])),
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(reports[0]["status"], 200, "{}", reports[0]);
    for report in &reports[1..] {
        let error = report["error"].as_str().unwrap_or_default();
        // The path is refused by the host, or by wasi:http itself.
        assert!(
            error.contains("HttpRequestDenied") || error.contains("refused by its own setters"),
            "{report}"
        );
    }
    assert_eq!(server.seen().len(), 1);
    assert!(
        result
            .logs
            .stderr
            .contains("it carries x-http-method-override, which a grant limited to a path or to methods does not allow"),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn a_query_without_a_path_is_sent_to_the_root() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let registry = granted(&authority, quick_limits()).await;
    let (result, _) = probe(
        &registry,
        json!([{ "scheme": "http", "authority": authority, "path": "?q=1" }]),
    )
    .await;
    assert_eq!(reports(&result)[0]["status"], 404, "{:?}", reports(&result));
    assert_eq!(server.seen()[0].path, "/?q=1");
}

#[tokio::test]
async fn lookups_count_against_the_request_budget_even_when_their_answers_are_refused() {
    let server = Server::http("127.0.0.2").await;
    // Every answer is private: a tool leaking data through the names it
    // looks up still spends its budget.
    let names = Names::default()
        .with("a.leak.test", &[&["127.0.0.2"]])
        .with("b.leak.test", &[&["127.0.0.2"]])
        .with("c.leak.test", &[&["127.0.0.2"]]);
    let registry = netprobe(
        builder()
            .limits(Limits {
                net_requests: 2,
                ..quick_limits()
            })
            .resolver(names.resolver())
            .allow_net(grant("http://*.leak.test:*")),
    )
    .await;
    let get = |host: &str| json!({ "scheme": "http", "authority": format!("{host}:{}", server.port()), "path": "/" });
    let (result, _) = probe(
        &registry,
        json!([get("a.leak.test"), get("b.leak.test"), get("c.leak.test")]),
    )
    .await;
    let reports = reports(&result);
    assert!(error_of(&reports[0]).contains("DestinationIpProhibited"));
    assert!(error_of(&reports[1]).contains("DestinationIpProhibited"));
    assert!(error_of(&reports[2]).contains("HttpRequestDenied"));
    assert_eq!(names.lookups(), 2, "the third name was never looked up");
    assert_eq!((result.net.requests, result.net.denied), (2, 3));
    assert_eq!(result.net.limit, Some(NetLimit::Requests));
    assert_eq!(server.accepted(), 0);
}

#[tokio::test]
async fn the_bundled_fetch_tool_reads_granted_text_in_pieces_and_says_what_is_not_granted() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let mut registry = builder()
        .limits(quick_limits())
        .component_allow_net("fetch", grant(&format!("http://{authority}")))
        .build()
        .unwrap();
    for report in registry.load_bundled().await {
        toolcage_tests::assert_loaded(&report);
    }
    let url = format!("http://{authority}/bytes/250");
    let result = registry
        .call("fetch", json!({ "url": url, "max_chars": 100 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.clone().unwrap();
    assert_eq!(details["total_chars"], 250);
    assert_eq!(details["next_offset"], 100);
    assert!(
        result.output.starts_with(&"x".repeat(100)),
        "{}",
        result.output
    );
    assert!(result.output.contains("offset=100"), "{}", result.output);
    let result = registry
        .call(
            "fetch",
            json!({ "url": url, "offset": 200, "max_chars": 100 }),
        )
        .await;
    assert_eq!(result.output, "x".repeat(50));
    assert_eq!(result.details.unwrap()["next_offset"], Value::Null);

    // Another port of the same host is not granted: said, and nothing sent.
    let other = Server::http("127.0.0.1").await;
    let result = registry
        .call(
            "fetch",
            json!({ "url": format!("http://{}/hello", other.authority()) }),
        )
        .await;
    assert!(result.is_error);
    assert!(result.output.contains("not granted"), "{}", result.output);
    assert_eq!(other.accepted(), 0);
    // The grant is the fetch component's only.
    assert_eq!(result.net.denied, 1);
}
