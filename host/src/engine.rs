//! The WebAssembly engines and the epoch ticker.
//!
//! One wasmtime `Engine` serves every component with the same stack limit
//! (the stack limit is an engine setting, so a per-component stack override
//! gets an engine of its own, created on first use). Every engine meters fuel
//! and checks epochs: one ticker thread advances all their epochs every
//! [`TICK`], and each call yields to the async executor at every tick, so a
//! timeout or a cancellation stops even a guest that never returns to the
//! host. The ticker stops when the engines are dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};

use crate::bindings::{Toolset, ToolsetPre};
use crate::component::compile;
use crate::sandbox::CallState;
use crate::{Error, LoadError};

/// The compiling and running machinery shared by registries: WebAssembly
/// engines, their epoch ticker, and a cache of compiled components keyed by
/// content hash, so the same bytes are compiled once per process.
///
/// A [`Registry`](crate::Registry) makes its own unless given one; share one
/// runtime between registries (for example across reloads) to share the cache.
/// Cloning shares the runtime.
#[derive(Clone)]
pub struct Runtime {
    engines: Arc<Engines>,
    compiled: Arc<Mutex<HashMap<CompiledKey, ToolsetPre<CallState>>>>,
}

/// A component's BLAKE3 hash and the stack limit it was compiled for.
type CompiledKey = (String, usize);

impl Runtime {
    /// Starts the engines' epoch ticker thread. It stops when the last clone
    /// of the runtime, and every registry using it, is dropped. Compiled
    /// components are cached in memory only.
    pub fn new() -> Result<Self, Error> {
        Runtime::with_cache(None)
    }

    /// Like [`Runtime::new`], also caching compiled components on disk in
    /// `dir`, so a new process skips recompiling unchanged components. The
    /// cache is keyed by the component's bytes and the engine's settings.
    /// Whoever can write to `dir` can change the native code toolcage runs:
    /// give it the same protection as the toolcage binary.
    pub fn with_disk_cache(dir: impl Into<std::path::PathBuf>) -> Result<Self, Error> {
        let mut config = wasmtime::CacheConfig::new();
        config.with_directory(dir.into());
        let cache = wasmtime::Cache::new(config)
            .map_err(|e| Error::Engine(format!("compile cache: {e:#}")))?;
        Runtime::with_cache(Some(cache))
    }

    fn with_cache(cache: Option<wasmtime::Cache>) -> Result<Self, Error> {
        Ok(Runtime {
            engines: Arc::new(Engines::new(cache)?),
            compiled: Arc::default(),
        })
    }

    /// Compiles and links `bytes` (whose BLAKE3 hash is `hash`) for
    /// components limited to `stack_bytes` of stack, or returns the cached
    /// result.
    pub(crate) async fn compile(
        &self,
        hash: &str,
        bytes: Vec<u8>,
        stack_bytes: usize,
    ) -> Result<ToolsetPre<CallState>, LoadError> {
        let key = (hash.to_string(), stack_bytes);
        if let Some(pre) = self
            .compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(pre.clone());
        }
        let engine = self
            .engines
            .get(stack_bytes)
            .map_err(|e| LoadError::Compile(e.to_string()))?;
        let pre = tokio::task::spawn_blocking(move || compile(&engine, &bytes))
            .await
            .map_err(|e| LoadError::Compile(format!("the compiler thread failed: {e}")))??;
        self.compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, pre.clone());
        Ok(pre)
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

/// How often epochs advance: the granularity of timeouts and cancellation.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// An engine and the linker that provides WASI and the host imports on it.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    pub engine: wasmtime::Engine,
    pub linker: Arc<Linker<CallState>>,
}

/// The engines, by stack limit, and their ticker.
pub(crate) struct Engines {
    cache: Option<wasmtime::Cache>,
    by_stack: Mutex<HashMap<usize, EngineHandle>>,
    ticked: Arc<Mutex<Vec<wasmtime::Engine>>>,
    stop: Arc<AtomicBool>,
}

impl Engines {
    pub fn new(cache: Option<wasmtime::Cache>) -> Result<Self, Error> {
        let ticked: Arc<Mutex<Vec<wasmtime::Engine>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (engines, flag) = (ticked.clone(), stop.clone());
        std::thread::Builder::new()
            .name("toolcage-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    for engine in engines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        engine.increment_epoch();
                    }
                }
            })
            .map_err(|e| Error::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Engines {
            cache,
            by_stack: Mutex::default(),
            ticked,
            stop,
        })
    }

    /// The engine for components limited to `stack_bytes` of wasm stack.
    pub fn get(&self, stack_bytes: usize) -> Result<EngineHandle, Error> {
        let mut by_stack = self.by_stack.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = by_stack.get(&stack_bytes) {
            return Ok(handle.clone());
        }
        let handle = new_engine(stack_bytes, self.cache.clone())?;
        self.ticked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle.engine.clone());
        by_stack.insert(stack_bytes, handle.clone());
        Ok(handle)
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn new_engine(stack_bytes: usize, cache: Option<wasmtime::Cache>) -> Result<EngineHandle, Error> {
    let mut config = wasmtime::Config::new();
    config
        .cache(cache)
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(stack_bytes)
        // The fiber a call runs on must hold the wasm stack plus the host
        // functions it calls.
        .async_stack_size(stack_bytes.saturating_add(1 << 20));
    let engine = wasmtime::Engine::new(&config).map_err(|e| Error::Engine(format!("{e:#}")))?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .and_then(|()| Toolset::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state))
        .map_err(|e| Error::Engine(format!("{e:#}")))?;
    Ok(EngineHandle {
        engine,
        linker: Arc::new(linker),
    })
}
