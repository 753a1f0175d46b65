//! The Python and JavaScript example tools beside a Rust one, through the
//! library: component size, load time (cold: compiled; warm: from the disk
//! compile cache), and p50 per call and calls/s with one caller, the
//! component already loaded. The Rust tool is the `echo` fixture: a call
//! that does next to nothing, so its figure is the sandbox's own cost. The
//! rows `Python 0` and `JS 0` are calls that do next to nothing in each
//! interpreter (the probes' `py_env` and `js_env`).
//!
//! Then the same tools through the release `toolcage` CLI, one process per
//! call as an agent's shell would run them, with a warm disk cache: p50 of
//! a whole `toolcage call` (start, load the bundled tools and the tool's
//! directory, call, exit), beside `toolcage --version` (the process alone)
//! and a call of the bundled `calc`.
//!
//! Run with `cargo bench -p toolcage-tests --bench script_guests`.

use std::time::{Duration, Instant};

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use toolcage::{Registry, Runtime};
use toolcage_tests::{bench, guests};

const CALLS: usize = 200;
const CLI_CALLS: usize = 30;

fn main() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let csv = "region,sales\nnorth,10\nsouth,20\nnorth,5\n";
    let markdown = "# Title\n\nText\n\n## Part\n\n```\n# not a heading\n```\n";
    let cases: [(&str, &str, &str, Value); 5] = [
        (
            "Rust",
            guests::FIXTURE_ECHO,
            "echo",
            json!({ "text": "hello" }),
        ),
        (
            "Python",
            guests::CSV_SUMMARY,
            "csv_summary",
            json!({ "text": csv }),
        ),
        (
            "JavaScript",
            guests::MARKDOWN_OUTLINE,
            "markdown_outline",
            json!({ "text": markdown }),
        ),
        // A call that does next to nothing in each interpreter: its cost is
        // the sandbox's and entering the interpreter, and the difference to
        // the example is the example's own work.
        ("Python 0", guests::FIXTURE_PY_PROBE, "py_env", json!({})),
        ("JS 0", guests::FIXTURE_JS_PROBE, "js_env", json!({})),
    ];
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    println!(
        "{:<11} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "tool", "size MB", "cold s", "warm ms", "p50 ms", "calls/s"
    );
    for (language, path, tool, args) in cases {
        let size = std::fs::metadata(path).expect("built").len() as f64 / 1e6;
        let (cold, _) = tokio.block_on(load(path, cache.path()));
        let (warm, registry) = tokio.block_on(load(path, cache.path()));
        let (p50, per_second) = tokio.block_on(calls(&registry, tool, &args));
        println!(
            "{language:<11} {size:>9.1} {:>10.1} {:>10.1} {:>9.2} {per_second:>9.0}",
            cold.as_secs_f64(),
            warm.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e3,
        );
    }
    cli(csv, markdown);
}

/// p50 of warm `toolcage call` processes, each language's example in a
/// tools directory of its own.
fn cli(csv: &str, markdown: &str) {
    let toolcage = bench::release_binary();
    let cache = tempfile::tempdir().expect("a temporary directory");
    let data = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(data.path().join("table.csv"), csv).expect("write the table");
    let python = tools_dir(guests::CSV_SUMMARY);
    let javascript = tools_dir(guests::MARKDOWN_OUTLINE);
    let mount = format!("{}:/data", data.path().display());
    let csv_args = json!({ "path": "/data/table.csv" }).to_string();
    let markdown_args = json!({ "text": markdown }).to_string();
    let runs: [(&str, Vec<&str>); 4] = [
        ("toolcage --version", vec!["--version"]),
        (
            "call calc (bundled)",
            vec!["call", "calc", r#"{"expression":"1+2"}"#],
        ),
        (
            "call csv_summary (Python)",
            vec![
                "--tools",
                path_str(python.path()),
                "--mount",
                &mount,
                "call",
                "csv_summary",
                &csv_args,
            ],
        ),
        (
            "call markdown_outline (JavaScript)",
            vec![
                "--tools",
                path_str(javascript.path()),
                "call",
                "markdown_outline",
                &markdown_args,
            ],
        ),
    ];
    println!();
    println!("{:<36} {:>9} {:>9}", "CLI, warm cache", "p50 ms", "max ms");
    for (label, args) in runs {
        let run = || {
            let started = Instant::now();
            let output = Command::new(&toolcage)
                .args(&args)
                .env("XDG_CACHE_HOME", cache.path())
                .env_remove("TOOLCAGE_NO_CACHE")
                .output()
                .expect("toolcage runs");
            assert!(output.status.success(), "{label}: {output:?}");
            started.elapsed()
        };
        run(); // fills the cache
        let mut times: Vec<Duration> = (0..CLI_CALLS).map(|_| run()).collect();
        times.sort();
        println!(
            "{label:<36} {:>9.1} {:>9.1}",
            times[CLI_CALLS / 2].as_secs_f64() * 1e3,
            times[CLI_CALLS - 1].as_secs_f64() * 1e3,
        );
    }
}

/// A tools directory holding a copy of `component`.
fn tools_dir(component: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let name = Path::new(component).file_name().expect("a file name");
    std::fs::copy(component, dir.path().join(name)).expect("copy the component");
    dir
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// Loads `path` in a fresh runtime caching compiled code in `cache`.
async fn load(path: &str, cache: &std::path::Path) -> (Duration, Registry) {
    let started = Instant::now();
    let runtime = Runtime::with_disk_cache(cache).expect("a runtime");
    let mut registry = Registry::builder()
        .runtime(&runtime)
        .build()
        .expect("a registry");
    let report = registry.load_file(path).await;
    assert!(report.is_ok(), "{:?}", report.error);
    (started.elapsed(), registry)
}

/// p50 of `CALLS` calls one after another, and calls per second.
async fn calls(registry: &Registry, tool: &str, args: &Value) -> (Duration, f64) {
    let result = registry.call(tool, args.clone()).await;
    assert!(!result.is_error, "{}", result.output);
    let started = Instant::now();
    let mut times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let call = Instant::now();
        let result = registry.call(tool, args.clone()).await;
        times.push(call.elapsed());
        assert!(!result.is_error, "{}", result.output);
    }
    let per_second = CALLS as f64 / started.elapsed().as_secs_f64();
    times.sort();
    (times[CALLS / 2], per_second)
}
