//! One sandbox per call: a fresh Store, WASI context and set of limits.
//!
//! Threat model: the guest is hostile. It gets a new instance for every call
//! (so nothing it does survives into the next call or leaks into a concurrent
//! one) and, by default, nothing of the host: no environment variables, no
//! arguments, an empty stdin, no filesystem, and no network. The operator's
//! mounts are its only files, and its grants (see `net`) its only
//! destinations.
//! Its stdout and stderr go to bounded in-memory buffers, never to the host's
//! own streams. Its `log` and `progress` imports are bounded in count and
//! size, so they cannot flood the host's logs. Fuel, memory, stack and an
//! epoch-driven wall-clock deadline stop it however it misbehaves.
//!
//! The instance lives in a pooled slot (see the `engine` module) that was
//! reset to its initial contents after its last use. A call waits for a free
//! slot within its own timeout, so a busy host delays calls but never fails
//! them with an allocator error. A component with mounts runs on a thread of
//! its own, where file operations run directly at full speed; should one
//! hang, the call's caller still gets its outcome at the deadline.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::filesystem::WasiFilesystemCtx;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{Level, ToolsetPre, WitDescriptor, WitOutcome, config_store, toolcage};
use super::engine::Runtime;
use super::limits::Limits;
use super::mount::{HeldDir, Mount};
use super::net::sockets::{LookupView, Sockets};
use super::net::{Egress, Meter, NetPolicy, NetUsage};
use super::outcome::{CancelToken, GuestEvent, LogLevel, Logs};
use super::secrets::Secrets;
use super::secrets::redact::Redactor;
use super::settings::Settings;
use crate::{Error, ErrorKind};

/// The most `log` lines and `progress` reports a call may make; later ones
/// are dropped.
const MAX_GUEST_EVENTS: usize = 1_000;
/// The longest `log` or `progress` message kept, in bytes.
const MAX_EVENT_MESSAGE: usize = 4 << 10;
/// The most table elements a call's instances may hold, all tables together.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;
/// The most core instances, linear memories and tables a component may
/// create: enough for any toolchain's output, few enough that nobody can
/// multiply the memory limit by declaring many memories.
pub(crate) const MAX_INSTANCES: usize = 64;
pub(crate) const MAX_MEMORIES: usize = 8;
pub(crate) const MAX_TABLES: usize = 32;
/// The most WASI resources (open files, directory streams, pollables…) a call
/// may hold at once; each open file is a host file descriptor.
const MAX_WASI_RESOURCES: usize = 1024;
/// The most component-model resource handles a call may hold.
const MAX_COMPONENT_HANDLES: usize = 10_000;
/// What one host call may copy out of the guest beyond the output limit: the
/// outcome's framing, and room for WASI requests.
const TRANSFER_SLACK: usize = 64 << 10;
/// What `describe()` may return, all descriptors together.
pub(crate) const MAX_DESCRIBE_BYTES: usize = 4 << 20;

/// What to run in the sandbox.
pub(crate) enum Invocation {
    Describe,
    Call { tool: String, arguments: String },
}

/// What the guest returned.
pub(crate) enum Returned {
    Descriptors(Vec<WitDescriptor>),
    Outcome(Result<WitOutcome, WitOutcome>),
}

/// Why a run ended without a return value.
#[derive(Debug)]
pub(crate) struct Stopped {
    pub kind: ErrorKind,
    pub message: String,
}

/// The record of one run.
pub(crate) struct Ran {
    pub result: Result<Returned, Stopped>,
    pub fuel_used: u64,
    pub duration: Duration,
    /// The most linear memory the instance held, in bytes.
    pub peak_memory_bytes: u64,
    /// How long the call waited for a sandbox slot.
    pub slot_wait: Duration,
    pub logs: Logs,
    /// Whether the memory limiter refused a growth during the run.
    pub memory_refused: bool,
    /// What the run used of the network.
    pub net: NetUsage,
    /// What redacts the operator's secrets, when there are any: for what
    /// the caller makes of the outcome.
    pub redactor: Option<Arc<Redactor>>,
}

