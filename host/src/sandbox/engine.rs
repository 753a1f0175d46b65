//! The WebAssembly engines, their pools of sandbox slots, and the epoch ticker.
//!
//! Every call runs in a fresh instance, and making one is toolcage's per-call
//! tax. So instances come from wasmtime's pooling allocator: a fixed set of
//! slots (linear memories, tables, fiber stacks) reserved once, and reset in
//! place after each call instead of being mapped and unmapped. Unmapping is
//! what makes concurrent calls slow: each unmap makes every other core flush
//! its TLB. A slot keeps up to [`KEEP_RESIDENT_BYTES`] of the pages a call
//! dirtied resident, and the next call in that slot gets them back zeroed or
//! restored to the component's initial image.
//!
//! Threat model: a call's instance is hostile and the next call in its slot
//! may be another tool's. Nothing may cross: linear memory (where a guest's
//! own stack lives), tables and globals come back to their initial contents.
//! Fiber stacks are not zeroed: WebAssembly cannot read them (its locals start
//! at zero by the spec), and zeroing them, a defence against bugs in wasmtime
//! itself, would be a large share of a call's cost (measure it with
//! `cargo bench -p toolcage-tests --bench calls`). The Linux `PAGEMAP_SCAN`
//! ioctl finds the pages to reset, but it cannot see a dirty page that was
//! swapped out (wasmtime PR #14357), which would then keep the last call's
//! contents. So it is used
//! only when no swap device is active when the runtime starts (read from
//! `/proc/swaps`); otherwise slots are reset with `madvise`, slower but exact.
//! Switching swap on under a running toolcage is logged as an error: restart
//! it.
//!
//! A pool has room for [`RuntimeBuilder::max_concurrent_calls`] instances of
//! the largest shape the sandbox admits (see `state::MAX_MEMORIES` and
//! friends), and its [`Slots`] admit that many calls at once, so no call ever
//! fails for want of a slot: it waits for one within its own timeout. A slot
//! per core is kept for loading (`describe()`), so that loading or
//! reloading a component never waits for calls.
//!
//! One engine serves every component with the same stack and memory limit
//! (both size the pool's slots), created on first use. One ticker thread
//! advances all their epochs every [`TICK`], and each call yields to the async
//! executor at every tick, so a timeout or a cancellation stops even a guest
//! that never returns to the host. The ticker stops when the engines are
//! dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::ToolsetPre;
use super::cache::OwnedDirError;
use super::cache::{DEFAULT_DISK_CACHE_BYTES, DiskCache};
use super::codegen;
use super::compile::ComponentError;
use super::compile::{EngineHandle, compile};
use super::content::Content;
use super::slots::{Slots, loading_slots};
use super::state::{
    self, CallState, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES, SlotShape,
};

/// Why a [`Runtime`] cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The thread that advances the engines' epochs cannot be started.
    #[error("cannot create the WebAssembly engine: cannot start the epoch ticker")]
    Ticker(#[source] std::io::Error),
    /// wasmtime refused the engine's configuration, or linking the host's
    /// imports on it.
    #[error("cannot create the WebAssembly engine")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The disk cache of compiled components cannot be used.
    #[error("cannot use the compile cache {path}")]
    DiskCache {
        /// The cache directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: OwnedDirError,
    },
}

/// How many calls may run at once by default, each in its own slot.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 32;

/// How much of a linear memory a slot keeps resident between calls when
/// `PAGEMAP_SCAN` finds the dirty pages: a call that touched more leaves the
/// rest to `madvise`. This bounds the resident memory of idle slots.
pub const KEEP_RESIDENT_BYTES: usize = 16 << 20;

/// How much of a table is reset with `memset` rather than `madvise`.
const TABLE_KEEP_RESIDENT_BYTES: usize = 64 << 10;

/// How many slots' worth of decommits are queued before they are flushed.
const DECOMMIT_BATCH: usize = 8;

