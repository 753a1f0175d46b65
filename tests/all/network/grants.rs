//! HTTP grants: nothing is reachable without one, refusals are noted (and
//! bounded), a granted request goes out with the URL's host, and a grant
//! matches its scheme, host, port, path and methods exactly; redirects are
//! not followed, concurrent calls share nothing, and the bundled fetch tool
//! says what is not granted.

use super::*;

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
