//! Running a call: admitting it to a slot, making its store, running the
//! guest within its limits, and reporting how it ended.
//!
//! Threat model: the guest is hostile and may never return. Its instance
//! lives in a pooled slot (see `engine`) that was reset to its initial
//! contents after its last use. A call waits for a free slot within its own
//! timeout (see `slots`), so a busy host delays calls but never fails them
//! with an allocator error. Fuel, memory, stack and an epoch-driven
//! wall-clock deadline stop it however it misbehaves, and each way it can
//! end becomes an [`ErrorKind`] and a message a model can act on, never a
//! panic or an `Err`. A component with mounts runs on a thread of its own,
//! where file operations run directly at full speed; should one hang, the
//! call's caller still gets its outcome at the deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::filesystem::WasiFilesystemCtx;
use wasmtime_wasi::{FsPerms, WasiCtx};
use wasmtime_wasi_http::WasiHttpCtx;

use super::bindings::{ToolsetPre, WitDescriptor, WitOutcome};
use super::limits::Limits;
use super::mount::{HeldDir, Mount, MountError};
use super::net::{Egress, Meter, NetPolicy, NetUsage};
use super::outcome::{CancelToken, ErrorKind, GuestEvent, GuestEvents, LogLevel, Logs, Observer};
use super::secrets::Secrets;
use super::secrets::redact::Redactor;
use super::settings::{ComponentSettings, SettingsCtx};
use super::slots::{OwnedSlot, Slot, Slots, Stalled};
use super::state::{
    CallState, CappedPipe, Gauges, GrowthRefusals, MAX_COMPONENT_HANDLES, MAX_WASI_RESOURCES,
    MemoryLimiter, Outputs,
};
use super::text::{human_bytes, human_duration};
use super::tools::{ToolCalls, ToolsCtx};

/// What one host call may copy out of the guest beyond the output limit: the
/// outcome's framing, and room for WASI requests.
const TRANSFER_SLACK: usize = 64 << 10;
/// What `describe()` may return, all descriptors together.
pub(crate) const MAX_DESCRIBE_BYTES: usize = 4 << 20;

/// What to run in the sandbox.
pub(crate) enum Invocation {
    Describe,
    Call {
        tool: String,
        arguments: String,
        /// What runs the calls the guest makes to other tools, when it may.
        tools: Option<Arc<dyn ToolCalls>>,
        /// The caller's deadline, for a nested call: it ends there at the
        /// latest, and is refused at once rather than wait for a slot that
        /// cannot free (see `slots`).
        caller_deadline: Option<Instant>,
        /// The time the call's run took in its earlier attempts (a run
        /// paused for an answer): it counts against the timeout.
        spent: Duration,
    },
}

impl Invocation {
    fn caller_deadline(&self) -> Option<Instant> {
        match self {
            Invocation::Call {
                caller_deadline, ..
            } => *caller_deadline,
            Invocation::Describe => None,
        }
    }

    fn spent(&self) -> Duration {
        match self {
            Invocation::Call { spent, .. } => *spent,
            Invocation::Describe => Duration::ZERO,
        }
    }
}

/// What the guest returned.
pub(crate) enum GuestReturn {
    Descriptors(Vec<WitDescriptor>),
    Outcome(Result<WitOutcome, WitOutcome>),
}

/// Why a run ended without a return value.
#[derive(Debug)]
pub(crate) struct Abort {
    pub kind: ErrorKind,
    pub message: String,
}

/// The record of one capture.
pub(crate) struct RunReport {
    pub result: Result<GuestReturn, Abort>,
    pub fuel_used: u64,
    pub duration: Duration,
    /// The most linear memory the instance held, in bytes.
    pub peak_memory_bytes: u64,
    /// How long the call waited for a sandbox slot.
    pub slot_wait: Duration,
    pub logs: Logs,
    /// Whether the memory limiter refused a growth during the capture.
    pub memory_refused: bool,
    /// What the run used of the network.
    pub net: NetUsage,
    /// What redacts the operator's secrets, when there are any: for what
    /// the caller makes of the outcome.
    pub redactor: Option<Arc<Redactor>>,
}