/// How often the ticker re-reads `/proc/swaps`.
const SWAP_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How often epochs advance: the granularity of timeouts and cancellation.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// The compiling and running machinery shared by registries: WebAssembly
/// engines with their pools of sandbox slots, the epoch ticker, and a cache
/// of compiled components keyed by content hash, so the same bytes are
/// compiled once per process.
///
/// A [`Registry`](crate::Registry) makes its own unless given one; share one
/// runtime between registries (for example across reloads) to share the
/// cache and the slots. Cloning shares the runtime.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

struct Shared {
    engines: Engines,
    /// Compiled components by hash and shape, held only while a registry
    /// uses them: a component no longer loaded (after a reload) frees its
    /// code.
    compiled: Mutex<HashMap<CompiledKey, Weak<ToolsetPre<CallState>>>>,
    /// The slots calls (and, apart, loads) take.
    slots: Slots,
    /// Connections tools hold open right now.
    connections: Arc<AtomicUsize>,
}

/// A component's BLAKE3 hash and the slot shape it was compiled for.
type CompiledKey = (String, SlotShape);

/// Builds a [`Runtime`]. By default: [`DEFAULT_MAX_CONCURRENT_CALLS`] slots,
/// compiled components cached in memory only, pooled instances.
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    max_concurrent_calls: usize,
    disk_cache: Option<PathBuf>,
    disk_cache_max_bytes: u64,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            disk_cache: None,
            disk_cache_max_bytes: DEFAULT_DISK_CACHE_BYTES,
        }
    }
}

impl RuntimeBuilder {
    /// How many calls (and load-time `describe()` runs) may run at once, each
    /// in a sandbox slot of its own. A call that finds every slot taken waits
    /// for one within its own timeout; if none frees up in time it ends with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout), saying the host was
    /// busy. Each slot reserves address space (not memory) for its largest
    /// possible instance. Default: [`DEFAULT_MAX_CONCURRENT_CALLS`]; at
    /// least 1.
    pub fn max_concurrent_calls(mut self, calls: usize) -> Self {
        self.max_concurrent_calls = calls.max(1);
        self
    }

    /// Caches compiled components on disk in `dir`, so a new process skips
    /// recompiling unchanged components: on a local file system a cached
    /// component is mapped from its file, not read or copied. The cache is
    /// keyed by the component's bytes and the engine's settings. Whoever
    /// can write to `dir` can change the native code toolcage runs, so
    /// [`build`](Self::build) creates `dir` owner-only, refuses one owned
    /// by another user, and makes one its group or others could write to
    /// owner-only; entries that are not the user's own regular files are
    /// ignored. Keep its parent directories closed to other users, and lend
    /// no tool a directory containing it read-write (a registry refuses
    /// that). Default: no disk cache.
    pub fn disk_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.disk_cache = Some(dir.into());
        self
    }

    /// How many bytes the disk cache may hold; past that, the entries used
    /// least recently are removed. Default: [`DEFAULT_DISK_CACHE_BYTES`].
    pub fn disk_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.disk_cache_max_bytes = bytes;
        self
    }

    /// Starts the engines' epoch ticker thread. It stops when the last clone
    /// of the runtime, and every registry using it, is dropped.
    pub fn build(self) -> Result<Runtime, RuntimeError> {
        let cache = match self.disk_cache {
            Some(path) => match DiskCache::open(&path, self.disk_cache_max_bytes) {
                Ok(cache) => Some(Arc::new(cache)),
                Err(source) => return Err(RuntimeError::DiskCache { path, source }),
            },
            None => None,
        };
        let slots = Slots::new(self.max_concurrent_calls);
        Ok(Runtime {
            shared: Arc::new(Shared {
                engines: Engines::new(cache, slots.max_calls() + loading_slots())?,
                compiled: Mutex::default(),
                slots,
                connections: Arc::default(),
            }),
        })
    }
}

impl Runtime {
    /// A runtime with every default: see [`RuntimeBuilder`].
    pub fn new() -> Result<Self, RuntimeError> {
        Runtime::builder().build()
    }

