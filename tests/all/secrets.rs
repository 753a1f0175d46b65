//! Secrets the tool never sees: injected by the host into the requests an
//! injection matches, redacted from everything that comes back, and from
//! everything the call hands on. Against real HTTP and HTTPS servers on
//! loopback that reflect what they receive, as a buggy API would.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolcage::{
    CallOptions, CallResult, Grant, GuestEvent, Injection, Limits, Registry, Secret, Secrets,
};
use toolcage_tests::net::{Server, TestCa};
use toolcage_tests::{builder, guests, quick_limits, registry, toolcage};

/// A value with characters that base64, percent-encoding and JSON each
/// write differently.
const TOKEN: &str = "ghp_T0ken-Value+9/xyz\"q";
const REDACTED: &str = "[redacted secret GITHUB_TOKEN]";
const COMPONENT: &str = "fixture_netprobe";

fn grant(pattern: &str) -> Grant {
    Grant::parse(pattern).unwrap()
}

fn token() -> Secret {
    Secret::new("GITHUB_TOKEN", TOKEN).unwrap()
}

fn bearer(url: &str) -> Injection {
    Injection::new(url, "Authorization", "Bearer {{ secrets.GITHUB_TOKEN }}").unwrap()
}

/// netprobe, granted `origin` and the other `grants`, with the token
/// injected into requests under `injected`.
async fn injected(origin: &str, injected: &str, grants: &[String]) -> Registry {
    let mut builder = builder()
        .limits(quick_limits())
        .secret(token())
        .allow_net(grant(origin))
        .component_inject(COMPONENT, bearer(injected));
    for pattern in grants {
        builder = builder.allow_net(grant(pattern));
    }
    registry(builder, &[guests::FIXTURE_NETPROBE]).await
}

/// A loopback server, and netprobe with the token injected into every
/// request to it.
async fn one_origin() -> (Server, Registry) {
    let server = Server::http("127.0.0.1").await;
    let origin = format!("http://{}", server.authority());
    let registry = injected(&origin, &origin, &[]).await;
    (server, registry)
}

async fn probe(registry: &Registry, arguments: Value) -> (CallResult, Vec<GuestEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let options = CallOptions::new().on_event(move |event| seen.lock().unwrap().push(event));
    let result = registry.call_with("netprobe", arguments, options).await;
    let events = events.lock().unwrap().clone();
    (result, events)
}

fn request(authority: &str, path: &str) -> Value {
    json!({ "scheme": "http", "authority": authority, "path": path, "report_headers": true })
}

/// Everything a call hands on, as one text.
fn everything(result: &CallResult, events: &[GuestEvent]) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{events:?}",
        result.output,
        result.details.clone().unwrap_or_default(),
        result.logs.stdout,
        result.logs.stderr
    )
}