/// Where the guest's `log` and `progress` go: the caller's callback, held
/// only until the call's outcome is decided. A worker stuck in a file
/// operation keeps its store (and this observer) alive past that, so the
/// callback is detached then, and whatever the caller's callback holds (an
/// event channel its answer waits to see closed) is dropped with it.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    events: Option<Arc<Mutex<Option<EventSink>>>>,
}

/// The caller's callback for the guest's events.
pub(crate) type EventSink = Arc<dyn Fn(GuestEvent) + Send + Sync>;

impl Observer {
    /// An observer that sends each event to `events`, when there is one.
    pub(crate) fn new(events: Option<EventSink>) -> Observer {
        Observer {
            events: events.map(|events| Arc::new(Mutex::new(Some(events)))),
        }
    }

    /// Whether anybody receives the events.
    fn is_watched(&self) -> bool {
        self.events.is_some()
    }

    /// Sends `event`, unless the observer was detached.
    fn send(&self, event: GuestEvent) {
        let Some(slot) = &self.events else {
            return;
        };
        let sink = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(sink) = sink {
            sink(event);
        }
    }

    /// Drops the caller's callback: no event is sent after this.
    fn detach(&self) {
        if let Some(slot) = &self.events {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

/// The data of a call's Store.
pub(crate) struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    egress: Egress,
    sockets: Sockets,
    table: ResourceTable,
    limiter: MemoryLimiter,
    observer: Observer,
    guest_events: usize,
    settings: Arc<Settings>,
    redactor: Option<Arc<Redactor>>,
    meter: Arc<Meter>,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl CallState {
    /// What toolcage's `wasi:sockets/ip-name-lookup` works on.
    pub(crate) fn lookups(&mut self) -> LookupView<'_> {
        LookupView {
            table: &mut self.table,
            sockets: &self.sockets,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

/// `wasi:config/store`: the component's settings, read-only.
impl config_store::Host for CallState {
    fn get(&mut self, key: String) -> Result<Option<String>, config_store::Error> {
        Ok(self.settings.get(&key))
    }

    fn get_all(&mut self) -> Result<Vec<(String, String)>, config_store::Error> {
        Ok(self.settings.all())
    }
}

impl toolcage::tool::host::Host for CallState {
    fn log(&mut self, level: Level, message: String) {
        if !self.admit_event() {
            return;
        }
        let message = truncate(self.redacted(message), MAX_EVENT_MESSAGE);
        match level {
            Level::Trace => {
                tracing::trace!(target: "toolcage::guest", "{}", message.escape_debug())
            }
            Level::Debug => {
                tracing::debug!(target: "toolcage::guest", "{}", message.escape_debug())
            }
            Level::Info => tracing::info!(target: "toolcage::guest", "{}", message.escape_debug()),
            Level::Warn => tracing::warn!(target: "toolcage::guest", "{}", message.escape_debug()),
            Level::Error => {
                tracing::error!(target: "toolcage::guest", "{}", message.escape_debug())
            }
        }
        if self.observer.is_watched() {
            let level = match level {
                Level::Trace => LogLevel::Trace,
                Level::Debug => LogLevel::Debug,
                Level::Info => LogLevel::Info,
                Level::Warn => LogLevel::Warn,
                Level::Error => LogLevel::Error,
            };
            self.observer.send(GuestEvent::Log { level, message });
        }
    }

    fn progress(&mut self, message: String, fraction: Option<f32>) {
        if !self.admit_event() {
            return;
        }
        let message = truncate(self.redacted(message), MAX_EVENT_MESSAGE);
        let fraction = fraction
            .filter(|f| f.is_finite())
            .map(|f| f.clamp(0.0, 1.0));
        tracing::debug!(target: "toolcage::guest", fraction, "progress: {}", message.escape_debug());
        self.observer
            .send(GuestEvent::Progress { message, fraction });
    }
}

impl CallState {
    /// `message` with the operator's secrets redacted (and counted).
    fn redacted(&self, message: String) -> String {
        redacted(self.redactor.as_deref(), &self.meter, message)
    }

    fn admit_event(&mut self) -> bool {
        self.guest_events += 1;
        if self.guest_events == MAX_GUEST_EVENTS + 1 {
            tracing::warn!(
                "the tool sent more than {MAX_GUEST_EVENTS} log lines or progress reports; dropping the rest"
            );
        }
        self.guest_events <= MAX_GUEST_EVENTS
    }
}

/// `text` with the secrets `redactor` knows replaced, counted on `meter`.
fn redacted(redactor: Option<&Redactor>, meter: &Meter, text: String) -> String {
    match redactor.map(|r| r.text(&text)) {
        Some((std::borrow::Cow::Owned(redacted), n)) => {
            meter.redacted(n);
            redacted
        }
        _ => text,
    }
}

/// Caps linear memory and tables, summed over every memory and table of the
/// call's instances, and remembers refusals: a trap that follows a refusal
/// with no successful growth since is reported as
/// [`ErrorKind::MemoryLimit`]; a refusal the guest recovered from (it grew
/// again afterwards) leaves a later trap a trap, and only adds a note.
struct MemoryLimiter {
    /// The memory held, shared with the caller.
    peak: Arc<AtomicU64>,
    max_bytes: usize,
    memory_bytes: usize,
    table_elements: usize,
    refusal: Refusal,
}

/// Whether, and how recently, the limiter refused a growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Never.
    None,
    /// Refused, and the guest grew again afterwards.
    Recovered,
    /// Refused, and nothing grew since.
    Pending,
}

impl MemoryLimiter {
    fn new(max_bytes: usize, peak: Arc<AtomicU64>) -> Self {
        MemoryLimiter {
            peak,
            max_bytes,
            memory_bytes: 0,
            table_elements: 0,
            refusal: Refusal::None,
        }
    }

    /// Grows `total` by `desired - current` if the result stays within `max`.
    fn grow(
        total: &mut usize,
        current: usize,
        desired: usize,
        max: usize,
        refusal: &mut Refusal,
    ) -> bool {
        let grown = total.saturating_add(desired.saturating_sub(current));
        let allowed = grown <= max;
        if allowed {
            *total = grown;
            if *refusal == Refusal::Pending {
                *refusal = Refusal::Recovered;
            }
        } else {
            *refusal = Refusal::Pending;
        }
        allowed
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grown = Self::grow(
            &mut self.memory_bytes,
            current,
            desired,
            self.max_bytes,
            &mut self.refusal,
        );
        // Memories only grow: the total now is the peak. Kept outside the
        // store, so that a call stopped from outside still reports it.
        self.peak.store(self.memory_bytes as u64, Ordering::Relaxed);
        Ok(grown)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(Self::grow(
            &mut self.table_elements,
            current,
            desired,
            MAX_TABLE_ELEMENTS,
            &mut self.refusal,
        ))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// What the operator grants a component's calls.
#[derive(Debug, Clone)]
pub(crate) struct Grants {
    pub limits: Limits,
    pub mounts: Vec<Mount>,
    /// What the component may reach on the network; `None`: nothing.
    pub network: Option<Arc<NetPolicy>>,
    /// What `wasi:config/store` serves it; empty by default.
    pub settings: Arc<Settings>,
    /// The operator's secrets: redacted from what the call hands back.
    pub secrets: Secrets,
}

/// The size of a pool slot: what the limits allow one instance. Components
/// with the same shape share an engine and its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlotShape {
    pub stack_bytes: usize,
    pub memory_bytes: usize,
}

impl SlotShape {
    pub fn of(limits: &Limits) -> Self {
        SlotShape {
            stack_bytes: limits.stack_bytes,
            memory_bytes: limits.memory_bytes,
        }
    }
}

/// The filesystem a component's calls see: its mounts, opened once when the
/// registry was built and shared by every call (a clone is a few reference
/// counts, no system call). Two copies differ only in where file operations
/// run: on the calling thread, or on tokio's blocking pool.
#[derive(Clone)]
pub(crate) struct Files {
    inline: WasiFilesystemCtx,
    offloaded: WasiFilesystemCtx,
    mounts: Vec<(Mount, HeldDir)>,
}

impl Files {
    /// The filesystem of `mounts`, each opened through the directory held
    /// open for it; `None` when there are no mounts.
    pub fn new(mounts: Vec<(Mount, HeldDir)>) -> Result<Option<Files>, Error> {
        if mounts.is_empty() {
            return Ok(None);
        }
        let build = |inline: bool| -> Result<WasiFilesystemCtx, Error> {
            let mut wasi = WasiCtx::builder();
            wasi.allow_blocking_current_thread(inline);
            for (mount, held) in &mounts {
                let perms = if mount.is_writable() {
                    FsPerms::ReadWrite
                } else {
                    FsPerms::ReadOnly
                };
                wasi.preopened_dir(held.path(), mount.guest(), perms)
                    .map_err(|e| Error::Mount {
                        host: mount.host().to_path_buf(),
                        guest: mount.guest().to_string(),
                        reason: format!("{e:#}"),
                    })?;
            }
            Ok(wasi.build().filesystem().clone())
        };
        Ok(Some(Files {
            inline: build(true)?,
            offloaded: build(false)?,
            mounts,
        }))
    }

    /// The mounts whose host directory was removed since it was opened.
    pub fn removed(&self) -> impl Iterator<Item = &Mount> {
        self.mounts
            .iter()
            .filter(|(_, held)| held.is_removed())
            .map(|(mount, _)| mount)
    }
}

/// Everything a component's calls run with: its compiled template, the
/// operator's grants, and the runtime whose slots they take.
pub(crate) struct Sandbox {
    pub pre: Arc<ToolsetPre<CallState>>,
    pub grants: Grants,
    pub files: Option<Files>,
    pub runtime: Runtime,
}

/// How many calls may be stuck in a file operation after their caller gave
/// up before further calls stop blocking threads on file operations: past
/// it, their file operations run on tokio's blocking pool, which is slower
/// but lets a stuck call's slot go when its caller gives up.
const MAX_STUCK_WORKERS: usize = 4;

/// How long a call's end waits for its network connections to close (they
/// close as soon as the runtime polls their aborted tasks).
const CONNECTIONS_GRACE: Duration = Duration::from_millis(100);

/// How long a caller that gave up waits for its worker's own, more detailed
/// report (fuel used, logs) before answering without it.
const WORKER_GRACE: Duration = Duration::from_millis(20);

/// Runs `invocation` in a fresh instance from `sandbox`, within its limits
/// and seeing only its mounts, until it returns, breaches a limit, or
/// `cancel` fires.
///
/// A component without mounts cannot block the thread it runs on (its
/// clocks and streams are asynchronous, it has no files and no network), so
/// it runs on the caller's task. A component with mounts runs on a thread
/// of its own, where its file operations run directly, at full speed: when
/// the timeout or a cancellation fires while one of them hangs (a FIFO, a
/// stalled network mount), the caller gets its outcome at once and the
/// worker finishes on its own (see [`Runtime::stuck_calls`]).
pub(crate) async fn run(
    sandbox: &Arc<Sandbox>,
    invocation: Invocation,
    observer: Observer,
    cancel: Option<&CancelToken>,
) -> Ran {
    let started = Instant::now();
    let limits = &sandbox.grants.limits;
    let deadline = started + limits.timeout;
    let fuel_budget = limits.fuel.unwrap_or(u64::MAX);
    let run = Run {
        stdout: CappedPipe::new(limits.log_bytes),
        stderr: CappedPipe::new(limits.log_bytes),
        // Fuel left, sampled at every epoch tick, so a call stopped from
        // outside still reports what it used. Only a lower bound: compiled
        // code keeps the fuel counter in a register and stores it back at
        // calls, so a tight loop shows the fuel of its last call.
        fuel_left: Arc::new(AtomicU64::new(fuel_budget)),
        memory_refused: Arc::default(),
        peak_memory: Arc::default(),
        meter: Arc::default(),
        redactor: sandbox.grants.secrets.current().redactor().cloned(),
        deadline,
    };
    let loading = matches!(invocation, Invocation::Describe);
    let watched = observer.clone();
    let admission = admit(sandbox, deadline, cancel, loading).await;
    // A call that found a slot free waited for none.
    let slot_wait = match &admission {
        Ok((_, false)) => Duration::ZERO,
        _ => started.elapsed(),
    };
    let result = match admission {
        Err(stopped) => Err(stopped),
        Ok((slot, _)) => {
            let runtime = &sandbox.runtime;
            match &sandbox.files {
                Some(files) if runtime.stuck_calls() < MAX_STUCK_WORKERS => {
                    let fs = files.inline.clone();
                    on_worker(
                        sandbox, invocation, observer, cancel, &run, fs, slot, deadline,
                    )
                    .await
                }
                files => {
                    let fs = files.as_ref().map(|f| f.offloaded.clone());
                    let guest = guest(sandbox.clone(), invocation, observer, run.clone(), fs);
                    let result = bounded(guest, deadline, cancel, limits).await;
                    drop(slot);
                    result
                }
            }
        }
    };
    // Nothing of the call outlives it: its caller hears no more of it (a
    // worker stuck in a file operation may hold its store for long), its
    // network work is stopped and its connections are closed before its
    // outcome is reported.
    watched.detach();
    run.meter.end();
    run.meter.closed(CONNECTIONS_GRACE).await;
    let logs = Logs {
        stdout: run
            .stdout
            .redacted_text(run.redactor.as_deref(), &run.meter),
        stderr: run
            .stderr
            .redacted_text(run.redactor.as_deref(), &run.meter),
        truncated: run.stdout.truncated() || run.stderr.truncated(),
    };
    Ran {
        result,
        fuel_used: fuel_budget - run.fuel_left.load(Ordering::Relaxed),
        duration: started.elapsed(),
        peak_memory_bytes: run.peak_memory.load(Ordering::Relaxed),
        slot_wait,
        logs,
        memory_refused: run.memory_refused.load(Ordering::Relaxed),
        net: run.meter.usage(),
        redactor: run.redactor,
    }
}

/// What a run shares between the guest and its caller.
#[derive(Clone)]
struct Run {
    stdout: CappedPipe,
    stderr: CappedPipe,
    fuel_left: Arc<AtomicU64>,
    memory_refused: Arc<AtomicBool>,
    /// The instance's linear memory, in bytes, as the limiter last saw it.
    peak_memory: Arc<AtomicU64>,
    meter: Arc<Meter>,
    /// What redacts the operator's secrets from what the call hands back.
    redactor: Option<Arc<Redactor>>,
    deadline: Instant,
}

/// Waits for a free slot, within the call's own deadline.
async fn admit(
    sandbox: &Sandbox,
    deadline: Instant,
    cancel: Option<&CancelToken>,
    loading: bool,
) -> Result<(OwnedSemaphorePermit, bool), Stopped> {
    let runtime = &sandbox.runtime;
    if !cancel.is_some_and(CancelToken::is_cancelled)
        && let Some(slot) = runtime.free_slot(loading)
    {
        return Ok((slot, false));
    }
    tokio::select! {
        biased;
        () = cancelled(cancel) => Err(cancelled_stop()),
        slot = runtime.slot(deadline, loading) => slot.map(|slot| (slot, true)).ok_or_else(|| Stopped {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host was busy: all {} sandbox slots stayed in use for the tool's whole time limit of {}, so it never started. Try again later.",
                runtime.max_concurrent_calls(),
                human_duration(sandbox.grants.limits.timeout),
            ),
        }),
    }
}

/// Runs the guest on a blocking-pool thread, and gives up on it at the
/// deadline or on cancellation even if it is stuck in a file operation.
#[allow(clippy::too_many_arguments)]
async fn on_worker(
    sandbox: &Arc<Sandbox>,
    invocation: Invocation,
    observer: Observer,
    cancel: Option<&CancelToken>,
    run: &Run,
    fs: WasiFilesystemCtx,
    slot: OwnedSemaphorePermit,
    deadline: Instant,
) -> Result<Returned, Stopped> {
    let (sender, mut receiver) = tokio::sync::oneshot::channel();
    let state = Arc::new(AtomicU8::new(RUNNING));
    let stuck = sandbox.runtime.stuck_counter().clone();
    let guest = guest(sandbox.clone(), invocation, observer, run.clone(), Some(fs));
    let (worker_state, worker_cancel) = (state.clone(), cancel.cloned());
    let limits = sandbox.grants.limits;
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let result = handle.block_on(bounded(guest, deadline, worker_cancel.as_ref(), &limits));
        // The instance is gone: its slot can serve another call.
        drop(slot);
        if worker_state.swap(DONE, Ordering::AcqRel) == ABANDONED {
            stuck.fetch_sub(1, Ordering::Relaxed);
        }
        sender.send(result).ok();
    });
    let gave_up = tokio::select! {
        biased;
        result = &mut receiver => return result.unwrap_or_else(|_| Err(worker_failed())),
        () = cancelled(cancel) => cancelled_stop(),
        () = tokio::time::sleep_until(deadline.into()) => timeout_stop(&limits),
    };
    // The worker stops at the same moment unless a file operation holds it.
    if let Ok(result) = tokio::time::timeout(WORKER_GRACE, &mut receiver).await {
        return result.unwrap_or_else(|_| Err(worker_failed()));
    }
    let stuck = sandbox.runtime.stuck_counter();
    stuck.fetch_add(1, Ordering::Relaxed);
    if state
        .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        stuck.fetch_sub(1, Ordering::Relaxed);
    } else {
        tracing::warn!(
            stuck = stuck.load(Ordering::Relaxed),
            "a call was given up while its tool was blocked in a file operation (a FIFO or a stalled mount?); its thread and slot stay taken until the operation returns"
        );
    }
    Err(gave_up)
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

fn worker_failed() -> Stopped {
    Stopped {
        kind: ErrorKind::Trap,
        message: "The tool's worker thread failed before it reported an outcome.".into(),
    }
}

fn cancelled_stop() -> Stopped {
    Stopped {
        kind: ErrorKind::Cancelled,
        message: "The call was cancelled before it finished.".into(),
    }
}

fn timeout_stop(limits: &Limits) -> Stopped {
    Stopped {
        kind: ErrorKind::Timeout,
        message: format!(
            "The tool did not finish within its time limit of {} and was stopped. Ask for less work per call, or a narrower request.",
            human_duration(limits.timeout)
        ),
    }
}

/// `guest`, stopped by `cancel` or at `deadline`.
async fn bounded(
    guest: impl Future<Output = Result<Returned, Stopped>>,
    deadline: Instant,
    cancel: Option<&CancelToken>,
    limits: &Limits,
) -> Result<Returned, Stopped> {
    tokio::select! {
        biased;
        () = cancelled(cancel) => Err(cancelled_stop()),
        ran = tokio::time::timeout_at(deadline.into(), guest) => {
            ran.unwrap_or_else(|_| Err(timeout_stop(limits)))
        }
    }
}

/// Instantiates the component in a fresh store and runs `invocation`.
async fn guest(
    sandbox: Arc<Sandbox>,
    invocation: Invocation,
    observer: Observer,
    run: Run,
    fs: Option<WasiFilesystemCtx>,
) -> Result<Returned, Stopped> {
    let limits = &sandbox.grants.limits;
    // The most one host call may copy out of the guest: its outcome, a log
    // line, a WASI request.
    let transfer_cap = match invocation {
        Invocation::Describe => MAX_DESCRIBE_BYTES,
        Invocation::Call { .. } => limits.output_bytes.saturating_add(TRANSFER_SLACK),
    };
    let mut store = new_store(&sandbox, &run, fs, observer, transfer_cap).map_err(|e| Stopped {
        kind: ErrorKind::Trap,
        message: format!("The sandbox could not be set up ({e:#})."),
    })?;
    let returned = async {
        let toolset = sandbox.pre.instantiate_async(&mut store).await?;
        let tool = toolset.toolcage_tool_tool();
        Ok(match &invocation {
            Invocation::Describe => Returned::Descriptors(tool.call_describe(&mut store).await?),
            Invocation::Call {
                tool: name,
                arguments,
            } => Returned::Outcome(tool.call_call(&mut store, name, arguments).await?),
        })
    }
    .await;
    run.fuel_left
        .store(store.get_fuel().unwrap_or(0), Ordering::Relaxed);
    let refusal = store.data().limiter.refusal;
    run.memory_refused
        .store(refusal != Refusal::None, Ordering::Relaxed);
    returned.map_err(|error| classify(error, refusal, limits, transfer_cap))
}

async fn cancelled(cancel: Option<&CancelToken>) {
    match cancel {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

fn new_store(
    sandbox: &Sandbox,
    run: &Run,
    fs: Option<WasiFilesystemCtx>,
    observer: Observer,
    transfer_cap: usize,
) -> wasmtime::Result<Store<CallState>> {
    let limits = &sandbox.grants.limits;
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_WASI_RESOURCES);
    // The host's notes (network refusals) go to the call's stderr and
    // events, as the guest's own lines do.
    let notes = {
        let (stderr, observer) = (run.stderr.clone(), observer.clone());
        let (redactor, meter) = (run.redactor.clone(), run.meter.clone());
        Arc::new(move |message: String| {
            let message = redacted(redactor.as_deref(), &meter, message);
            stderr.append_line(&message);
            observer.send(GuestEvent::Log {
                level: LogLevel::Warn,
                message,
            });
        })
    };
    let egress = Egress::new(
        sandbox.grants.network.clone(),
        limits,
        run.deadline.into(),
        run.meter.clone(),
        notes,
        run.redactor.clone(),
    );
    let sockets = egress.sockets();
    let mut wasi = WasiCtx::builder();
    wasi.stdout(run.stdout.clone()).stderr(run.stderr.clone());
    sockets.configure(&mut wasi);
    let mut wasi = wasi.build();
    if let Some(fs) = fs {
        *wasi.filesystem() = fs;
    }
    let state = CallState {
        wasi,
        http: WasiHttpCtx::new(),
        egress,
        sockets,
        table,
        limiter: MemoryLimiter::new(limits.memory_bytes, run.peak_memory.clone()),
        observer,
        guest_events: 0,
        settings: sandbox.grants.settings.clone(),
        redactor: run.redactor.clone(),
        meter: run.meter.clone(),
    };
    let mut store = Store::new(sandbox.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(transfer_cap);
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX))?;
    store.set_epoch_deadline(1);
    let fuel_left = run.fuel_left.clone();
    store.epoch_deadline_callback(move |store| {
        fuel_left.store(store.get_fuel().unwrap_or(0), Ordering::Relaxed);
        // Give the executor a chance to notice a timeout or a cancellation.
        Ok(UpdateDeadline::Yield(1))
    });
    Ok(store)
}

/// Turns a guest failure into the error kind and message a model reads.
fn classify(
    error: wasmtime::Error,
    refusal: Refusal,
    limits: &Limits,
    transfer_cap: usize,
) -> Stopped {
    let trap = error.downcast_ref::<Trap>().copied();
    // wasmtime 48 reports a breached hostcall fuel (`set_hostcall_fuel`) only
    // as this message.
    if trap.is_none() && format!("{error:#}").contains("too much data is being copied") {
        return Stopped {
            kind: ErrorKind::OutputLimit,
            message: format!(
                "The tool tried to hand the host more than {} at once and was stopped. Ask for less: a narrower query, a smaller range, or fewer results.",
                human_bytes(transfer_cap)
            ),
        };
    }
    // Admission keeps every call within the pool's room, so this is a bug,
    // but still only this call's failure.
    if error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        return Stopped {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host was busy and could not start the tool ({error}). Try again later."
            ),
        };
    }
    if trap == Some(Trap::OutOfFuel) {
        return Stopped {
            kind: ErrorKind::OutOfFuel,
            message: format!(
                "The tool ran out of fuel (its budget of {} instructions) and was stopped. Ask for less work per call, or a narrower request.",
                limits.fuel.unwrap_or(u64::MAX)
            ),
        };
    }
    if refusal == Refusal::Pending {
        return Stopped {
            kind: ErrorKind::MemoryLimit,
            message: format!(
                "The tool tried to use more than its memory limit of {} and was stopped. Ask for a smaller input or a narrower request.",
                human_bytes(limits.memory_bytes)
            ),
        };
    }
    let root_cause = error.root_cause().to_string();
    let reason = match trap {
        Some(Trap::StackOverflow) => "it overflowed its stack (too deep a recursion)".to_string(),
        Some(trap) => trap.to_string(),
        None if error
            .downcast_ref::<wasmtime::component::ResourceTableError>()
            .is_some() =>
        {
            format!(
                "it held more than {MAX_WASI_RESOURCES} open files, directories or streams at once"
            )
        }
        None => root_cause,
    };
    Stopped {
        kind: ErrorKind::Trap,
        message: format!("The tool crashed: {reason}."),
    }
}