    /// Like [`Runtime::new`], also caching compiled components on disk in
    /// `dir` (see [`RuntimeBuilder::disk_cache`]).
    pub fn with_disk_cache(dir: impl Into<PathBuf>) -> Result<Self, RuntimeError> {
        Runtime::builder().disk_cache(dir).build()
    }

    /// A builder with every default.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The disk cache's directory (canonical), when there is one. No tool
    /// may be lent it read-write: see [`RegistryBuilder::build`](crate::RegistryBuilder::build).
    pub fn disk_cache_dir(&self) -> Option<&std::path::Path> {
        self.shared.engines.cache.as_deref().map(DiskCache::dir)
    }

    /// How many calls may run at once.
    pub fn max_concurrent_calls(&self) -> usize {
        self.shared.slots.max_calls()
    }

    /// How many sandbox slots are running a call now (at most
    /// [`max_concurrent_calls`](Self::max_concurrent_calls)).
    pub fn busy_slots(&self) -> usize {
        self.shared.slots.busy()
    }

    /// How many calls were given up on (by their timeout or a cancellation)
    /// while their guest was blocked in a file operation that has not
    /// returned yet, such as a read of a FIFO or of a stalled network mount.
    /// Each holds a thread and a slot until the operation returns.
    pub fn stuck_calls(&self) -> usize {
        self.shared.slots.stuck()
    }

    /// The slots this runtime's calls take: what a sandbox holds.
    pub(crate) fn slots(&self) -> &Slots {
        &self.shared.slots
    }

    /// How many network connections tools hold open right now, across every
    /// registry on this runtime. A call's connections close when it ends,
    /// however it ends (returned, timed out, cancelled), so between calls
    /// this is 0.
    pub fn open_connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    pub(crate) fn connection_counter(&self) -> &Arc<AtomicUsize> {
        &self.shared.connections
    }

    /// Compiles and links `content` for components run in slots of
    /// `shape`, or returns the one already in use.
    pub(crate) async fn compile(
        &self,
        content: Content,
        shape: SlotShape,
    ) -> Result<Arc<ToolsetPre<CallState>>, ComponentError> {
        let key = (content.hash.clone(), shape);
        if let Some(pre) = self.compiled().get(&key).and_then(Weak::upgrade) {
            return Ok(pre);
        }
        let engine = self
            .shared
            .engines
            .get(shape)
            .map_err(|e| ComponentError::Engine(e.into()))?;
        let pre = tokio::task::spawn_blocking(move || compile(&engine, content))
            .await
            .map_err(ComponentError::CompilerThread)??;
        let pre = Arc::new(pre);
        let mut compiled = self.compiled();
        compiled.retain(|_, pre| pre.strong_count() > 0);
        compiled.insert(key, Arc::downgrade(&pre));
        Ok(pre)
    }

    /// How many compiled components are held, because a registry (any
    /// snapshot still serving a call) uses them. A component no longer
    /// loaded anywhere is freed, with its code.
    pub fn compiled_components(&self) -> usize {
        let mut compiled = self.compiled();
        compiled.retain(|_, pre| pre.strong_count() > 0);
        compiled.len()
    }

