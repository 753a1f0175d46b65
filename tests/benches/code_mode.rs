//! Code mode: what running a model's script (`run_code`) costs, and what it
//! saves of the model's context, in one process and one run, on the bundled
//! toolset.
//!
//! - **Trivial script**: `run_code` of `1 + 1`, warm, with 1 and 2
//!   concurrent callers, beside a direct `Registry::call` of `calc`
//!   (`1 + 1`). Target: p50 at most 2 ms.
//! - **Per nested call**: a script awaiting `calc` 20 times in a loop, less
//!   the trivial script, over 20; against the direct call of `calc`.
//!   Target: at most the direct call's p50 + 50 µs. Measured in rounds that
//!   run the three one after another, so that a load drifting on the
//!   machine hits them alike; the table's separate runs (1 and 2 callers)
//!   give the same figure beside it, and the 20 calls in one
//!   `asyncio.gather` are shown too.
//! - **Chain**: 20 small text files mounted read-only at /workspace; glob
//!   them, read each, count lines and words, grep `needle`, summarise. Done
//!   directly (3 model turns: glob; the 20 reads as one parallel batch;
//!   grep) and as one `run_code` script (1 turn), both for real. Counts the
//!   bytes that reach the model: the definitions (Anthropic format), each
//!   call's name and JSON arguments (or the script), and each result's
//!   text `output`. Target: code mode at most 40% of direct's bytes. The
//!   same again over MCP 2026-07-28 (`McpServer` to rmcp's client in
//!   process): the definitions as `tools/list` gives them, and every text
//!   block of each result, as a client forwarding `content` shows them.
//!
//! Iterations are sized from a short probe so that each path takes a few
//! seconds; the whole run stays well under two minutes. Nothing here is
//! asserted on timings: the targets are printed, met or not. `CPU µs/call`
//! is the process's CPU time (every thread's) over a path's run, per call:
//! beside the wall time, it shows how much of the 2 cores one call keeps
//! busy.
//!
//! Run with `cargo bench -p toolcage-tests --bench code_mode`.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcage::agent::{self, Format, Permissions};
use toolcage::code_mode::{self, CodeMode, RUN_CODE};
use toolcage::mcp::McpServer;
use toolcage::{CallResult, Mount, Registry};
use toolcage_tests::bench::{Figures, measure};

#[path = "support/mcp_client.rs"]
mod mcp_client;

/// Each measured path's share of the run, roughly.
const BUDGET: Duration = Duration::from_secs(5);
/// Calls that warm a path up and time it, to size the measured run.
const PROBE: usize = 20;
/// Warm-up calls before each measured run (after the probe).
const WARM_UP: usize = 5;
const MIN_CALLS: usize = 40;
const MAX_CALLS: usize = 6_000;

/// Nested calls of the per-call script.
const NESTED: usize = 20;
const FILES: usize = 20;
const WORKSPACE: &str = "/workspace";

const TRIVIAL: &str = "1 + 1";

/// The chain, as a model would write it after reading `run_code`'s stubs.
const CHAIN: &str = r#"import asyncio
paths = (await glob(pattern="**/*.txt", path="/workspace"))["matches"]
reads = await asyncio.gather(*[read_file(path=p) for p in paths])
lines = 0
words = 0
for r in reads:
    text = r["output"]
    lines += len(text.splitlines())
    words += len(text.split())
found = await grep(pattern="needle", path="/workspace")
hits = sorted({m["path"].split("/")[-1] for m in found["matches"]})
{"files": len(paths), "lines": lines, "words": words, "needle_lines": found["match_count"], "needle_files": hits}"#;

fn sequential_calcs() -> String {
    format!("n = 0\nfor _ in range({NESTED}):\n    await calc(expression=\"1 + 1\")\n    n += 1\nn")
}

