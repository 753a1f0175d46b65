//! What telemetry costs a call: the per-call figures of a `Runner` running
//! the trivial `constant` tool without telemetry, with a telemetry that
//! records nothing, and with spans and metrics on, exported over OTLP/HTTP
//! to a receiver on loopback (as `toolcage` sets it up from the OTEL_*
//! variables), in one process and one run.
//!
//! The three paths take turns over `ROUNDS` rounds, so that a noisy machine
//! weighs on each alike; each figure is the median over the rounds. The
//! targets of the observability issue are printed as ratios.
//!
//! Run with `cargo bench -p toolcage-tests --bench telemetry`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use toolcage::Registry;
use toolcage::agent::{Permissions, Runner, ToolCall};
use toolcage::telemetry::{EnvSettings, Telemetry};
use toolcage_tests::bench::{Figures, measure};
use toolcage_tests::guests;

const WARM_UP: usize = 500;
const CALLS: usize = 6_000;
const ROUNDS: usize = 3;

/// An OTLP/HTTP receiver on loopback that takes every export and answers
/// 200 with an empty body (an empty export response, in protobuf), counting
/// the bytes it received.
async fn receiver() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let received = Arc::new(AtomicU64::default());
    let counted = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let counted = counted.clone();
                    async move {
                        let body = request.into_body().collect().await.map(|b| b.to_bytes());
                        counted.fetch_add(body.map_or(0, |b| b.len() as u64), Ordering::Relaxed);
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(bytes::Bytes::new())))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await
                    .ok();
            });
        }
    });
    (addr, received)
}

/// Points the OTLP exporters at `addr`, as an operator would.
#[allow(unsafe_code)]
fn set_otel_variables(addr: std::net::SocketAddr) {
    // SAFETY: called before any thread of this process reads or writes the
    // environment (the exporters read it when built, after this).
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"));
        std::env::set_var("OTEL_METRIC_EXPORT_INTERVAL", "1000");
        std::env::remove_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
    }
}

fn main() {
    // The receiver runs on a runtime of its own, as a collector would run
    // in a process of its own.
    let collector = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let (addr, received) = collector.block_on(receiver());
    set_otel_variables(addr);
    let collector_thread = std::thread::spawn(move || {
        collector.block_on(std::future::pending::<()>());
    });
    drop(collector_thread);

    let tokio = toolcage_tests::bench::two_workers();
    let registry = Arc::new(tokio.block_on(async {
        let mut registry = Registry::builder().build().expect("a registry");
        let report = registry.load_file(guests::FIXTURE_LEFTOVERS).await;
        assert!(report.is_ok(), "{:?}", report.error);
        registry
    }));
    let on = Telemetry::from_env(EnvSettings::new())
        .expect("telemetry from the variables")
        .expect("the variables ask for it");
    // `cargo bench --bench telemetry -- OTLP` runs only the paths whose
    // label has that word (for a profiler), without the ratios; with it,
    // OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER=none leaves one out.
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    assert!(only.is_some() || (on.traces() && on.metrics()));
    let runner = |telemetry: Option<Telemetry>| {
        let mut runner = Runner::new(registry.clone()).permissions(Permissions::allow_all());
        if let Some(telemetry) = telemetry {
            runner = runner.telemetry(telemetry);
        }
        let runner = Arc::new(runner);
        move || {
            let runner = runner.clone();
            async move {
                let call = ToolCall::new("c", "constant", "{}");
                let result = runner.run([call]).await.remove(0);
                assert_eq!(result.output, "ok", "{:?}", result.error_kind);
            }
        }
    };
    let paths: [(&str, Option<Telemetry>); 3] = [
        ("Runner, no telemetry", None),
        (
            "Runner, telemetry recording nothing",
            Some(Telemetry::builder().build()),
        ),
        ("Runner, spans and metrics to OTLP", Some(on.clone())),
    ];
    // rounds[path][callers - 1][round]
    let mut rounds = vec![[Vec::new(), Vec::new()]; paths.len()];
    for _ in 0..ROUNDS {
        for (i, (label, telemetry)) in paths.iter().enumerate() {
            if only
                .as_ref()
                .is_some_and(|word| !label.contains(word.as_str()))
            {
                rounds[i][0].push(Figures::ZERO);
                rounds[i][1].push(Figures::ZERO);
                continue;
            }
            let call = runner(telemetry.clone());
            rounds[i][0].push(measure(&tokio, (WARM_UP, CALLS), 1, call.clone()));
            rounds[i][1].push(measure(&tokio, (WARM_UP, CALLS), 2, call));
        }
    }
    let median = |figures: &[Figures], of: fn(&Figures) -> f64| {
        let mut values: Vec<f64> = figures.iter().map(of).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!(
        "\n{:<40} {:>8} {:>9} {:>9} {:>12}   (median of {ROUNDS} rounds)",
        "path", "callers", "p50 µs", "p99 µs", "calls/s"
    );
    let mut p50 = vec![[0.0; 2]; paths.len()];
    let mut rate = vec![[0.0; 2]; paths.len()];
    for (i, (label, _)) in paths.iter().enumerate() {
        for callers in [1, 2] {
            let figures = &rounds[i][callers - 1];
            p50[i][callers - 1] = median(figures, |f| f.p50.as_secs_f64() * 1e6);
            rate[i][callers - 1] = median(figures, |f| f.per_second);
            println!(
                "{:<40} {:>8} {:>9.1} {:>9.1} {:>12.0}",
                label,
                callers,
                p50[i][callers - 1],
                median(figures, |f| f.p99.as_secs_f64() * 1e6),
                rate[i][callers - 1],
            );
        }
    }
    if let Err(e) = on.shutdown(Duration::from_secs(5)) {
        println!("telemetry: {e}");
    }
    println!(
        "\nthe receiver took {} KiB of OTLP exports; {} calls were left out (export queue full)",
        received.load(Ordering::Relaxed) / 1024,
        on.dropped_calls()
    );
    if only.is_some() {
        return;
    }
    println!("\ntargets (observability issue), as ratios in this run:");
    ratio(
        "p50 with spans and metrics / without, 1 caller",
        p50[2][0] / p50[0][0],
        "<= 1.1",
    );
    ratio(
        "p50 with spans and metrics / without, 2 callers",
        p50[2][1] / p50[0][1],
        "<= 1.1",
    );
    ratio(
        "p50 recording nothing / without, 1 caller",
        p50[1][0] / p50[0][0],
        "~ 1.0",
    );
    ratio(
        "calls/s with spans and metrics / without, 2 callers",
        rate[2][1] / rate[0][1],
        ">= 0.9",
    );
}

fn ratio(label: &str, value: f64, target: &str) {
    println!("  {label:<52} {value:>6.2}  (target {target})");
}
