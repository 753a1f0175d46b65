//! Start-up of a directory of 100 components: cold (every component
//! compiled, in parallel on all cores) and warm (from the disk compile
//! cache, as in every later process).
//!
//! The components are the `leftovers` fixture, each made distinct by a
//! custom section, so each is compiled on its own. Each start is a new
//! `Runtime` (empty in-memory cache) loading the directory into a new
//! registry. The target of issue 7 (warm at least 20× faster than cold) is
//! printed as a ratio.
//!
//! Run with `cargo bench -p toolcage-tests --bench startup`.

use std::path::Path;
use std::time::{Duration, Instant};

use toolcage::{Registry, Runtime};
use toolcage_tests::{guests, with_custom_section};

const COMPONENTS: usize = 100;
const WARM_RUNS: usize = 3;

fn main() {
    let tools = tempfile::tempdir().expect("a temporary directory");
    let cache = tempfile::tempdir().expect("a temporary directory");
    let bytes = std::fs::read(guests::FIXTURE_LEFTOVERS).expect("the fixture is built");
    for i in 0..COMPONENTS {
        let file = tools.path().join(format!("tool{i:03}.wasm"));
        std::fs::write(
            file,
            with_custom_section(bytes.clone(), "toolcage-bench", &i.to_le_bytes()),
        )
        .expect("write a component");
    }
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let cold = start(&tokio, tools.path(), cache.path());
    let warm = (0..WARM_RUNS)
        .map(|_| start(&tokio, tools.path(), cache.path()))
        .min()
        .expect("at least one run");
    println!(
        "{COMPONENTS} components, {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("  cold (compiled):          {:>9.1} ms", ms(cold));
    println!("  warm (disk cache), best:  {:>9.1} ms", ms(warm));
    println!(
        "  cold / warm: {:.1} (target >= 20)",
        cold.as_secs_f64() / warm.as_secs_f64()
    );
}

/// Loads the directory in a fresh runtime; every component must load.
fn start(tokio: &tokio::runtime::Runtime, tools: &Path, cache: &Path) -> Duration {
    tokio.block_on(async {
        let started = Instant::now();
        let runtime = Runtime::with_disk_cache(cache).expect("a runtime");
        let mut registry = Registry::builder()
            .runtime(&runtime)
            .build()
            .expect("a registry");
        let reports = registry.load_dir(tools).await.expect("the directory loads");
        let elapsed = started.elapsed();
        assert_eq!(reports.len(), COMPONENTS);
        for report in &reports {
            assert!(report.is_ok(), "{}: {:?}", report.source, report.error);
        }
        elapsed
    })
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