fn gathered_calcs() -> String {
    format!(
        "import asyncio\nrs = await asyncio.gather(*[calc(expression=\"1 + 1\") for _ in range({NESTED})])\nlen(rs)"
    )
}

/// Figures of one path with one number of callers, with the p90 and the
/// process's CPU time per call too.
#[derive(Clone, Copy)]
struct Row {
    figures: Figures,
    p90: Duration,
    cpu: Duration,
}

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let load = load_average();
    let tree = tempfile::tempdir().expect("a temporary directory");
    let expected = write_tree(tree.path());
    // As shipped: code mode on, scripts may call every tool (`*`).
    let registry = Arc::new(tokio.block_on(bundled(tree.path(), CodeMode::default())));
    // Scripts limited to the chain's tools, so that `run_code` shows the
    // same three tools the direct path is given.
    let three = ["glob", "read_file", "grep"];
    let narrowed = Arc::new(tokio.block_on(bundled(tree.path(), CodeMode::default().tools(three))));

    let call = |tool: &'static str, arguments: Value| {
        let registry = registry.clone();
        let arguments = Arc::new(arguments.to_string());
        move || {
            let (registry, arguments) = (registry.clone(), arguments.clone());
            async move {
                let result = registry.call(tool, arguments.as_str()).await;
                assert!(!result.is_error, "{tool}: {}", result.output);
            }
        }
    };
    let script = |code: String| call(RUN_CODE, json!({ "code": code }));

    println!(
        "\n{:<50} {:>7} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "path", "callers", "p50 µs", "p90 µs", "p99 µs", "calls/s", "CPU µs/call"
    );
    let calc = run_both(
        &tokio,
        "direct calc `1 + 1`",
        call("calc", json!({ "expression": "1 + 1" })),
    );
    let trivial = run_both(&tokio, "run_code `1 + 1`", script(TRIVIAL.into()));
    let looped = run_both(
        &tokio,
        "run_code, 20 awaited calc in a loop",
        script(sequential_calcs()),
    );
    let gathered = run_one(
        &tokio,
        "run_code, 20 calc in one asyncio.gather",
        script(gathered_calcs()),
    );
    let [paired_calc, paired_trivial, paired_looped] = interleaved(
        &tokio,
        [
            call("calc", json!({ "expression": "1 + 1" })),
            script(TRIVIAL.into()),
            script(sequential_calcs()),
        ],
    );

    // The chain, each way (`chain_bytes` checks both against the files).
    let direct_chain = {
        let registry = registry.clone();
        move || {
            let registry = registry.clone();
            async move {
                direct(&registry).await;
            }
        }
    };
    let chain_direct = run_one(
        &tokio,
        "chain, direct (glob; 20 read_file together; grep)",
        direct_chain,
    );
    let chain_code = run_one(&tokio, "chain, one run_code script", script(CHAIN.into()));

    println!("\ntargets (code mode), as figures in this run:");
    let run_code_p50 = us(trivial[0].figures.p50);
    let calc_p50 = us(calc[0].figures.p50);
    println!(
        "  run_code `1 + 1` warm, 1 caller: p50 {run_code_p50:.1} µs, p90 {:.1} µs  (target p50 <= 2000 µs: {})",
        us(trivial[0].p90),
        met(run_code_p50 <= 2000.0)
    );
    println!(
        "  run_code `1 + 1` / direct calc, p50, 1 caller: {:.2}x  ({run_code_p50:.1} / {calc_p50:.1} µs)",
        run_code_p50 / calc_p50
    );
    println!(
        "  run_code `1 + 1` calls/s, 2 callers / 1 caller: {:.2}  ({:.0} / {:.0})",
        trivial[1].figures.per_second / trivial[0].figures.per_second,
        trivial[1].figures.per_second,
        trivial[0].figures.per_second
    );
    let per_nested = (us(paired_looped) - us(paired_trivial)) / NESTED as f64;
    let over = per_nested - us(paired_calc);
    println!(
        "  nested calc from a script, 1 caller, interleaved rounds: (p50 {:.1} µs of 20 calc - p50 {:.1} µs of `1 + 1`) / 20 = {per_nested:.1} µs; direct calc p50 {:.1} µs; over direct {over:+.1} µs  (target <= +50 µs: {})",
        us(paired_looped),
        us(paired_trivial),
        us(paired_calc),
        met(over <= 50.0)
    );
    for (callers, index) in [(1, 0), (2, 1)] {
        let direct = us(calc[index].figures.p50);
        let per_nested =
            (us(looped[index].figures.p50) - us(trivial[index].figures.p50)) / NESTED as f64;
        println!(
            "  (the same from the table's separate runs, {callers} caller(s): {per_nested:.1} µs; direct calc {direct:.1} µs; over direct {:+.1} µs)",
            per_nested - direct
        );
    }
    let per_gathered = (us(gathered.figures.p50) - us(trivial[0].figures.p50)) / NESTED as f64;
    println!(
        "  (20 calc in one asyncio.gather, 1 caller: {per_gathered:.1} µs per call, wall time over the trivial script)"
    );

    chain_bytes(&tokio, &registry, &narrowed, &expected);
    tokio.block_on(mcp_chain_bytes(&registry, &narrowed));
    println!(
        "  chain wall time p50: direct {:.1} µs (3 phases), run_code {:.1} µs (1 call): {:.2}x",
        us(chain_direct.figures.p50),
        us(chain_code.figures.p50),
        us(chain_code.figures.p50) / us(chain_direct.figures.p50)
    );
    println!(
        "\nload average (1, 5, 15 min) at the start: {load}; at the end: {}",
        load_average()
    );
}