/// What the operator grants a component's calls.
#[derive(Debug, Clone)]
pub(crate) struct Grants {
    pub limits: Limits,
    pub mounts: Vec<Mount>,
    /// What the component may reach on the network; `None`: nothing.
    pub network: Option<Arc<NetPolicy>>,
    /// What `wasi:config/store` serves it; empty by default.
    pub settings: Arc<ComponentSettings>,
    /// The operator's secrets: redacted from what the call hands back.
    pub secrets: Secrets,
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
    pub fn new(mounts: Vec<(Mount, HeldDir)>) -> Result<Option<Files>, MountError> {
        if mounts.is_empty() {
            return Ok(None);
        }
        let build = |inline: bool| -> Result<WasiFilesystemCtx, MountError> {
            let mut wasi = WasiCtx::builder();
            wasi.allow_blocking_current_thread(inline);
            for (mount, held) in &mounts {
                let perms = if mount.is_writable() {
                    FsPerms::ReadWrite
                } else {
                    FsPerms::ReadOnly
                };
                wasi.preopened_dir(held.path(), mount.guest(), perms)
                    .map_err(|e| mount.unopenable(e.into()))?;
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

/// A compiled component, linked and ready to instantiate.
pub(crate) type Compiled = Arc<ToolsetPre<CallState>>;

/// Everything a component's calls run with: its compiled template, the
/// operator's grants, and the runtime's slots they take.
pub(crate) struct Sandbox {
    pub pre: Compiled,
    pub grants: Grants,
    pub files: Option<Files>,
    pub slots: Slots,
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
/// worker finishes on its own (see [`Runtime::stuck_calls`](crate::Runtime::stuck_calls)).
pub(crate) async fn run(
    sandbox: &Arc<Sandbox>,
    invocation: Invocation,
    observer: Observer,
    cancel: Option<&CancelToken>,
) -> RunReport {
    // A call that never waits would never give its thread back to the
    // runtime: take a unit of the task's cooperative budget, as a tokio
    // timer or semaphore would, so that a caller making call after call
    // still lets the runtime schedule (and other workers take) other tasks.
    tokio::task::consume_budget().await;
    let started = Instant::now();
    let limits = &sandbox.grants.limits;
    let timeout = (limits.timeout, invocation.spent());
    let (deadline, ends) = Ends::of(timeout, started, invocation.caller_deadline());
    let fuel_budget = limits.fuel.unwrap_or(u64::MAX);
    let capture = Capture {
        stdout: CappedPipe::new(limits.log_bytes),
        stderr: CappedPipe::new(limits.log_bytes),
        gauges: Arc::new(Gauges {
            fuel_left: AtomicU64::new(fuel_budget),
            ..Gauges::default()
        }),
        meter: Arc::default(),
        redactor: sandbox.grants.secrets.redactor(),
        deadline,
    };
    let loading = matches!(invocation, Invocation::Describe);
    let watched = observer.clone();
    let admission = admit(sandbox, deadline, cancel, loading, ends).await;
    // A call that found a slot free waited for none.
    let slot_wait = match &admission {
        Ok((_, false)) => Duration::ZERO,
        _ => started.elapsed(),
    };
    let result = match admission {
        Err(abort) => Err(abort),
        Ok((slot, _)) => match &sandbox.files {
            Some(files) if sandbox.slots.stuck() < MAX_STUCK_WORKERS => {
                let fs = files.inline.clone();
                let at = (deadline, ends);
                // Boxed, as `admit`'s wait: only the calls that take this
                // path carry its future.
                let slot = slot.owned();
                Box::pin(on_worker(
                    sandbox, invocation, observer, cancel, &capture, fs, slot, at,
                ))
                .await
            }
            files => {
                let fs = files.as_ref().map(|f| f.offloaded.clone());
                // Boxed: wasmtime's instantiation and call make the guest's
                // future some kilobytes, which every future above it would
                // otherwise hold, and copy at each move (see `calls` bench).
                let guest = Box::pin(guest(sandbox, invocation, observer, capture.clone(), fs));
                let result = bounded(guest, deadline, cancel, ends).await;
                drop(slot);
                result
            }
        },
    };
    // Nothing of the call outlives it: its caller hears no more of it (a
    // worker stuck in a file operation may hold its store for long), its
    // network work is stopped and its connections are closed before its
    // outcome is reported.
    watched.detach();
    capture.meter.end();
    capture.meter.closed(CONNECTIONS_GRACE).await;
    let logs = Logs {
        stdout: capture
            .stdout
            .redacted_text(capture.redactor.as_deref(), &capture.meter),
        stderr: capture
            .stderr
            .redacted_text(capture.redactor.as_deref(), &capture.meter),
        truncated: capture.stdout.truncated() || capture.stderr.truncated(),
    };
    RunReport {
        result,
        fuel_used: fuel_budget - capture.gauges.fuel_left.load(Ordering::Relaxed),
        duration: started.elapsed(),
        peak_memory_bytes: capture.gauges.peak_memory.load(Ordering::Relaxed),
        slot_wait,
        logs,
        memory_refused: capture.gauges.memory_refused.load(Ordering::Relaxed),
        net: capture.meter.usage(),
        redactor: capture.redactor,
    }
}

/// What a run shares between the guest and its caller.
#[derive(Clone)]
struct Capture {
    stdout: CappedPipe,
    stderr: CappedPipe,
    gauges: Arc<Gauges>,
    meter: Arc<Meter>,
    /// What redacts the operator's secrets from what the call hands back.
    redactor: Option<Arc<Redactor>>,
    deadline: Instant,
}

/// A free slot, or one waited for until `deadline`, when time `ends`
/// (then `true`); a nested call is refused at once when every slot is held
/// by a waiting caller.
async fn admit<'s>(
    sandbox: &'s Sandbox,
    deadline: Instant,
    cancel: Option<&CancelToken>,
    loading: bool,
    ends: Ends,
) -> Result<(Slot<'s>, bool), Abort> {
    if !cancel.is_some_and(CancelToken::is_cancelled)
        && let Some(slot) = sandbox.slots.free(loading)
    {
        return Ok((slot, false));
    }
    // Boxed: the wait's future is large, and most calls never wait, so
    // every call's future would otherwise hold (and move) it.
    let slots = &sandbox.slots;
    let waited = Box::pin(async move {
        let wait = async {
            match ends.nested {
                true => slots.wait_nested(deadline).await,
                false => Ok(slots.wait(deadline, loading).await),
            }
        };
        tokio::select! {
            biased;
            () = cancelled(cancel) => None,
            slot = wait => Some(slot),
        }
    })
    .await;
    match waited {
        None => Err(cancelled_abort()),
        Some(Ok(Some(slot))) => Ok((slot, true)),
        Some(Ok(None)) => Err(Abort {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host was busy: all {} sandbox slots stayed in use for the whole of {}, so the tool never started. Try again later.",
                slots.max_calls(),
                ends.describe(),
            ),
        }),
        Some(Err(Stalled)) => Err(Abort {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host could not start this nested call: all {} sandbox slots are held by calls waiting on the tools they called, so none can free until a nested call runs. Make fewer nested calls at once, or ask the operator for a higher `max_concurrent_calls`.",
                slots.max_calls(),
            ),
        }),
    }
}

/// What stops a call that runs out of time: its own timeout, or what its
/// caller had left (a nested call).
#[derive(Debug, Clone, Copy)]
struct Ends {
    time: Duration,
    /// What earlier attempts of the run took of its time limit.
    spent: Duration,
    /// The caller's time, shorter than the call's own.
    by_caller: bool,
    nested: bool,
}

impl Ends {
    /// For a call of `timeout` (of which earlier attempts of its run
    /// `spent` some), started at `started`, whose caller (if any) must be
    /// answered by `caller_deadline`; with the deadline.
    fn of(
        (timeout, spent): (Duration, Duration),
        started: Instant,
        caller_deadline: Option<Instant>,
    ) -> (Instant, Ends) {
        let own = started + timeout.saturating_sub(spent);
        let deadline = caller_deadline.map_or(own, |caller| caller.min(own));
        let ends = Ends {
            time: deadline.saturating_duration_since(started),
            spent,
            by_caller: deadline < own,
            nested: caller_deadline.is_some(),
        };
        (deadline, ends)
    }

    fn describe(self) -> String {
        match self.by_caller {
            true => format!("the {} its caller had left", human_duration(self.time)),
            false if self.spent.is_zero() => {
                format!("its time limit of {}", human_duration(self.time))
            }
            false => format!(
                "the {} left of its time limit, its run's earlier attempts (before it paused for an answer) having taken {}",
                human_duration(self.time),
                human_duration(self.spent)
            ),
        }
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
    capture: &Capture,
    fs: WasiFilesystemCtx,
    slot: OwnedSlot,
    (deadline, ends): (Instant, Ends),
) -> Result<GuestReturn, Abort> {
    let (sender, mut receiver) = tokio::sync::oneshot::channel();
    let state = Arc::new(AtomicU8::new(RUNNING));
    let stuck = sandbox.slots.stuck_counter().clone();
    let (worker_sandbox, capture) = (sandbox.clone(), capture.clone());
    let (worker_state, worker_cancel) = (state.clone(), cancel.cloned());
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let guest = guest(&worker_sandbox, invocation, observer, capture, Some(fs));
        let result = handle.block_on(bounded(guest, deadline, worker_cancel.as_ref(), ends));
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
        () = cancelled(cancel) => cancelled_abort(),
        () = tokio::time::sleep_until(deadline.into()) => timeout_abort(ends),
    };
    // The worker stops at the same moment unless a file operation holds it.
    if let Ok(result) = tokio::time::timeout(WORKER_GRACE, &mut receiver).await {
        return result.unwrap_or_else(|_| Err(worker_failed()));
    }
    let stuck = sandbox.slots.stuck_counter();
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

fn worker_failed() -> Abort {
    Abort {
        kind: ErrorKind::Trap,
        message: "The tool's worker thread failed before it reported an outcome.".into(),
    }
}

fn cancelled_abort() -> Abort {
    Abort {
        kind: ErrorKind::Cancelled,
        message: "The call was cancelled before it finished.".into(),
    }
}

fn timeout_abort(ends: Ends) -> Abort {
    Abort {
        kind: ErrorKind::Timeout,
        message: format!(
            "The tool did not finish within {} and was stopped. Ask for less work per call, or a narrower request.",
            ends.describe()
        ),
    }
}

/// `guest`, stopped by `cancel` or at `deadline`.
///
/// What waits (the timer, the cancellation's listener) is made only when
/// the guest has to wait: most calls finish in their first poll, and every
/// tokio timer, even one never polled, takes the lock of the runtime's one
/// timer wheel when it is dropped, a lock that concurrent callers would
/// otherwise take on every call. Both are boxed, so that a call's future
/// does not carry them either. (A guest that computes is stopped at the
/// deadline by the epoch interruption anyway; the timer is for one waiting
/// in the host.)
async fn bounded<T>(
    guest: impl Future<Output = Result<T, Abort>>,
    deadline: Instant,
    cancel: Option<&CancelToken>,
    ends: Ends,
) -> Result<T, Abort> {
    if cancel.is_some_and(CancelToken::is_cancelled) {
        return Err(cancelled_abort());
    }
    let mut guest = std::pin::pin!(guest);
    let mut waits: Option<Waits<'_>> = None;
    std::future::poll_fn(|cx| {
        // A cancellation comes first, once the guest has waited.
        if let Some(waits) = &mut waits
            && waits.cancelled.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(cancelled_abort()));
        }
        if let Poll::Ready(output) = guest.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        let waits = waits.get_or_insert_with(|| Waits {
            cancelled: Box::pin(cancelled(cancel)),
            timer: Box::pin(tokio::time::sleep_until(deadline.into())),
        });
        if waits.cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(cancelled_abort()));
        }
        match waits.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(timeout_abort(ends))),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// What a guest that waits is stopped by (see `bounded`).
struct Waits<'a> {
    cancelled: std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
}

