//! The per-call tax: how fast a fresh sandbox is made, called and torn
//! down, through toolcage's `Registry::call` and through bare wasmtime (its
//! default allocator, and its pooling allocator tuned to keep slots resident
//! and reset them in place), in one process and one run, on the same trivial
//! component (the `constant` tool of the `leftovers` fixture).
//!
//! Each path runs 6,000 calls after a warm-up, with 1 caller and then with
//! 2 concurrent callers, and reports p50 and p99 per call and calls/s. The
//! bare paths instantiate from an `InstancePre` into a fresh `Store` with an
//! empty WASI context and call the tool: the least a fresh instance per call
//! costs. The paths take turns over several rounds, and the targets
//! (issue 34) are printed as ratios, round by round and as medians.
//!
//! Run with `cargo bench -p toolcage-tests --bench calls`.

use std::future::Future;
use std::sync::Arc;

use toolcage::Registry;
use toolcage_tests::bench::{Figures, measure};
use toolcage_tests::guests;

const WARM_UP: usize = 500;
/// Calls per measurement; `TOOLCAGE_BENCH_CALLS` sets more, for a profiler.
fn calls() -> usize {
    std::env::var("TOOLCAGE_BENCH_CALLS")
        .ok()
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(6_000)
}

/// Bare wasmtime, bound to the same WIT world as toolcage.
mod bare {
    use toolcage_tests::guests;
    use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
    use wasmtime::{
        Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
    };
    use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

    wasmtime::component::bindgen!({
        world: "toolset",
        path: "../wit",
        exports: { default: async },
    });

    struct State {
        wasi: WasiCtx,
        table: ResourceTable,
    }

    impl WasiView for State {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView {
                ctx: &mut self.wasi,
                table: &mut self.table,
            }
        }
    }

    impl self::toolcage::tool::host::Host for State {
        fn log(&mut self, _: self::toolcage::tool::host::Level, _: String) {}
        fn progress(&mut self, _: String, _: Option<f32>) {}
    }

    /// No calls to other tools (the tool measured makes none).
    impl self::toolcage::tool::tools::Host for State {
        fn call(&mut self, name: String, _: String) -> self::toolcage::tool::tools::CallResult {
            self::toolcage::tool::tools::CallResult {
                call_id: String::new(),
                is_error: true,
                error_kind: Some("permission_denied".into()),
                output: format!("`{name}` may not be called here"),
                details: None,
            }
        }

        fn call_all(
            &mut self,
            requests: Vec<self::toolcage::tool::tools::Request>,
        ) -> Vec<self::toolcage::tool::tools::CallResult> {
            requests
                .into_iter()
                .map(|request| self.call(request.name, request.arguments))
                .collect()
        }

        fn callable(&mut self) -> Vec<self::toolcage::tool::tools::Entry> {
            Vec::new()
        }

        fn callable_identified(&mut self) -> Vec<self::toolcage::tool::tools::Identified> {
            Vec::new()
        }
    }

    /// No sessions, as for any tool but code mode's.
    impl self::toolcage::tool::session::Host for State {
        fn load(&mut self, _: String) -> Result<Option<Vec<u8>>, String> {
            Ok(None)
        }
        fn save(&mut self, _: String, _: Vec<u8>) -> Result<(), String> {
            Err("no sessions".into())
        }
    }

    /// No settings, as toolcage's default.
    impl self::wasi::config::store::Host for State {
        fn get(&mut self, _: String) -> Result<Option<String>, self::wasi::config::store::Error> {
            Ok(None)
        }

        fn get_all(&mut self) -> Result<Vec<(String, String)>, self::wasi::config::store::Error> {
            Ok(Vec::new())
        }
    }

    /// Bare wasmtime: an `InstancePre` and a fresh store per call.
    pub struct Bare {
        engine: Engine,
        pre: ToolsetPre<State>,
    }

    impl Bare {
        pub fn new(pooling: bool) -> Bare {
            let mut config = Config::new();
            config.wasm_component_model(true);
            if pooling {
                let mut pool = PoolingAllocationConfig::new();
                pool.total_memories(128)
                    .total_tables(128)
                    .total_stacks(32)
                    .total_core_instances(128)
                    .total_component_instances(32)
                    .max_memory_size(256 << 20)
                    .linear_memory_keep_resident(16 << 20)
                    .table_keep_resident(64 << 10)
                    .async_stack_keep_resident(128 << 10)
                    .decommit_batch_size(8)
                    .pagemap_scan(Enabled::Auto);
                config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            }
            let engine = Engine::new(&config).expect("an engine");
            let mut linker = Linker::new(&engine);
            wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI links");
            Toolset::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
                .expect("host links");
            let bytes = std::fs::read(guests::FIXTURE_LEFTOVERS).expect("the fixture is built");
            let component = Component::new(&engine, bytes).expect("it compiles");
            let pre = ToolsetPre::new(linker.instantiate_pre(&component).expect("it links"))
                .expect("it exports the toolset");
            Bare { engine, pre }
        }

        pub async fn call(&self) {
            let state = State {
                wasi: WasiCtx::builder().build(),
                table: ResourceTable::new(),
            };
            let mut store = Store::new(&self.engine, state);
            let toolset = self
                .pre
                .instantiate_async(&mut store)
                .await
                .expect("instantiates");
            let outcome = toolset
                .toolcage_tool_tool()
                .call_call(&mut store, "constant", "{}")
                .await
                .expect("runs");
            assert_eq!(outcome.expect("succeeds").output, "ok");
        }
    }
}