/// The machine's load averages: another build running beside the bench
/// shows here.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// The p50 of each of `paths`, measured in rounds that run each once, one
/// after another, so that the three see the same load on the machine (a
/// difference of their p50s is then sound even when the load drifts).
fn interleaved<F, Fut>(tokio: &tokio::runtime::Runtime, paths: [F; 3]) -> [Duration; 3]
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let times: Arc<Mutex<[Vec<Duration>; 3]>> = Arc::default();
    let paths = Arc::new(paths);
    let round = {
        let times = times.clone();
        move || {
            let (paths, times) = (paths.clone(), times.clone());
            async move {
                for (index, path) in paths.iter().enumerate() {
                    let began = Instant::now();
                    path().await;
                    times.lock().expect("the times")[index].push(began.elapsed());
                }
            }
        }
    };
    let rounds = sized(tokio, round.clone());
    times
        .lock()
        .expect("the times")
        .iter_mut()
        .for_each(Vec::clear);
    measure(tokio, (WARM_UP, rounds), 1, round);
    let times = times.lock().expect("the times").clone();
    times.map(|mut times| {
        let mut times = times.split_off(WARM_UP);
        times.sort();
        times[times.len() / 2]
    })
}

/// A registry of the bundled tools, `tree` lent read-only at /workspace.
async fn bundled(tree: &Path, code_mode: CodeMode) -> Registry {
    let mut registry = toolcage_tests::builder()
        .mount(Mount::read_only(tree, WORKSPACE))
        .code_mode(code_mode)
        .build()
        .expect("a registry");
    for report in registry.load_bundled().await {
        toolcage_tests::assert_loaded(&report);
    }
    assert!(registry.tool(RUN_CODE).is_some(), "code mode is on");
    registry
}