/// Instantiates the component in a fresh store and runs `invocation`.
async fn guest(
    sandbox: &Sandbox,
    mut invocation: Invocation,
    observer: Observer,
    capture: Capture,
    fs: Option<WasiFilesystemCtx>,
) -> Result<GuestReturn, Abort> {
    let limits = &sandbox.grants.limits;
    // The most one host call may copy out of the guest: its outcome, a log
    // line, a WASI request.
    let (transfer_cap, tools) = match &mut invocation {
        Invocation::Describe => (MAX_DESCRIBE_BYTES, None),
        Invocation::Call { tools, .. } => (
            limits.output_bytes.saturating_add(TRANSFER_SLACK),
            tools.take(),
        ),
    };
    let tools = ToolsCtx::new(tools, capture.deadline, &sandbox.slots);
    let mut store =
        new_store(sandbox, &capture, fs, observer, tools, transfer_cap).map_err(|e| Abort {
            kind: ErrorKind::Trap,
            message: format!("The sandbox could not be set up ({e:#})."),
        })?;
    let returned = async {
        let toolset = sandbox.pre.instantiate_async(&mut store).await?;
        let tool = toolset.toolcage_tool_tool();
        Ok(match &invocation {
            Invocation::Describe => GuestReturn::Descriptors(tool.call_describe(&mut store).await?),
            Invocation::Call {
                tool: name,
                arguments,
                ..
            } => GuestReturn::Outcome(tool.call_call(&mut store, name, arguments).await?),
        })
    }
    .await;
    let gauges = &capture.gauges;
    let fuel_left = store.get_fuel().unwrap_or(0);
    gauges.fuel_left.store(fuel_left, Ordering::Relaxed);
    let refusals = store.data().growth_refusals();
    let refused = refusals != GrowthRefusals::None;
    gauges.memory_refused.store(refused, Ordering::Relaxed);
    returned.map_err(|error| classify(error, refusals, limits, transfer_cap))
}

