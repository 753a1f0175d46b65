//! What toolcage's egress costs: a tool (the `netprobe` fixture) GETs a
//! 1 KiB and a 10 MiB response from a loopback HTTP server, through the
//! grant check, toolcage's sender and `wasi:http`, against a native client
//! (hyper, one fresh connection per request, like the tool's) doing the same
//! from the same process, in one run.
//!
//! - Per-request overhead at 1 KiB: one call makes `REQUESTS` requests, and
//!   the call's time less that of a call making one request, divided by the
//!   requests in between, is the tool's time per request. Target: at most
//!   200 µs above native.
//! - Throughput at 10 MiB: one call reads the body to its end (the guest
//!   keeps only its length). Target: at least 0.7 × native.
//! - Secrets at 10 MiB: the same read by a tool whose requests carry an
//!   injected secret, every byte of the response searched for it as it
//!   streams, against the same tool without secrets. Target: at most 1.2 ×
//!   the time.
//! - Memory: how much the process's resident set grows while a tool reads a
//!   128 MiB body (streamed, so far less than its size).
//!
//! Run with `cargo bench -p toolcage-tests --bench network`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;
use toolcage::{Grant, Injection, Limits, Registry, Runtime, Secret};
use toolcage_tests::guests;
use toolcage_tests::net::Server;

const REQUESTS: usize = 201;
const ROUNDS: usize = 15;
const BIG: usize = 10 << 20;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = Server::http("127.0.0.1").await;
    let authority = server.authority();
    let runtime = Runtime::new().unwrap();
    let mut registry = Registry::builder()
        .runtime(&runtime)
        .limits(Limits {
            net_requests: 1_000,
            net_bytes_in: 256 << 20,
            ..Limits::default()
        })
        .allow_net(Grant::parse(&format!("http://{authority}")).unwrap())
        .build()
        .unwrap();
    let report = registry.load_file(guests::FIXTURE_NETPROBE).await;
    assert!(report.is_ok(), "{:?}", report.error);
    // The same, with a secret injected into its requests and redacted from
    // its responses.
    let origin = format!("http://{authority}");
    let mut with_secrets = Registry::builder()
        .runtime(&runtime)
        .limits(Limits {
            net_requests: 1_000,
            net_bytes_in: 256 << 20,
            ..Limits::default()
        })
        .allow_net(Grant::parse(&origin).unwrap())
        .secret(Secret::new("API_TOKEN", "tc_live_0123456789abcdef").unwrap())
        .component_inject(
            "fixture_netprobe",
            Injection::new(&origin, "Authorization", "Bearer {{ secrets.API_TOKEN }}").unwrap(),
        )
        .build()
        .unwrap();
    let report = with_secrets.load_file(guests::FIXTURE_NETPROBE).await;
    assert!(report.is_ok(), "{:?}", report.error);

    let small = format!("/bytes/{}", 1 << 10);
    let big = format!("/bytes/{BIG}");
    let guest = |count: usize, path: &str| {
        let request = json!({ "scheme": "http", "authority": authority, "path": path,
                              "length_only": true });
        json!({ "requests": vec![request; count] })
    };
    let run = |arguments: serde_json::Value| {
        let registry = &registry;
        async move {
            let started = Instant::now();
            let result = registry.call("netprobe", arguments).await;
            assert!(!result.is_error, "{}", result.output);
            started.elapsed()
        }
    };

    // Warm up both paths.
    run(guest(20, &small)).await;
    native(&authority, &small, 20).await;

    let mut one = Vec::new();
    let mut many = Vec::new();
    let mut native_small = Vec::new();
    let mut guest_big = Vec::new();
    let mut native_big = Vec::new();
    let mut secret_big = Vec::new();
    let mut plain_big = Vec::new();
    timed(&with_secrets, guest(1, &big)).await;
    for _ in 0..ROUNDS {
        one.push(run(guest(1, &small)).await);
        many.push(run(guest(REQUESTS, &small)).await);
        native_small.push(native(&authority, &small, REQUESTS - 1).await);
        guest_big.push(run(guest(1, &big)).await);
        native_big.push(native(&authority, &big, 1).await);
        plain_big.push(timed(&registry, guest(1, &big)).await);
        secret_big.push(timed(&with_secrets, guest(1, &big)).await);
    }
    let per_request_guest =
        (median(&many).saturating_sub(median(&one))).as_secs_f64() / (REQUESTS - 1) as f64;
    let per_request_native = median(&native_small).as_secs_f64() / (REQUESTS - 1) as f64;
    let mib = BIG as f64 / f64::from(1 << 20);
    let guest_rate = mib / median(&guest_big).as_secs_f64();
    let native_rate = mib / median(&native_big).as_secs_f64();
    let overhead = (per_request_guest - per_request_native) * 1e6;
    println!("1 KiB GET, fresh connection each (median of {ROUNDS} rounds):");
    println!(
        "  native hyper     {:8.1} µs/request",
        per_request_native * 1e6
    );
    println!(
        "  toolcage tool    {:8.1} µs/request",
        per_request_guest * 1e6
    );
    println!(
        "  overhead         {overhead:8.1} µs/request (target ≤ 200): {}",
        if overhead <= 200.0 { "met" } else { "MISSED" }
    );
    println!("10 MiB GET (call includes instantiation):");
    println!("  native hyper     {native_rate:8.0} MiB/s");
    println!("  toolcage tool    {guest_rate:8.0} MiB/s");
    let ratio = guest_rate / native_rate;
    println!(
        "  ratio            {ratio:8.2} × native (target ≥ 0.7): {}",
        if ratio >= 0.7 { "met" } else { "MISSED" }
    );

    let secrets_ratio = median(&secret_big).as_secs_f64() / median(&plain_big).as_secs_f64();
    println!("10 MiB GET with a secret injected and the response redacted:");
    println!(
        "  without secrets  {:8.0} MiB/s",
        mib / median(&plain_big).as_secs_f64()
    );
    println!(
        "  with secrets     {:8.0} MiB/s",
        mib / median(&secret_big).as_secs_f64()
    );
    println!(
        "  ratio            {secrets_ratio:8.2} × the time without (target ≤ 1.2): {}",
        if secrets_ratio <= 1.2 {
            "met"
        } else {
            "MISSED"
        }
    );

    // Streamed, not buffered: a 128 MiB body moves the process's resident
    // memory by far less than its size.
    let huge = format!("/bytes/{}", 128 << 20);
    let before = rss_kib();
    run(guest(1, &huge)).await;
    let grown = rss_kib().saturating_sub(before);
    println!(
        "128 MiB GET: resident memory grew by {:.1} MiB ({:.3} of the body)",
        grown as f64 / 1024.0,
        grown as f64 / f64::from(128 << 10)
    );
}

/// How long a netprobe call with `arguments` took.
async fn timed(registry: &Registry, arguments: serde_json::Value) -> Duration {
    let started = Instant::now();
    let result = registry.call("netprobe", arguments).await;
    assert!(!result.is_error, "{}", result.output);
    started.elapsed()
}

/// The process's resident set, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `count` GETs of `path`, each on a fresh connection, reading every body
/// to its end: the time they took.
async fn native(authority: &str, path: &str, count: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..count {
        let stream = tokio::net::TcpStream::connect(authority).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = hyper::Request::get(path)
            .header(hyper::header::HOST, authority)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let mut body = response.into_body();
        let mut length = 0;
        while let Some(frame) = body.frame().await {
            length += frame.unwrap().data_ref().map_or(0, Bytes::len);
        }
        assert!(length > 0);
    }
    started.elapsed()
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}