/// What the chain's summary must say.
fn write_tree(root: &Path) -> Value {
    const WORDS: [&str; 16] = [
        "alpha", "beta", "gamma", "delta", "sandbox", "tool", "call", "result", "model", "script",
        "registry", "mount", "policy", "limit", "fuel", "memory",
    ];
    const DIRS: [&str; 4] = ["", "notes/", "notes/old/", "src/"];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as usize
    };
    let (mut lines, mut words, mut needle_lines) = (0, 0, 0);
    let mut needle_files = Vec::new();
    for file in 0..FILES {
        let name = format!("file_{file:02}.txt");
        let dir = root.join(DIRS[file % DIRS.len()]);
        std::fs::create_dir_all(&dir).expect("a subdirectory");
        let mut text = String::new();
        let mut has_needle = false;
        for line in 0..8 {
            let mut chosen: Vec<&str> = (0..5 + next() % 5)
                .map(|_| WORDS[next() % WORDS.len()])
                .collect();
            if (file * 8 + line) % 23 == 5 {
                chosen.insert(next() % chosen.len(), "needle");
                needle_lines += 1;
                has_needle = true;
            }
            words += chosen.len();
            lines += 1;
            text.push_str(&chosen.join(" "));
            text.push('\n');
        }
        if has_needle {
            needle_files.push(name.clone());
        }
        std::fs::write(dir.join(&name), text).expect("a file of the tree");
    }
    needle_files.sort();
    json!({
        "files": FILES,
        "lines": lines,
        "words": words,
        "needle_lines": needle_lines,
        "needle_files": needle_files,
    })
}

/// One call a model made and what it read back.
struct Exchange {
    tool: &'static str,
    arguments: String,
    result: CallResult,
}

impl Exchange {
    /// The bytes of the call (name and JSON arguments) and of its result.
    fn bytes(&self) -> (usize, usize) {
        (
            self.tool.len() + self.arguments.len(),
            self.result.output.len(),
        )
    }
}

async fn exchange(registry: &Registry, tool: &'static str, arguments: Value) -> Exchange {
    let arguments = arguments.to_string();
    let result = registry.call(tool, arguments.as_str()).await;
    assert!(!result.is_error, "{tool}: {}", result.output);
    Exchange {
        tool,
        arguments,
        result,
    }
}

/// The chain as direct calls, one model turn per phase: glob; the reads
/// together (one task each, as `agent::Runner` runs a batch); grep.
async fn direct(registry: &Arc<Registry>) -> [Vec<Exchange>; 3] {
    let glob = exchange(
        registry,
        "glob",
        json!({ "pattern": "**/*.txt", "path": WORKSPACE }),
    )
    .await;
    let details = glob.result.details.as_ref().expect("glob's details");
    let paths: Vec<String> =
        serde_json::from_value(details["matches"].clone()).expect("glob's matches");
    assert_eq!(paths.len(), FILES, "{}", glob.result.output);
    let reads = futures::future::join_all(paths.into_iter().map(|path| {
        let registry = registry.clone();
        tokio::spawn(async move { exchange(&registry, "read_file", json!({ "path": path })).await })
    }))
    .await
    .into_iter()
    .map(|read| read.expect("a read finished"))
    .collect();
    let grep = exchange(
        registry,
        "grep",
        json!({ "pattern": "needle", "path": WORKSPACE }),
    )
    .await;
    [vec![glob], reads, vec![grep]]
}

/// The bytes of a JSON array of tool definitions, and its tools' names.
fn definitions_bytes(definitions: &[Value]) -> (usize, String) {
    let bytes = definitions.iter().map(|d| d.to_string().len()).sum();
    let names: Vec<&str> = definitions
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    (bytes, names.join(", "))
}

fn anthropic(registry: &Registry, keep: impl Fn(&str) -> bool) -> Vec<Value> {
    let Value::Array(all) =
        agent::definitions(registry, &Permissions::allow_all(), Format::Anthropic)
    else {
        panic!("definitions are an array");
    };
    all.into_iter()
        .filter(|d| keep(d["name"].as_str().unwrap_or_default()))
        .collect()
}