async fn cancelled(cancel: Option<&CancelToken>) {
    match cancel {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

fn new_store(
    sandbox: &Sandbox,
    capture: &Capture,
    fs: Option<WasiFilesystemCtx>,
    observer: Observer,
    tools: ToolsCtx,
    transfer_cap: usize,
) -> wasmtime::Result<Store<CallState>> {
    let limits = &sandbox.grants.limits;
    // The host's notes (network refusals) go to the call's stderr and
    // events, as the guest's own lines do.
    // (`Egress` redacts them first.)
    let note = {
        let (stderr, observer) = (capture.stderr.clone(), observer.clone());
        move |message: String| {
            stderr.append_line(&message);
            observer.send(GuestEvent::Log {
                level: LogLevel::Warn,
                message,
            });
        }
    };
    let egress = Egress::new(
        sandbox.grants.network.clone(),
        limits,
        capture.deadline.into(),
        capture.meter.clone(),
        note,
        capture.redactor.clone(),
    );
    let sockets = egress.sockets();
    let mut wasi = sockets.wasi_ctx();
    if let Some(fs) = fs {
        *wasi.filesystem() = fs;
    }
    let state = CallState {
        wasi,
        outputs: Outputs {
            stdout: capture.stdout.clone(),
            stderr: capture.stderr.clone(),
        },
        http: WasiHttpCtx::new(),
        egress,
        sockets,
        table: CallState::table(),
        limiter: MemoryLimiter::new(limits.memory_bytes, capture.gauges.clone()),
        events: GuestEvents::new(observer, capture.redactor.clone(), capture.meter.clone()),
        settings: SettingsCtx::of(&sandbox.grants.settings),
        tools,
    };
    let mut store = Store::new(sandbox.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(transfer_cap);
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX))?;
    store.set_epoch_deadline(1);
    let gauges = capture.gauges.clone();
    store.epoch_deadline_callback(move |store| {
        let fuel_left = store.get_fuel().unwrap_or(0);
        gauges.fuel_left.store(fuel_left, Ordering::Relaxed);
        // Give the executor a chance to notice a timeout or a cancellation.
        Ok(UpdateDeadline::Yield(1))
    });
    Ok(store)
}

/// Turns a guest failure into the error kind and message a model reads.
fn classify(
    error: wasmtime::Error,
    refusals: GrowthRefusals,
    limits: &Limits,
    transfer_cap: usize,
) -> Abort {
    let trap = error.downcast_ref::<Trap>().copied();
    // wasmtime 48 reports a breached hostcall fuel (`set_hostcall_fuel`) only
    // as this message.
    if trap.is_none() && format!("{error:#}").contains("too much data is being copied") {
        return Abort {
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
        return Abort {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host was busy and could not start the tool ({error}). Try again later."
            ),
        };
    }
    if trap == Some(Trap::OutOfFuel) {
        return Abort {
            kind: ErrorKind::OutOfFuel,
            message: format!(
                "The tool ran out of fuel (its budget of {} instructions) and was stopped. Ask for less work per call, or a narrower request.",
                limits.fuel.unwrap_or(u64::MAX)
            ),
        };
    }
    if refusals == GrowthRefusals::Pending {
        return Abort {
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
    Abort {
        kind: ErrorKind::Trap,
        message: format!("The tool crashed: {reason}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> Ends {
        Ends::of(
            (Duration::from_millis(20), Duration::ZERO),
            Instant::now(),
            None,
        )
        .1
    }

    #[tokio::test]
    async fn a_guest_within_its_deadline_gives_its_output() {
        let past = Instant::now() - Duration::from_secs(1);
        // Ready at once: the deadline is not even looked at.
        let ready = bounded(async { Ok(7) }, past, None, ends());
        assert_eq!(ready.await.unwrap(), 7);
        let soon = Instant::now() + Duration::from_secs(5);
        let waited = bounded(
            async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(8)
            },
            soon,
            None,
            ends(),
        );
        assert_eq!(waited.await.unwrap(), 8);
    }

    #[tokio::test]
    async fn a_guest_still_waiting_at_its_deadline_is_given_up() {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(20);
        let never = bounded(
            std::future::pending::<Result<(), Abort>>(),
            deadline,
            None,
            ends(),
        );
        assert_eq!(never.await.unwrap_err().kind, ErrorKind::Timeout);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(20) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_waiting_guest_is_stopped_by_its_cancellation() {
        let token = CancelToken::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let cancelled = bounded(
            std::future::pending::<Result<(), Abort>>(),
            deadline,
            Some(&token),
            ends(),
        );
        let cancelling = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            token.cancel();
        };
        let (stopped, ()) = tokio::join!(cancelled, cancelling);
        assert_eq!(stopped.unwrap_err().kind, ErrorKind::Cancelled);
        // Cancelled before it starts: it never runs.
        let never_polled = bounded(async { panic!("runs") }, deadline, Some(&token), ends());
        let never: Result<(), Abort> = never_polled.await;
        assert_eq!(never.unwrap_err().kind, ErrorKind::Cancelled);
    }
}
