//! A new user's first commands (issue 53): the release `toolcage` on an
//! empty compile cache (cold) against the same command once the cache is
//! filled (warm), in one run.
//!
//! Four commands, each a whole process:
//! - `toolcage call calc --arg expression=1+1`;
//! - `toolcage list`;
//! - `toolcage serve` over stdio, from its start to the answer of the first
//!   `tools/list` (after `initialize`);
//! - `toolcage call run_code '{"code": "1+1"}'` (code mode's interpreter).
//!
//! Each cold run has a cache directory of its own (`XDG_CACHE_HOME`, fresh
//! and empty); the warm runs share one the cold run filled. Medians of
//! `RUNS`, and the target `cold <= max(0.5 s, 20 x warm)` for each.
//!
//! Run with `cargo bench -p toolcage-tests --bench first_call`
//! (`TOOLCAGE_BENCH_BIN` compares another build).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use toolcage_tests::bench::release_binary;

const RUNS: usize = 5;

/// What a first session does, one command at a time.
#[derive(Clone, Copy)]
enum First {
    CallCalc,
    List,
    ServeToolsList,
    CallRunCode,
}

impl First {
    const ALL: [First; 4] = [
        First::CallCalc,
        First::List,
        First::ServeToolsList,
        First::CallRunCode,
    ];

    fn label(self) -> &'static str {
        match self {
            First::CallCalc => "call calc",
            First::List => "list",
            First::ServeToolsList => "serve, first tools/list",
            First::CallRunCode => "call run_code 1+1",
        }
    }

    /// The time of one run with `cache` as `XDG_CACHE_HOME`.
    fn time(self, bin: &Path, cache: &Path) -> Duration {
        let mut command = Command::new(bin);
        command
            .env("XDG_CACHE_HOME", cache)
            .env_remove("TOOLCAGE_NO_CACHE")
            .env_remove("RUST_LOG");
        match self {
            First::CallCalc => whole(command.args(["call", "calc", "--arg", "expression=1+1"])),
            First::List => whole(command.arg("list")),
            First::CallRunCode => whole(command.args(["call", "run_code", r#"{"code": "1+1"}"#])),
            First::ServeToolsList => first_tools_list(command.arg("serve")),
        }
    }
}

/// A command's time from its start to its successful end.
fn whole(command: &mut Command) -> Duration {
    let started = Instant::now();
    let output = command.output().expect("toolcage runs");
    let took = started.elapsed();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    took
}

/// `serve`'s time from its start to the answer of its first `tools/list`.
fn first_tools_list(command: &mut Command) -> Duration {
    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
    const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("toolcage serve starts");
    let mut input = child.stdin.take().expect("piped");
    let mut output = BufReader::new(child.stdout.take().expect("piped"));
    writeln!(input, "{INITIALIZE}\n{INITIALIZED}\n{LIST}").expect("serve reads");
    let took = loop {
        let mut line = String::new();
        assert!(
            output.read_line(&mut line).expect("serve answers") > 0,
            "serve ended before answering tools/list"
        );
        let message: serde_json::Value = serde_json::from_str(&line).expect("JSON-RPC");
        if message["id"] == 1 {
            assert!(
                message["result"]["tools"]
                    .as_array()
                    .is_some_and(|tools| !tools.is_empty()),
                "{message}"
            );
            break started.elapsed();
        }
    };
    drop(input);
    child.wait().expect("serve ends once its input does");
    took
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn fresh_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn main() {
    let bin: PathBuf = release_binary();
    println!("the release toolcage, {RUNS} runs each, medians");
    println!(
        "  {:<26} {:>10} {:>10} {:>8}  target cold <= max(0.5 s, 20 x warm)",
        "", "cold ms", "warm ms", "ratio"
    );
    let mut missed = 0;
    for first in First::ALL {
        let cold = median(
            (0..RUNS)
                .map(|_| first.time(&bin, fresh_dir().path()))
                .collect(),
        );
        let shared = fresh_dir();
        first.time(&bin, shared.path());
        let warm = median((0..RUNS).map(|_| first.time(&bin, shared.path())).collect());
        let bound = (warm * 20).max(Duration::from_millis(500));
        let met = cold <= bound;
        missed += usize::from(!met);
        println!(
            "  {:<26} {:>10.1} {:>10.1} {:>8.2}  {}",
            first.label(),
            cold.as_secs_f64() * 1e3,
            warm.as_secs_f64() * 1e3,
            cold.as_secs_f64() / warm.as_secs_f64(),
            if met { "met" } else { "MISSED" }
        );
    }
    println!("  targets missed: {missed} of {}", First::ALL.len());
}