/// A guest output stream kept in memory up to a capacity. Writes past it are
/// accepted and dropped, so a flood of output truncates but never fails.
#[derive(Clone)]
struct CappedPipe {
    inner: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    capacity: usize,
    truncated: bool,
}

impl CappedPipe {
    fn new(capacity: usize) -> Self {
        CappedPipe {
            inner: Arc::new(Mutex::new(Captured {
                bytes: Vec::new(),
                capacity,
                truncated: false,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().bytes).into_owned()
    }

    /// The text with the secrets `redactor` knows replaced, counted on
    /// `meter`: also a secret's start where the stream was cut.
    fn redacted_text(&self, redactor: Option<&Redactor>, meter: &Meter) -> String {
        let text = self.text();
        match redactor {
            None => text,
            Some(redactor) if self.truncated() => {
                let (text, n) = redactor.cut_text(&text);
                meter.redacted(n);
                text
            }
            Some(redactor) => redacted(Some(redactor), meter, text),
        }
    }

    /// Appends `line` and a newline, as far as the capacity allows.
    fn append_line(&self, line: &str) {
        let mut captured = self.lock();
        for part in [line.as_bytes(), b"\n"] {
            let room = captured.capacity.saturating_sub(captured.bytes.len());
            let kept = part.len().min(room);
            captured.bytes.extend_from_slice(&part[..kept]);
            captured.truncated |= kept < part.len();
        }
    }

    fn truncated(&self) -> bool {
        self.lock().truncated
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut captured = self.lock();
        let room = captured.capacity.saturating_sub(captured.bytes.len());
        let kept = buf.len().min(room);
        captured.bytes.extend_from_slice(&buf[..kept]);
        captured.truncated |= kept < buf.len();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `text`, cut at `max` bytes (at a character boundary) with `…` added.
pub(super) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `1.5 MiB`, `256 MiB`, `900 B`.
pub(crate) fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn human_duration(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn capped_pipe_truncates_without_failing() {
        let pipe = CappedPipe::new(4);
        let mut writer = pipe.clone();
        writer.write_all(b"abc").await.unwrap();
        writer.write_all(b"defgh").await.unwrap();
        assert_eq!(pipe.text(), "abcd");
        assert!(pipe.truncated());
    }

    #[test]
    fn the_memory_limit_counts_every_memory() {
        let mut limiter = MemoryLimiter::new(64 << 20, Arc::default());
        assert!(limiter.memory_growing(0, 40 << 20, None).unwrap());
        assert!(
            limiter.memory_growing(40 << 20, 48 << 20, None).unwrap(),
            "growing the same memory"
        );
        assert!(
            !limiter.memory_growing(0, 40 << 20, None).unwrap(),
            "a second memory shares the budget"
        );
        assert_eq!(limiter.refusal, Refusal::Pending);
        assert!(
            limiter.memory_growing(0, 16 << 20, None).unwrap(),
            "what is left is still usable"
        );
        assert_eq!(limiter.refusal, Refusal::Recovered, "the guest grew again");
        assert!(
            !limiter
                .table_growing(0, MAX_TABLE_ELEMENTS + 1, None)
                .unwrap()
        );
        assert_eq!(limiter.refusal, Refusal::Pending);
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h…");
        assert_eq!(truncate("hi".into(), 2), "hi");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
    }
}