/// The chain's bytes each way, for real, and the target.
fn chain_bytes(
    tokio: &tokio::runtime::Runtime,
    registry: &Arc<Registry>,
    narrowed: &Registry,
    expected: &Value,
) {
    let turns = tokio.block_on(direct(registry));
    let grep = &turns[2][0].result;
    assert_eq!(
        grep.details.as_ref().map(|d| d["match_count"].clone()),
        Some(expected["needle_lines"].clone()),
        "{}",
        grep.output
    );
    let file_bytes: usize = turns[1].iter().map(|read| read.result.output.len()).sum();
    let sum = |turn: &[Exchange]| {
        turn.iter()
            .map(Exchange::bytes)
            .fold((0, 0), |(c, r), (dc, dr)| (c + dc, r + dr))
    };
    let direct_turns: Vec<(usize, usize)> = turns.iter().map(|turn| sum(turn)).collect();

    let script = json!({ "code": CHAIN }).to_string();
    let run = tokio.block_on(registry.call(RUN_CODE, script.as_str()));
    assert!(!run.is_error, "the chain's script failed: {}", run.output);
    let result = run.details.as_ref().map(|d| d["result"].clone());
    assert_eq!(result.as_ref(), Some(expected), "{}", run.output);
    let calls = run
        .details
        .as_ref()
        .and_then(|d| d["calls"].as_array().map(Vec::len));
    assert_eq!(calls, Some(FILES + 2), "one glob, 20 reads, one grep");
    let code_call = RUN_CODE.len() + script.len();
    let code_result = run.output.len();

    let used = |name: &str| ["glob", "read_file", "grep"].contains(&name);
    let is_code_mode = |name: &str| {
        registry
            .tool(name)
            .is_some_and(code_mode::is_code_mode_tool)
    };
    let direct_used = definitions_bytes(&anthropic(registry, used));
    let direct_all = definitions_bytes(&anthropic(registry, |name| !is_code_mode(name)));
    let code_narrowed = definitions_bytes(&anthropic(narrowed, |name| name == RUN_CODE));
    let code_shipped = definitions_bytes(&anthropic(registry, |name| name == RUN_CODE));
    let helpers = definitions_bytes(&anthropic(registry, |name| {
        is_code_mode(name) && name != RUN_CODE
    }));
    let callable = code_mode::callable(registry, &Permissions::allow_all()).len();
    let shipped_lists_stubs =
        code_mode::run_code_description(registry, &Permissions::allow_all()).contains("```python");

    let direct_calls: usize = direct_turns.iter().map(|t| t.0).sum();
    let direct_results: usize = direct_turns.iter().map(|t| t.1).sum();
    let direct_total = direct_used.0 + direct_calls + direct_results;
    let code_total = code_narrowed.0 + code_call + code_result;

    println!(
        "\nchain: glob **/*.txt → read each → count lines and words → grep needle → summary\n  \
         {FILES} files, {file_bytes} bytes in all; bytes that reach the model (definitions in Anthropic format, compact JSON):"
    );
    println!("  {:<58} {:>9} {:>9}", "", "direct", "code mode");
    println!(
        "  {:<58} {:>9} {:>9}",
        "definitions: the 3 tools used / run_code showing them", direct_used.0, code_narrowed.0
    );
    for (label, (calls, results)) in ["glob", "20 × read_file (one batch)", "grep"]
        .iter()
        .zip(&direct_turns)
    {
        println!(
            "  {:<58} {:>9} {:>9}",
            format!("turn: {label}, calls / results"),
            format!("{calls}/{results}"),
            ""
        );
    }
    println!(
        "  {:<58} {:>9} {:>9}",
        "calls: names + JSON arguments / run_code + its script", direct_calls, code_call
    );
    println!(
        "  {:<58} {:>9} {:>9}",
        "results: each `output` / run_code's output", direct_results, code_result
    );
    println!("  {:<58} {:>9} {:>9}", "total", direct_total, code_total);
    println!("  {:<58} {:>9} {:>9}", "model turns with tool calls", 3, 1);
    let ratio = code_total as f64 / direct_total as f64;
    println!(
        "  code mode / direct bytes: {:.1}%  (target <= 40%: {}); 1 turn instead of 3",
        ratio * 100.0,
        met(ratio <= 0.4)
    );
    // Each byte of the files adds one to direct's results; code mode's
    // output does not grow with them.
    let needed = (code_total as f64 / 0.4) as usize - (direct_total - file_bytes);
    println!(
        "  (40% would be reached with about {needed} bytes of files, {} per file; these hold {file_bytes}, {} per file)",
        needed / FILES,
        file_bytes / FILES
    );
    // Each model request re-reads the context so far: the definitions, then
    // every call and result before it, up to the request that answers.
    let mut reread = 0;
    let mut context = direct_used.0;
    for (calls, results) in &direct_turns {
        reread += context;
        context += calls + results;
    }
    reread += context;
    let code_reread = code_narrowed.0 + code_total;
    println!(
        "  (context read summed over the model's requests, answer included: direct {reread} in 4 requests, code mode {code_reread} in 2: {:.1}%)",
        code_reread as f64 / reread as f64 * 100.0
    );
    println!("  run_code's output: {}", run.output.trim_end());

    let shown = if shipped_lists_stubs {
        "stubs"
    } else {
        "one line each"
    };
    println!(
        "\n  whole catalog: direct shows every tool but code mode's ({}): {} bytes; \
         run_code as shipped (`*`, {callable} callable tools, listed as {shown}): {} bytes",
        direct_all.1, direct_all.0, code_shipped.0
    );
    let direct_whole = direct_all.0 + direct_calls + direct_results;
    let code_whole = code_shipped.0 + code_call + code_result;
    println!(
        "  whole catalog totals: direct {direct_whole}, code mode {code_whole}: {:.1}%  (target <= 40%: {})",
        code_whole as f64 / direct_whole as f64 * 100.0,
        met(code_whole as f64 <= 0.4 * direct_whole as f64)
    );
    println!(
        "  (listing {} too, as `serve --code-mode-only` does, adds {} bytes to code mode)",
        helpers.1, helpers.0
    );
}