/// `value` as Python's `urllib.parse.quote` writes it: `/` as it is.
fn quoted(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// How many requests `server` received carrying the token, and in which
/// headers.
fn token_seen(server: &Server) -> Vec<(String, String)> {
    server
        .seen()
        .iter()
        .flat_map(|seen| seen.headers.clone())
        .filter(|(_, value)| value.contains(TOKEN))
        .collect()
}

#[tokio::test]
async fn a_reflected_secret_reaches_the_server_once_and_the_tool_never() {
    let (server, registry) = one_origin().await;
    let (result, events) = probe(
        &registry,
        json!({ "requests": [request(&server.authority(), "/reflect?header=1")] }),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    let report = &result.details.clone().unwrap()[0];
    let body = report["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("authorization: Bearer {REDACTED}")),
        "{body}"
    );
    assert!(body.contains("accept-encoding: identity"), "{body}");
    let echoed = report["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "x-echo-authorization")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(echoed[1], format!("Bearer {REDACTED}"));
    assert!(!everything(&result, &events).contains(TOKEN));
    assert_eq!(result.net.redactions, 2, "the header and the body");
    let seen = token_seen(&server);
    assert_eq!(
        seen,
        [("authorization".to_string(), format!("Bearer {TOKEN}"))],
        "exactly once, in Authorization"
    );
}

/// Each of `paths` of a reflecting origin, in one call: the call's result,
/// everything it hands on, and each body with its path (each checked to
/// hold the redaction marker).
async fn reflected(
    server: &Server,
    registry: &Registry,
    paths: &[&'static str],
) -> (CallResult, String, Vec<(String, &'static str)>) {
    let authority = server.authority();
    let requests: Vec<Value> = paths.iter().map(|p| request(&authority, p)).collect();
    let (result, events) = probe(registry, json!({ "requests": requests })).await;
    assert!(!result.is_error, "{}", result.output);
    let text = everything(&result, &events);
    let details = result.details.clone().unwrap();
    let bodies = details.as_array().unwrap().iter().zip(paths);
    let bodies: Vec<(String, &'static str)> = bodies
        .map(|(report, path)| {
            let body = report["body"]
                .as_str()
                .unwrap_or_else(|| panic!("{path}: {report}"));
            assert!(body.contains(REDACTED), "{path}: {body}");
            (body.to_string(), *path)
        })
        .collect();
    (result, text, bodies)
}

#[tokio::test]
async fn a_secret_split_across_chunks_or_encoded_is_still_redacted() {
    let (server, registry) = one_origin().await;
    let paths = [
        "/reflect?chunk=1",
        "/reflect?chunk=3",
        "/reflect?chunk=7",
        "/reflect?encode=base64",
        "/reflect?encode=base64&chunk=5",
        "/reflect?encode=percent",
        "/reflect?encode=percent&chunk=4",
    ];
    let (result, text, _) = reflected(&server, &registry, &paths).await;
    assert!(!text.contains(TOKEN), "{text}");
    // Neither encoded form of the value survives anywhere either.
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(TOKEN);
    assert!(!text.contains(&encoded[4..20]), "{text}");
    assert!(!text.contains("T0ken-Value%2B9%2Fxyz"), "{text}");
    assert!(result.net.redactions >= paths.len() as u64);
    assert_eq!(token_seen(&server).len(), paths.len());
}

#[tokio::test]
async fn a_secret_reflected_in_any_serializer_s_spelling_is_redacted() {
    // PHP's json_encode (`\/`), .NET's System.Text.Json (`\u002B`, `\u0022`)
    // and Python's quote (`/` raw, `+` as `%2B`): spellings a JSON parser or
    // a URL decoder turns back into the exact secret.
    let (server, registry) = one_origin().await;
    let paths = [
        "/reflect?encode=json-php",
        "/reflect?encode=json-php&chunk=3",
        "/reflect?encode=json-dotnet",
        "/reflect?encode=json-dotnet&chunk=5",
        "/reflect?encode=quote",
        "/reflect?encode=quote&chunk=2",
    ];
    let (result, text, bodies) = reflected(&server, &registry, &paths).await;
    for (body, path) in &bodies {
        // Decoded as the server encoded it, the body holds no secret.
        let decoded = match path {
            p if p.contains("quote") => percent_decoded(body),
            _ => serde_json::from_str::<String>(body)
                .unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
        };
        assert!(!decoded.contains(TOKEN), "{path}: {decoded}");
        assert!(
            decoded.contains(&format!("Bearer {REDACTED}")),
            "{path}: {decoded}"
        );
    }
    assert!(!text.contains("T0ken-Value"), "{text}");
    assert_eq!(result.net.redactions, paths.len() as u64);
}

#[tokio::test]
async fn a_secret_reflected_in_html_character_references_is_redacted() {
    // An error page: `&quot;` for the token's quote (named), or every
    // character but letters and digits as `&#x00NN;` (hex, leading zeros).
    let (server, registry) = one_origin().await;
    let paths = [
        "/reflect?encode=html",
        "/reflect?encode=html&chunk=3",
        "/reflect?encode=html-numeric",
        "/reflect?encode=html-numeric&chunk=5",
    ];
    let (result, text, bodies) = reflected(&server, &registry, &paths).await;
    for (body, path) in &bodies {
        assert!(!body.contains("T0ken-Value"), "{path}: {body}");
        assert!(!body.contains("T0ken&#x002D;Value"), "{path}: {body}");
    }
    assert!(!text.contains("T0ken"), "{text}");
    assert_eq!(result.net.redactions, paths.len() as u64);
}

#[tokio::test]
async fn the_bundled_fetch_read_in_windows_never_hands_on_a_part_of_a_secret() {
    // fetch decodes the page's references and hands it on in windows of
    // 100 characters; the page was redacted before any window was cut, so
    // no window holds a piece of the token, joined or reversed.
    let server = Server::http("127.0.0.1").await;
    let origin = format!("http://{}", server.authority());
    let mut registry = builder()
        .limits(quick_limits())
        .secret(token())
        .component_allow_net("fetch", grant(&origin))
        .component_inject("fetch", bearer(&origin))
        .build()
        .unwrap();
    for report in registry.load_bundled().await {
        toolcage_tests::assert_loaded(&report);
    }
    for encoding in ["html", "html-numeric"] {
        let url = format!("{origin}/reflect?encode={encoding}");
        let (mut joined, mut offset) = (String::new(), Some(0));
        while let Some(at) = offset {
            let arguments = json!({ "url": url, "offset": at, "max_chars": 100 });
            let result = registry.call("fetch", arguments).await;
            assert!(!result.is_error, "{}", result.output);
            let piece = result.output.split("\n\n[Cut at character").next();
            joined.push_str(piece.unwrap());
            offset = result.details.unwrap()["next_offset"].as_u64();
        }
        assert!(joined.contains(REDACTED), "{encoding}: {joined}");
        assert!(joined.len() > 200, "read in several windows: {joined}");
        let reversed: String = TOKEN.chars().rev().collect();
        for piece in [&TOKEN[..8], &TOKEN[8..], &reversed[..8]] {
            assert!(!joined.contains(piece), "{encoding}: {piece} in {joined}");
        }
    }
}

/// `text` with its `%XX` escapes decoded.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[at], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One request to `path` of an origin that receives the secret, whose
/// response comes encoded: the call's result, its events, and the error the
/// tool got (checked to be the content-coding refusal).
async fn refused_coding(path: &str) -> (CallResult, Vec<GuestEvent>, String) {
    let (server, registry) = one_origin().await;
    let arguments = json!({ "requests": [request(&server.authority(), path)] });
    let (result, events) = probe(&registry, arguments).await;
    let report = &result.details.clone().unwrap()[0];
    let error = report["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"))
        .to_string();
    assert!(error.contains("HttpResponseContentCoding"), "{error}");
    (result, events, error)
}

#[tokio::test]
async fn a_secret_echoed_as_the_content_coding_is_redacted_from_the_error() {
    let (result, events, error) = refused_coding("/reflect?coding=echo").await;
    assert!(error.contains(REDACTED), "{error}");
    let text = everything(&result, &events);
    assert!(text.contains(&format!("came {REDACTED}-encoded")), "{text}");
    // Nor in any case: the coding was lower-cased before it was redacted.
    let lower = text.to_lowercase();
    assert!(!lower.contains(&TOKEN.to_lowercase()), "{text}");
    assert!(!lower.contains("t0ken-value"), "{text}");
}

#[tokio::test]
async fn a_refusal_cut_to_its_limit_keeps_no_start_of_a_secret() {
    // The destination a refusal names is cut at 512 bytes: pad the URL so
    // that the cut falls at every place inside the secret.
    let key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    let registry = registry(
        builder()
            .limits(quick_limits())
            .secret(Secret::new("AWS_KEY", key).unwrap()),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let head = "GET http://127.0.0.2:9/".len() + "?k=".len();
    let requests: Vec<Value> = (0..key.len())
        .map(|inside| {
            let pad = "a".repeat(512 - head - inside);
            request("127.0.0.2:9", &format!("/{pad}?k={key}"))
        })
        .collect();
    let (result, events) = probe(&registry, json!({ "requests": requests })).await;
    assert!(!result.is_error, "{}", result.output);
    let text = everything(&result, &events);
    assert_eq!(text.matches(" refused: ").count(), 2 * key.len(), "{text}");
    assert!(
        !text.contains(&key[..4]),
        "a secret's start survived the cut: {text}"
    );
    assert!(text.contains("[redacted secret AWS_KEY]"), "{text}");
}

#[tokio::test]
async fn a_compressed_response_from_an_injected_origin_fails_closed() {
    let (result, events, error) = refused_coding("/reflect?gzip=1").await;
    assert!(error.contains("gzip"), "{error}");
    assert!(
        result.logs.stderr.contains("came gzip-encoded"),
        "{}",
        result.logs.stderr
    );
    assert!(!everything(&result, &events).contains(TOKEN));
}

#[tokio::test]
async fn the_guest_header_is_replaced_and_other_destinations_get_nothing() {
    let server = Server::http("127.0.0.1").await;
    let other_port = Server::http("127.0.0.1").await;
    let other_host = Server::http("127.0.0.2").await;
    let origin = format!("http://{}", server.authority());
    let other = format!("http://{}", other_port.authority());
    let registry = registry(
        builder()
            .limits(quick_limits())
            .secret(token())
            .allow_net(grant(&origin))
            .allow_net(grant(&other))
            .allow_net(grant(&format!("http://{}", other_host.authority())))
            .allow_net(grant(&format!("https://{}", other_port.authority())))
            .component_inject(COMPONENT, bearer(&format!("{origin}/reflect")))
            // For https at the other server's address and port: its plain
            // http requests get nothing.
            .component_inject(
                COMPONENT,
                bearer(&format!("https://{}", other_port.authority())),
            ),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let mut own = request(&server.authority(), "/reflect");
    own["headers"] = json!([
        ["Authorization", "Bearer guest-own"],
        ["authorization", "x"]
    ]);
    let requests = json!([
        own,
        request(&server.authority(), "/hello"),
        request(&server.authority(), "/reflected"),
        request(&server.authority(), "/reflect/../hello"),
        request(&other_port.authority(), "/reflect"),
        request(&other_host.authority(), "/reflect"),
    ]);
    let (result, _) = probe(&registry, json!({ "requests": requests })).await;
    assert!(!result.is_error, "{}", result.output);
    let seen = server.seen();
    let authorizations: Vec<Vec<&str>> = seen
        .iter()
        .map(|s| {
            s.headers
                .iter()
                .filter(|(name, _)| name == "authorization")
                .map(|(_, value)| value.as_str())
                .collect()
        })
        .collect();
    let expected = format!("Bearer {TOKEN}");
    assert_eq!(
        authorizations,
        [vec![expected.as_str()], vec![], vec![], vec![],],
        "replaced, never added; nothing outside the prefix"
    );
    assert!(token_seen(&other_port).is_empty());
    assert!(token_seen(&other_host).is_empty());
    assert_eq!(other_port.seen().len(), 1);
    assert_eq!(other_host.seen().len(), 1);
}

#[tokio::test]
async fn injections_match_methods_and_names_over_https() {
    let ca = TestCa::new();
    let server = Server::https("127.0.0.1", &ca).await;
    let port = server.port();
    let resolver = |name: &str| -> std::io::Result<Vec<IpAddr>> {
        match name {
            "api.test" | "x.api.test" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            _ => Err(std::io::ErrorKind::NotFound.into()),
        }
    };
    let origin = format!("https://api.test:{port}");
    let registry = registry(
        builder()
            .limits(quick_limits())
            .ca_file(&ca.ca_file)
            .resolver(resolver)
            .allow_private("127.0.0.0/8".parse().unwrap())
            .secret(token())
            .allow_net(grant(&format!("https://*.api.test:{port}")))
            .allow_net(grant(&origin))
            .component_inject(COMPONENT, bearer(&origin).methods(["GET"]).unwrap()),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let https = |authority: &str, method: &str, headers: Value| {
        json!({ "scheme": "https", "authority": authority, "path": "/reflect",
                "method": method, "headers": headers })
    };
    let authority = format!("api.test:{port}");
    let requests = json!([
        https(&authority, "GET", json!([])),
        https(&authority, "POST", json!([])),
        https(&format!("x.api.test:{port}"), "GET", json!([])),
        // A header asking the server for another method defeats an
        // injection limited to methods.
        https(
            &authority,
            "GET",
            json!([["X-HTTP-Method-Override", "DELETE"]])
        ),
    ]);
    let (result, events) = probe(&registry, json!({ "requests": requests })).await;
    assert!(!result.is_error, "{}", result.output);
    let seen = server.seen();
    let carried: Vec<bool> = seen
        .iter()
        .map(|s| s.headers.iter().any(|(_, v)| v.contains(TOKEN)))
        .collect();
    assert_eq!(carried, [true, false, false, false], "{seen:?}");
    assert!(!everything(&result, &events).contains(TOKEN));
}

#[tokio::test]
async fn a_secret_the_tool_pieces_together_is_redacted_from_all_it_hands_on() {
    // A buggy server hands the credential back in two halves, neither of
    // which is the secret; the tool joins them and tries every way out.
    let (server, registry) = one_origin().await;
    let authority = server.authority();
    let half = "Bearer ".len() + TOKEN.len() / 2;
    let (result, events) = probe(
        &registry,
        json!({ "leak": true, "requests": [
            { "scheme": "http", "authority": authority, "path": format!("/part?from=0&to={half}") },
            { "scheme": "http", "authority": authority, "path": format!("/part?from={half}") },
        ] }),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    let text = everything(&result, &events);
    assert!(!text.contains(TOKEN), "{text}");
    assert_eq!(result.output, format!("output Bearer {REDACTED}"));
    let details = result.details.clone().unwrap();
    assert_eq!(details["leaked"], format!("Bearer {REDACTED}"));
    assert!(
        result
            .logs
            .stdout
            .contains(&format!("stdout Bearer {REDACTED}"))
    );
    assert!(
        result
            .logs
            .stderr
            .contains(&format!("stderr Bearer {REDACTED}"))
    );
    let messages: Vec<String> = events
        .iter()
        .map(|event| match event {
            GuestEvent::Log { message, .. } | GuestEvent::Progress { message, .. } => {
                message.clone()
            }
        })
        .collect();
    assert_eq!(
        messages,
        [
            format!("leaking Bearer {REDACTED}"),
            format!("leaking Bearer {REDACTED}")
        ]
    );
    // Output, details, the log line, the progress report, stdout, stderr.
    assert_eq!(result.net.redactions, 6);
}

#[tokio::test]
async fn rotated_secrets_take_effect_on_the_next_request() {
    let server = Server::http("127.0.0.1").await;
    let origin = format!("http://{}", server.authority());
    let secrets = Secrets::new();
    secrets.set(Secret::new("GITHUB_TOKEN", "first-value-1").unwrap());
    let registry = registry(
        builder()
            .limits(quick_limits())
            .secrets(secrets.clone())
            .allow_net(grant(&origin))
            .component_inject(COMPONENT, bearer(&origin)),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let call = json!({ "requests": [request(&server.authority(), "/hello")] });
    probe(&registry, call.clone()).await;
    secrets.set(Secret::new("GITHUB_TOKEN", "second-value-2").unwrap());
    probe(&registry, call.clone()).await;
    // A secret an injection needs, gone: its requests are refused.
    registry.secrets().replace([]);
    let (result, _) = probe(&registry, call).await;
    let report = &result.details.clone().unwrap()[0];
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("HttpRequestDenied"),
        "{report}"
    );
    assert!(
        result
            .logs
            .stderr
            .contains("needs the secret `GITHUB_TOKEN`, which is not set"),
        "{}",
        result.logs.stderr
    );
    let values: Vec<String> = server
        .seen()
        .iter()
        .flat_map(|s| s.headers.clone())
        .filter(|(name, _)| name == "authorization")
        .map(|(_, value)| value)
        .collect();
    assert_eq!(values, ["Bearer first-value-1", "Bearer second-value-2"]);
}

#[test]
fn a_bad_injection_or_setting_is_refused_when_the_registry_is_built() {
    let base = || Registry::builder().secret(token());
    let error = base()
        .component_inject("c", bearer("https://api.test"))
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("component `c`: secret injection for `https://api.test`: no network grant of the component allows it"),
        "{error}"
    );
    let error = base()
        .allow_net(grant("https://api.test"))
        .component_inject(
            "c",
            Injection::new("https://api.test", "x-key", "{{ secrets.OTHER }}").unwrap(),
        )
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("the secret `OTHER` is not set"), "{error}");
    // A grant limited to GET does not cover an injection for every method.
    let error = base()
        .allow_net(grant("https://api.test").methods(["GET"]).unwrap())
        .component_inject(
            "c",
            bearer("https://api.test/v1").methods(["POST"]).unwrap(),
        )
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("no network grant"), "{error}");
    // Raw sockets to the injection's host would read back unsearched.
    let error = base()
        .allow_net(grant("https://api.test"))
        .allow_net(grant("*://*.test:*"))
        .component_inject("c", bearer("https://api.test"))
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("raw sockets to api.test (`*://*.test:*`)"),
        "{error}"
    );
    assert!(
        base()
            .allow_net(grant("https://*.test/v1"))
            .component_inject("c", bearer("https://api.test/v1/repos"))
            .build()
            .is_ok()
    );
    let error = base()
        .component_setting("c", "token", "{{ secrets.GITHUB_TOKEN }}")
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("a secret cannot be a setting"), "{error}");
    assert!(!error.contains(TOKEN));
}

#[tokio::test]
async fn a_panic_in_the_sender_fails_the_request_and_shows_no_secret() {
    let server = Server::http("127.0.0.1").await;
    let panics = Arc::new(Mutex::new(String::new()));
    let previous = std::panic::take_hook();
    let recorded = panics.clone();
    std::panic::set_hook(Box::new(move |info| {
        recorded.lock().unwrap().push_str(&format!("{info}\n"));
        previous(info);
    }));
    let port = server.port();
    let registry = registry(
        builder()
            // Time enough on a loaded machine: the limit is not what this
            // tests.
            .limits(Limits {
                timeout: Duration::from_secs(20),
                ..quick_limits()
            })
            .resolver(|name: &str| -> std::io::Result<Vec<IpAddr>> {
                panic!("the test resolver fails on {name}")
            })
            .secret(token())
            .allow_net(grant(&format!("http://sender-panic.test:{port}")))
            .allow_net(grant(&format!("http://127.0.0.1:{port}")))
            .component_inject(COMPONENT, bearer(&format!("http://127.0.0.1:{port}"))),
        &[guests::FIXTURE_NETPROBE],
    )
    .await;
    let (result, events) = probe(
        &registry,
        json!({ "requests": [
            request(&format!("sender-panic.test:{port}"), "/reflect"),
            request(&server.authority(), "/reflect"),
        ] }),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.clone().unwrap();
    assert!(
        details[0]["error"]
            .as_str()
            .unwrap()
            .contains("InternalError"),
        "{details}"
    );
    assert!(
        details[1]["body"].as_str().unwrap().contains(REDACTED),
        "{details}"
    );
    assert!(
        result.logs.stderr.contains("sender panicked"),
        "{}",
        result.logs.stderr
    );
    let panics = panics.lock().unwrap().clone();
    assert!(
        panics.contains("the test resolver fails on sender-panic.test"),
        "{panics}"
    );
    assert!(!panics.contains(TOKEN) && !everything(&result, &events).contains(TOKEN));
}

#[test]
fn the_cli_shows_the_secret_nowhere() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(Server::http("127.0.0.1"));
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::copy(guests::FIXTURE_NETPROBE, tools.join("netprobe.wasm")).unwrap();
    let origin = format!("http://{}", server.authority());
    std::fs::write(
        dir.path().join("toolcage.toml"),
        format!(
            r#"
            tools = ["tools"]
            bundled = false

            [secrets.GITHUB_TOKEN]
            env = "TEST_GITHUB_TOKEN"

            [components.netprobe.network]
            allow = ["{origin}"]

            [[components.netprobe.network.inject]]
            url = "{origin}/reflect"
            header = "Authorization"
            value = "Bearer {{{{ secrets.GITHUB_TOKEN }}}}"
            "#
        ),
    )
    .unwrap();
    let arguments =
        json!({ "requests": [request(&server.authority(), "/reflect?header=1")] }).to_string();
    // A tool that holds the secret (a model passed it on) puts it in a URL:
    // one refused, logged at `warn`, and one granted, traced by toolcage's
    // sender and by wasi-http's bindings at `trace`.
    let in_query = format!("/hello?k={}", quoted(TOKEN));
    let refused = json!({ "requests": [request("127.0.0.2:9", &in_query)] }).to_string();
    let granted = json!({ "requests": [request(&server.authority(), &in_query)] }).to_string();
    let mut captured = Vec::new();
    for args in [
        vec![
            "--log-level",
            "trace",
            "--json",
            "call",
            "netprobe",
            &arguments,
        ],
        vec!["--log-level", "trace", "call", "netprobe", &arguments],
        vec![
            "--log-level",
            "warn",
            "--json",
            "call",
            "netprobe",
            &refused,
        ],
        vec!["--log-level", "trace", "call", "netprobe", &granted],
        vec!["--json", "list"],
        vec!["inspect", "netprobe"],
    ] {
        let output = toolcage()
            .args(&args)
            .env("TEST_GITHUB_TOKEN", TOKEN)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        captured.extend_from_slice(&output.stdout);
        captured.extend_from_slice(&output.stderr);
        if args.contains(&"--json") && args.contains(&arguments.as_str()) {
            let result: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(result["net"]["redactions"], 2, "{result}");
            let body = result["details"][0]["body"].as_str().unwrap();
            assert!(body.contains(&format!("Bearer {REDACTED}")), "{body}");
        }
    }
    let captured = String::from_utf8_lossy(&captured);
    assert!(captured.contains("toolcage::net"), "the trace log was on");
    let refusal = format!("GET http://127.0.0.2:9/hello?k={REDACTED} refused");
    assert!(
        captured.contains("WARN") && captured.contains(&refusal),
        "the refusal was logged, redacted: {captured}"
    );
    let traced = format!("GET http://{}/hello?k={REDACTED}", server.authority());
    assert!(
        captured.contains(&traced),
        "the granted request was traced, redacted: {captured}"
    );
    // Neither raw nor in the spelling the URL holds it in.
    assert!(!captured.contains(TOKEN), "the secret leaked: {captured}");
    assert!(
        !captured.contains(&quoted(TOKEN)),
        "the secret leaked: {captured}"
    );
    assert!(
        !captured.contains("T0ken-Value"),
        "the secret leaked: {captured}"
    );
    assert_eq!(token_seen(&server).len(), 2, "both calls carried it");

    // A secret that cannot be read: named, with where it was looked for,
    // and exit 2.
    let output = toolcage()
        .args(["list"])
        .env_remove("TEST_GITHUB_TOKEN")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "secret `GITHUB_TOKEN`: the environment variable TEST_GITHUB_TOKEN is not set"
        ),
        "{stderr}"
    );
}
