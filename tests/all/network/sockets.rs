//! Raw sockets and name lookups: only where `tcp://` and `udp://` grants
//! allow, and lookups count against the request budget.

use super::*;

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
