//! A call's network budgets: requests, bytes each way, time, open
//! connections; and nothing left open when a call ends.

use super::*;

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