/// Measures one path with 1, then 2 callers.
type Measured<'a> = dyn Fn() -> (Figures, Figures) + 'a;

/// How many rounds measure every path: the paths alternate within the
/// run, so that a noisy period of the machine falls on each in turn, and
/// the ratios are taken round by round (both sides in the same period),
/// then their median.
const ROUNDS: usize = 5;

fn main() {
    let tokio = toolcage_tests::bench::two_workers();
    let registry = Arc::new(tokio.block_on(async {
        let mut registry = Registry::builder().build().expect("a registry");
        let report = registry.load_file(guests::FIXTURE_LEFTOVERS).await;
        assert!(report.is_ok(), "{:?}", report.error);
        registry
    }));
    println!("{:?}", toolcage::Runtime::new().expect("a runtime"));
    // Every `.await` of a call moves its future: the smaller, the cheaper.
    let future = std::mem::size_of_val(&registry.call("constant", "{}"));
    println!("Registry::call's future: {future} bytes");
    let toolcage_call = move || {
        let registry = registry.clone();
        async move {
            let result = registry.call("constant", "{}").await;
            assert_eq!(result.output, "ok", "{:?}", result.error_kind);
        }
    };
    let bare = |pooling| {
        let bare = Arc::new(bare::Bare::new(pooling));
        move || {
            let bare = bare.clone();
            async move { bare.call().await }
        }
    };
    let paths: [(&str, Box<Measured>); 3] = [
        (
            "toolcage Registry::call",
            Box::new(|| run_both(&tokio, toolcage_call.clone())),
        ),
        (
            "bare wasmtime, default allocator",
            Box::new(|| run_both(&tokio, bare(false))),
        ),
        (
            "bare wasmtime, tuned pooling allocator",
            Box::new(|| run_both(&tokio, bare(true))),
        ),
    ];

    println!(
        "\n{:<6} {:<40} {:>8} {:>9} {:>9} {:>12}",
        "round", "path", "callers", "p50 µs", "p99 µs", "calls/s"
    );
    // `cargo bench --bench calls -- toolcage` runs only the paths whose
    // label has that word (for a profiler), once, without the ratios.
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let rounds = if only.is_some() { 1 } else { ROUNDS };
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut rows = [None, None, None];
        // Every other round, the paths run in the other order.
        let mut order: Vec<usize> = (0..paths.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for index in order {
            let (label, run) = &paths[index];
            if only
                .as_ref()
                .is_some_and(|word| !label.contains(word.as_str()))
            {
                continue;
            }
            let figures = run();
            for (callers, f) in [(1, &figures.0), (2, &figures.1)] {
                println!(
                    "{round:<6} {:<40} {:>8} {:>9.1} {:>9.1} {:>12.0}",
                    label,
                    callers,
                    f.p50.as_secs_f64() * 1e6,
                    f.p99.as_secs_f64() * 1e6,
                    f.per_second
                );
            }
            rows[index] = Some(figures);
        }
        if let [Some(toolcage), _, Some(tuned)] = rows {
            ratios.push(Ratios::of(&toolcage, &tuned));
        }
    }
    if !ratios.is_empty() {
        Ratios::report(&ratios);
    }
}

