//! Memory across reloads: 1,000 cycles of a component whose content changes
//! every time (a custom section carrying the cycle number), each compiled,
//! described, swapped in and called once, through a `LiveRegistry` over a
//! directory. Prints RSS every 100 cycles and the last figure against the
//! one after warm-up (cycle 100): the target of issue 11 is within 10%.
//!
//! Run with `cargo bench -p toolcage-tests --bench reload`.

use std::time::Instant;

use toolcage::{ChangeKind, LiveRegistry, Registry, Runtime};
use toolcage_tests::{guests, with_custom_section};

const CYCLES: u32 = 1_000;
const EVERY: u32 = 100;

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tool.wasm");
    let bytes = std::fs::read(guests::FIXTURE_LEFTOVERS).expect("the fixture is built");
    let write = |n: u32| {
        let staging = dir.path().join(".tool.wasm.part");
        std::fs::write(
            &staging,
            with_custom_section(bytes.clone(), "cycle", &n.to_le_bytes()),
        )
        .expect("write");
        std::fs::rename(&staging, &path).expect("rename");
    };
    write(0);
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        let runtime = Runtime::new().expect("a runtime");
        let base = Registry::builder().runtime(&runtime).build().expect("a registry");
        let (live, reports) = LiveRegistry::load(base, [dir.path()]).await.expect("loads");
        assert!(reports[0].is_ok());
        let started = Instant::now();
        let mut warm = 0;
        println!("{CYCLES} reload cycles of a changing component");
        for n in 1..=CYCLES {
            write(n);
            let report = live.reload().await;
            assert!(
                report.changes.iter().all(|c| c.kind == ChangeKind::Replaced)
                    && report.changed(),
                "{report:?}"
            );
            let result = live
                .current()
                .call("constant", serde_json::json!({}))
                .await;
            assert!(!result.is_error, "{}", result.output);
            if n % EVERY == 0 {
                let rss = rss_kib();
                if n == EVERY {
                    warm = rss;
                }
                println!(
                    "  cycle {n:>5}: RSS {:>7.1} MiB, compiled components held: {}",
                    rss as f64 / 1024.0,
                    runtime.compiled_components()
                );
            }
        }
        let last = rss_kib();
        println!(
            "  {:.1} ms per cycle; RSS at the end / after warm-up (cycle {EVERY}): {:.3} (target <= 1.10)",
            started.elapsed().as_secs_f64() * 1e3 / f64::from(CYCLES),
            last as f64 / warm as f64
        );
    });
}

/// This process's resident set, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS")
}