    fn compiled(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<CompiledKey, Weak<ToolsetPre<CallState>>>> {
        self.shared
            .compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("max_concurrent_calls", &self.shared.slots.max_calls())
            .field("pagemap_scan", &self.shared.engines.pagemap_scan)
            .finish_non_exhaustive()
    }
}

/// The engines, by slot shape, and their ticker.
struct Engines {
    cache: Option<Arc<DiskCache>>,
    slots: u32,
    pagemap_scan: bool,
    by_shape: Mutex<HashMap<SlotShape, EngineHandle>>,
    ticked: Arc<Mutex<Vec<wasmtime::Engine>>>,
    stop: Arc<AtomicBool>,
}

impl Engines {
    fn new(cache: Option<Arc<DiskCache>>, slots: usize) -> Result<Self, RuntimeError> {
        let ticked: Arc<Mutex<Vec<wasmtime::Engine>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let pagemap_scan = no_swap_active() && PoolingAllocationConfig::is_pagemap_scan_available();
        let (engines, flag) = (ticked.clone(), stop.clone());
        std::thread::Builder::new()
            .name("toolcage-epoch".into())
            .spawn(move || {
                let mut swap_checked = Instant::now();
                let mut swap_reported = false;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    for engine in engines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        engine.increment_epoch();
                    }
                    if pagemap_scan && !swap_reported && swap_checked.elapsed() > SWAP_CHECK_INTERVAL
                    {
                        swap_checked = Instant::now();
                        if !no_swap_active() {
                            swap_reported = true;
                            tracing::error!(
                                "swap was switched on while toolcage runs with PAGEMAP_SCAN slot resets, which miss swapped-out pages: restart toolcage so that it resets slots with madvise"
                            );
                        }
                    }
                }
            })
            .map_err(RuntimeError::Ticker)?;
        Ok(Engines {
            cache,
            slots: u32::try_from(slots).unwrap_or(u32::MAX),
            pagemap_scan,
            by_shape: Mutex::default(),
            ticked,
            stop,
        })
    }

    /// The engine for components run in slots of `shape`.
    fn get(&self, shape: SlotShape) -> Result<EngineHandle, RuntimeError> {
        let mut by_shape = self.by_shape.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = by_shape.get(&shape) {
            return Ok(handle.clone());
        }
        let handle = self.new_engine(shape)?;
        self.ticked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle.engine.clone());
        by_shape.insert(shape, handle.clone());
        Ok(handle)
    }

    fn new_engine(&self, shape: SlotShape) -> Result<EngineHandle, RuntimeError> {
        let mut config = codegen::compiler_config();
        config
            .max_wasm_stack(shape.stack_bytes)
            // The fiber a call runs on must hold the wasm stack plus the host
            // functions it calls.
            .async_stack_size(shape.stack_bytes.saturating_add(1 << 20))
            .allocation_strategy(InstanceAllocationStrategy::Pooling(self.pool(shape)));
        let engine = match wasmtime::Engine::new(&config) {
            Ok(engine) => engine,
            // The pool reserves its address space up front; where that is
            // refused (a tight `ulimit -v`), instances are made per call.
            Err(e) => {
                tracing::warn!(
                    "cannot reserve the pool of sandbox slots ({e:#}); allocating each instance on demand, which is slower"
                );
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                wasmtime::Engine::new(&config).map_err(|e| RuntimeError::Engine(e.into()))?
            }
        };
        let mut linker = Linker::new(&engine);
        state::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(e.into()))?;
        Ok(EngineHandle {
            engine_key: codegen::engine_key(&engine),
            engine,
            linker: Arc::new(linker),
            cache: self.cache.clone(),
        })
    }

    /// Room for `slots` instances of the largest shape the sandbox admits.
    fn pool(&self, shape: SlotShape) -> PoolingAllocationConfig {
        let slots = self.slots;
        let times = |n: usize| slots.saturating_mul(n as u32);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_stacks(slots)
            .total_core_instances(times(MAX_INSTANCES))
            .total_memories(times(MAX_MEMORIES))
            .total_tables(times(MAX_TABLES))
            .max_core_instances_per_component(MAX_INSTANCES as u32)
            .max_memories_per_component(MAX_MEMORIES as u32)
            .max_tables_per_component(MAX_TABLES as u32)
            .max_memories_per_module(MAX_MEMORIES as u32)
            .max_tables_per_module(MAX_TABLES as u32)
            .table_elements(MAX_TABLE_ELEMENTS)
            // 32-bit memories cannot grow past 4 GiB, the default reservation.
            .max_memory_size(shape.memory_bytes.min(1 << 32))
            .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES)
            .decommit_batch_size(DECOMMIT_BATCH);
        if self.pagemap_scan {
            pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES.min(shape.memory_bytes))
                .pagemap_scan(Enabled::Yes);
        }
        pool
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether `/proc/swaps` lists no active swap device. Anything unreadable
/// counts as swap, so the exact but slower reset is chosen.
fn no_swap_active() -> bool {
    std::fs::read_to_string("/proc/swaps")
        .is_ok_and(|swaps| swaps.lines().skip(1).all(|l| l.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_denies_by_default_and_keeps_at_least_one_slot() {
        let builder = RuntimeBuilder::default();
        assert_eq!(builder.max_concurrent_calls, DEFAULT_MAX_CONCURRENT_CALLS);
        assert_eq!(builder.disk_cache, None, "no disk cache unless asked");
        assert_eq!(builder.disk_cache_max_bytes, DEFAULT_DISK_CACHE_BYTES);
        assert_eq!(builder.max_concurrent_calls(0).max_concurrent_calls, 1);
    }

    #[test]
    fn a_runtime_counts_its_slots() {
        let runtime = Runtime::builder().max_concurrent_calls(2).build().unwrap();
        assert_eq!(runtime.max_concurrent_calls(), 2);
        assert_eq!(runtime.disk_cache_dir(), None);
        assert_eq!(
            (runtime.busy_slots(), runtime.stuck_calls()),
            (0, 0),
            "a new runtime runs nothing"
        );
        let call = runtime.slots().free(false).unwrap();
        let load = runtime.slots().free(true).unwrap();
        assert_eq!(runtime.busy_slots(), 1, "loading has slots of its own");
        let clone = runtime.clone();
        let _second = clone.slots().free(false).unwrap();
        assert!(
            runtime.slots().free(false).is_none(),
            "clones share the slots"
        );
        drop((call, load));
        assert_eq!(runtime.busy_slots(), 1);
    }

    #[test]
    fn one_engine_serves_each_slot_shape() {
        let runtime = Runtime::new().unwrap();
        let engines = &runtime.shared.engines;
        let small = SlotShape {
            stack_bytes: 512 << 10,
            memory_bytes: 16 << 20,
        };
        let large = SlotShape {
            memory_bytes: 64 << 20,
            ..small
        };
        let first = engines.get(small).unwrap();
        assert!(wasmtime::Engine::same(
            &first.engine,
            &engines.get(small).unwrap().engine
        ));
        let other = engines.get(large).unwrap();
        assert!(!wasmtime::Engine::same(&first.engine, &other.engine));
        let ticked = engines.ticked.lock().unwrap().len();
        assert_eq!(ticked, 2, "the ticker advances every engine made");
    }

    #[test]
    fn the_disk_cache_is_made_owner_only_and_refused_where_it_cannot_be() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let runtime = Runtime::with_disk_cache(&cache).unwrap();
        let held = runtime.disk_cache_dir().unwrap();
        assert_eq!(held, cache.canonicalize().unwrap());
        let mode = std::fs::metadata(held).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let error = Runtime::with_disk_cache(file.join("cache")).unwrap_err();
        assert!(
            matches!(
                &error,
                RuntimeError::DiskCache {
                    source: OwnedDirError::Create(_),
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(
            std::error::Error::source(&error).is_some(),
            "the cause is kept"
        );
    }

    #[tokio::test]
    async fn bytes_that_are_no_component_are_refused_before_linking() {
        let runtime = Runtime::new().unwrap();
        let shape = SlotShape {
            stack_bytes: 512 << 10,
            memory_bytes: 16 << 20,
        };
        let compile = |bytes: &[u8]| {
            let (runtime, bytes) = (runtime.clone(), bytes.to_vec());
            async move {
                let content = Content::of_bytes(bytes).await.unwrap();
                runtime.compile(content, shape).await.err().unwrap()
            }
        };
        let error = compile(b"not wasm at all").await;
        assert!(matches!(error, ComponentError::NotWasm), "{error:?}");
        let error = compile(b"\0asm\x01\0\0\0").await;
        assert!(matches!(error, ComponentError::CoreModule), "{error:?}");
        // An empty component compiles, but exports no tool.
        let error = compile(b"\0asm\x0d\0\x01\0").await;
        assert!(matches!(error, ComponentError::Export(_)), "{error:?}");
        assert_eq!(runtime.compiled_components(), 0, "nothing failed is kept");
    }
}