/// The chain over MCP (2026-07-28, through `McpServer`): the bytes a model
/// reads when its client forwards every text block of each result, beside
/// the definitions `tools/list` gives and the calls, each way.
async fn mcp_chain_bytes(registry: &Arc<Registry>, narrowed: &Arc<Registry>) {
    let allow = || Permissions::allow_all();
    let direct = mcp_client::connect(&McpServer::new(registry.clone()).permissions(allow())).await;
    let code = mcp_client::connect(&McpServer::new(narrowed.clone()).permissions(allow())).await;
    let definitions = |tools: Vec<rmcp::model::Tool>, keep: &[&str]| -> usize {
        tools
            .iter()
            .filter(|tool| keep.contains(&tool.name.as_ref()))
            .map(|tool| serde_json::to_string(tool).map_or(0, |text| text.len()))
            .sum()
    };
    let direct_tools = direct.peer().list_all_tools().await.expect("tools/list");
    let code_tools = code.peer().list_all_tools().await.expect("tools/list");
    let direct_definitions = definitions(direct_tools, &["glob", "read_file", "grep"]);
    let code_definitions = definitions(code_tools, &[RUN_CODE]);

    let mut calls = 0;
    let mut read = 0;
    let mut exchange = async |tool: &str, arguments: Value| {
        calls += tool.len() + arguments.to_string().len();
        let result = mcp_client::call(&direct, tool, arguments).await;
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
        read += mcp_client::text_bytes(&result);
        result
    };
    let glob = exchange("glob", json!({ "pattern": "**/*.txt", "path": WORKSPACE })).await;
    let matches = glob.structured_content.expect("glob's details")["matches"].clone();
    let paths: Vec<String> = serde_json::from_value(matches).expect("glob's matches");
    for path in paths {
        exchange("read_file", json!({ "path": path })).await;
    }
    exchange("grep", json!({ "pattern": "needle", "path": WORKSPACE })).await;
    let direct_total = direct_definitions + calls + read;

    let script = json!({ "code": CHAIN });
    let code_call = RUN_CODE.len() + script.to_string().len();
    let run = mcp_client::call(&code, RUN_CODE, script).await;
    assert_ne!(run.is_error, Some(true), "{run:?}");
    let code_read = mcp_client::text_bytes(&run);
    let code_total = code_definitions + code_call + code_read;
    println!(
        "
  over MCP 2026-07-28 (definitions from tools/list, every text block of each result):"
    );
    println!("  {:<58} {:>9} {:>9}", "", "direct", "code mode");
    println!(
        "  {:<58} {:>9} {:>9}",
        "definitions", direct_definitions, code_definitions
    );
    println!("  {:<58} {:>9} {:>9}", "calls", calls, code_call);
    println!("  {:<58} {:>9} {:>9}", "text blocks read", read, code_read);
    println!("  {:<58} {:>9} {:>9}", "total", direct_total, code_total);
    let ratio = code_total as f64 / direct_total as f64;
    println!(
        "  code mode / direct bytes over MCP: {:.1}%  (target <= 40%: {})",
        ratio * 100.0,
        met(ratio <= 0.4)
    );
}

fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "NOT met" }
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// How many calls fill [`BUDGET`] at the rate of a probe (which warms the
/// path up too).
fn sized<F, Fut>(tokio: &tokio::runtime::Runtime, call: F) -> usize
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let probe = measure(tokio, (WARM_UP, PROBE), 1, call);
    ((BUDGET.as_secs_f64() * probe.per_second) as usize).clamp(MIN_CALLS, MAX_CALLS)
}

/// [`measure`], keeping each measured call's time for the p90.
fn measured<F, Fut>(tokio: &tokio::runtime::Runtime, calls: usize, callers: usize, call: F) -> Row
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let times = Arc::new(Mutex::new(Vec::with_capacity(WARM_UP + calls)));
    let timed = {
        let times = times.clone();
        move || {
            let (times, call) = (times.clone(), call());
            async move {
                let began = Instant::now();
                call.await;
                times.lock().expect("the times").push(began.elapsed());
            }
        }
    };
    let cpu = cpu_time();
    let figures = measure(tokio, (WARM_UP, calls), callers, timed);
    let cpu = cpu_time() - cpu;
    // The warm-up runs first, on one caller: its calls come first.
    let mut times = times.lock().expect("the times").split_off(WARM_UP);
    let made = times.len() + WARM_UP;
    times.sort();
    Row {
        figures,
        p90: times[times.len() * 9 / 10],
        cpu: cpu / made as u32,
    }
}

/// The CPU time this process has used, every thread's, user and system.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given, zeroed here.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn run_one<F, Fut>(tokio: &tokio::runtime::Runtime, label: &str, call: F) -> Row
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let calls = sized(tokio, call.clone());
    let row = measured(tokio, calls, 1, call);
    print_row(label, 1, &row);
    row
}

fn run_both<F, Fut>(tokio: &tokio::runtime::Runtime, label: &str, call: F) -> [Row; 2]
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let calls = sized(tokio, call.clone());
    let rows = [
        measured(tokio, calls, 1, call.clone()),
        measured(tokio, calls, 2, call),
    ];
    print_row(label, 1, &rows[0]);
    print_row(label, 2, &rows[1]);
    rows
}

fn print_row(label: &str, callers: usize, row: &Row) {
    let f = &row.figures;
    println!(
        "{:<50} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.0} {:>11.1}",
        label,
        callers,
        us(f.p50),
        us(row.p90),
        us(f.p99),
        f.per_second,
        us(row.cpu)
    );
}