/// One round's figures of toolcage against tuned bare wasmtime.
struct Ratios {
    /// toolcage p50 / tuned bare p50, 1 caller.
    p50: f64,
    /// toolcage calls/s, 2 callers / 1 caller.
    scaling: f64,
    /// Tuned bare's calls/s, 2 callers / 1 caller.
    bare_scaling: f64,
    /// toolcage / tuned bare calls/s, 2 callers.
    two_callers: f64,
}

impl Ratios {
    fn of(toolcage: &(Figures, Figures), tuned: &(Figures, Figures)) -> Ratios {
        Ratios {
            p50: toolcage.0.p50.as_secs_f64() / tuned.0.p50.as_secs_f64(),
            scaling: toolcage.1.per_second / toolcage.0.per_second,
            bare_scaling: tuned.1.per_second / tuned.0.per_second,
            two_callers: toolcage.1.per_second / tuned.1.per_second,
        }
    }

    /// Each round's ratios, their medians, and the targets (issue 34).
    fn report(rounds: &[Ratios]) {
        println!("\nratios to tuned bare wasmtime, round by round:");
        println!(
            "{:<6} {:>22} {:>22} {:>22} {:>22}",
            "round",
            "p50, 1 caller",
            "toolcage 2/1 callers",
            "bare 2/1 callers",
            "calls/s, 2 callers"
        );
        for (n, r) in rounds.iter().enumerate() {
            println!(
                "{:<6} {:>22.2} {:>22.2} {:>22.2} {:>22.2}",
                n + 1,
                r.p50,
                r.scaling,
                r.bare_scaling,
                r.two_callers
            );
        }
        let median = |pick: fn(&Ratios) -> f64| {
            let mut values: Vec<f64> = rounds.iter().map(pick).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        println!(
            "{:<6} {:>22.2} {:>22.2} {:>22.2} {:>22.2}",
            "median",
            median(|r| r.p50),
            median(|r| r.scaling),
            median(|r| r.bare_scaling),
            median(|r| r.two_callers)
        );
        let scaled: Vec<&Ratios> = rounds.iter().filter(|r| r.bare_scaling >= 1.6).collect();
        println!("\ntargets, as ratios in this run:");
        ratio(
            "toolcage p50 / tuned bare p50, 1 caller",
            median(|r| r.p50),
            "<= 1.5",
        );
        ratio(
            "toolcage / tuned bare calls/s, 2 callers",
            median(|r| r.two_callers),
            ">= 0.8",
        );
        let lowest = scaled
            .iter()
            .map(|r| r.two_callers)
            .fold(f64::INFINITY, f64::min);
        println!(
            "  rounds where bare scaled >= 1.6x: {} of {}; their lowest 2-caller ratio {}",
            scaled.len(),
            rounds.len(),
            if scaled.is_empty() {
                "-".to_string()
            } else {
                format!("{lowest:.2}")
            }
        );
    }
}

fn run_both<F, Fut>(tokio: &tokio::runtime::Runtime, call: F) -> (Figures, Figures)
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send,
{
    (
        measure(tokio, (WARM_UP, calls()), 1, call.clone()),
        measure(tokio, (WARM_UP, calls()), 2, call),
    )
}

fn ratio(label: &str, value: f64, target: &str) {
    println!("  {label:<45} {value:>6.2}  (target {target})");
}
