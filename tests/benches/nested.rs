//! What a nested call (a tool calling a tool) costs over a direct call of
//! the same tool, and what starting read-only calls together saves, in one
//! process and one run.
//!
//! - **Per nested call**: the `relay` fixture calling `echo` 10 times
//!   through the raw interface (no JSON work in the caller), less `relay`
//!   calling nothing, over 10; against a direct `Registry::call` of `echo`.
//!   With 1 and 2 concurrent callers. Target: at most the direct call's
//!   p50 + 15 µs. `compose` (which parses and re-serialises each result in
//!   the guest, as a real composing tool would) is shown beside it.
//! - **Together**: `compose` starting 4 calls of the read-only `crunch`
//!   (pure computation, a few milliseconds each) together, against the
//!   same 4 one after another. Target: at most 0.7× on 2 cores.
//!
//! Run with `cargo bench -p toolcage-tests --bench nested`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolcage::Registry;
use toolcage_tests::bench::{Figures, measure};
use toolcage_tests::guests;

const WARM_UP: usize = 200;
const CALLS: usize = 3_000;
const NESTED: usize = 10;
/// Rounds of `crunch`: a few milliseconds of computation.
const ROUNDS: u64 = 3_000_000;
const CRUNCHES: usize = 40;

fn compose(calls: usize, tool: &str, arguments: &Value, together: bool) -> Value {
    let calls: Vec<Value> = (0..calls)
        .map(|_| json!({ "tool": tool, "arguments": arguments }))
        .collect();
    json!({ "calls": calls, "together": together })
}

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let registry = Arc::new(tokio.block_on(async {
        let mut registry = Registry::builder()
            .component_calls("fixture_composer", "*")
            .build()
            .expect("a registry");
        for file in [guests::FIXTURE_COMPOSER, guests::FIXTURE_ECHO] {
            let report = registry.load_file(file).await;
            assert!(report.is_ok(), "{:?}", report.error);
        }
        registry
    }));
    let path = |tool: &'static str, arguments: Value| {
        let registry = registry.clone();
        let arguments = Arc::new(arguments);
        move || {
            let (registry, arguments) = (registry.clone(), arguments.clone());
            async move {
                let result = registry.call(tool, (*arguments).clone()).await;
                assert!(!result.is_error, "{}", result.output);
            }
        }
    };
    let echo = json!({ "text": "x" });
    println!(
        "\n{:<44} {:>8} {:>9} {:>9} {:>12}",
        "path", "callers", "p50 µs", "p99 µs", "calls/s"
    );
    let direct = run_both(&tokio, "direct echo", path("echo", echo.clone()));
    let relay = |times: usize| {
        let arguments = echo.to_string();
        json!({ "tool": "echo", "arguments": arguments, "times": times })
    };
    let relayed = [
        run_both(&tokio, "relay, no calls", path("relay", relay(0))),
        run_both(
            &tokio,
            "relay, 10 nested echo",
            path("relay", relay(NESTED)),
        ),
    ];
    let composed = [
        run_both(
            &tokio,
            "compose, no calls",
            path("compose", compose(0, "echo", &echo, false)),
        ),
        run_both(
            &tokio,
            "compose, 10 nested echo",
            path("compose", compose(NESTED, "echo", &echo, false)),
        ),
    ];
    println!("\ntargets (issue 35), as figures in this run:");
    for (callers, index) in [(1, 0), (2, 1)] {
        let direct = us(direct[index].p50);
        for (label, [empty, ten]) in [("relay", &relayed), ("compose", &composed)] {
            let per_nested = (us(ten[index].p50) - us(empty[index].p50)) / NESTED as f64;
            let target = if label == "relay" {
                "  (target <= +15)"
            } else {
                ""
            };
            println!(
                "  nested call p50 ({label}), {callers} caller(s): {per_nested:.1} µs; direct {direct:.1} µs; over direct {:+.1} µs{target}",
                per_nested - direct
            );
        }
    }
    let crunch = json!({ "rounds": ROUNDS });
    let one = |together| {
        let call = path("compose", compose(4, "crunch", &crunch, together));
        measure(&tokio, (2, CRUNCHES), 1, call)
    };
    let in_turn = one(false);
    let together = one(true);
    row("compose, 4 crunch one after another", 1, &in_turn);
    row("compose, 4 crunch together", 1, &together);
    println!(
        "  4 read-only calls together / one after another: {:.2}  (target <= 0.7)",
        us(together.p50) / us(in_turn.p50)
    );
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn run_both<F, Fut>(tokio: &tokio::runtime::Runtime, label: &str, call: F) -> [Figures; 2]
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send,
{
    let figures = [
        measure(tokio, (WARM_UP, CALLS), 1, call.clone()),
        measure(tokio, (WARM_UP, CALLS), 2, call),
    ];
    row(label, 1, &figures[0]);
    row(label, 2, &figures[1]);
    figures
}

fn row(label: &str, callers: usize, f: &Figures) {
    println!(
        "{:<44} {:>8} {:>9.1} {:>9.1} {:>12.0}",
        label,
        callers,
        us(f.p50),
        us(f.p99),
        f.per_second
    );
}
