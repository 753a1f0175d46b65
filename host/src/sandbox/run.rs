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
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::filesystem::WasiFilesystemCtx;
use wasmtime_wasi::{FsPerms, WasiCtx};
use wasmtime_wasi_http::WasiHttpCtx;

use super::bindings::{ToolsetPre, WitDescriptor, WitOutcome};
use super::limits::Limits;
use super::mount::{HeldDir, Mount, MountError};
use super::net::{Egress, Meter, NetPolicy, NetUsage, redacted};
use super::outcome::{CancelToken, ErrorKind, GuestEvent, GuestEvents, LogLevel, Logs, Observer};
use super::secrets::Secrets;
use super::secrets::redact::Redactor;
use super::settings::ComponentSettings;
use super::slots::{Slot, Slots};
use super::state::{
    CallState, CappedPipe, GrowthRefusals, MAX_COMPONENT_HANDLES, MAX_WASI_RESOURCES, MemoryLimiter,
};
use super::text::{human_bytes, human_duration};

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
    let deadline = started + limits.timeout;
    let fuel_budget = limits.fuel.unwrap_or(u64::MAX);
    let capture = Capture {
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
        Err(abort) => Err(abort),
        Ok((slot, _)) => match &sandbox.files {
            Some(files) if sandbox.slots.stuck() < MAX_STUCK_WORKERS => {
                let fs = files.inline.clone();
                on_worker(
                    sandbox, invocation, observer, cancel, &capture, fs, slot, deadline,
                )
                .await
            }
            files => {
                let fs = files.as_ref().map(|f| f.offloaded.clone());
                let guest = guest(sandbox.clone(), invocation, observer, capture.clone(), fs);
                let result = bounded(guest, deadline, cancel, limits).await;
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
        fuel_used: fuel_budget - capture.fuel_left.load(Ordering::Relaxed),
        duration: started.elapsed(),
        peak_memory_bytes: capture.peak_memory.load(Ordering::Relaxed),
        slot_wait,
        logs,
        memory_refused: capture.memory_refused.load(Ordering::Relaxed),
        net: capture.meter.usage(),
        redactor: capture.redactor,
    }
}

/// What a run shares between the guest and its caller.
#[derive(Clone)]
struct Capture {
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
) -> Result<(Slot, bool), Abort> {
    let slots = &sandbox.slots;
    if !cancel.is_some_and(CancelToken::is_cancelled)
        && let Some(slot) = slots.free(loading)
    {
        return Ok((slot, false));
    }
    tokio::select! {
        biased;
        () = cancelled(cancel) => Err(cancelled_abort()),
        slot = slots.wait(deadline, loading) => slot.map(|slot| (slot, true)).ok_or_else(|| Abort {
            kind: ErrorKind::Timeout,
            message: format!(
                "The host was busy: all {} sandbox slots stayed in use for the tool's whole time limit of {}, so it never started. Try again later.",
                slots.max_calls(),
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
    capture: &Capture,
    fs: WasiFilesystemCtx,
    slot: Slot,
    deadline: Instant,
) -> Result<GuestReturn, Abort> {
    let (sender, mut receiver) = tokio::sync::oneshot::channel();
    let state = Arc::new(AtomicU8::new(RUNNING));
    let stuck = sandbox.slots.stuck_counter().clone();
    let guest = guest(
        sandbox.clone(),
        invocation,
        observer,
        capture.clone(),
        Some(fs),
    );
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
        () = cancelled(cancel) => cancelled_abort(),
        () = tokio::time::sleep_until(deadline.into()) => timeout_abort(&limits),
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

fn timeout_abort(limits: &Limits) -> Abort {
    Abort {
        kind: ErrorKind::Timeout,
        message: format!(
            "The tool did not finish within its time limit of {} and was stopped. Ask for less work per call, or a narrower request.",
            human_duration(limits.timeout)
        ),
    }
}

/// `guest`, stopped by `cancel` or at `deadline`.
async fn bounded(
    guest: impl Future<Output = Result<GuestReturn, Abort>>,
    deadline: Instant,
    cancel: Option<&CancelToken>,
    limits: &Limits,
) -> Result<GuestReturn, Abort> {
    tokio::select! {
        biased;
        () = cancelled(cancel) => Err(cancelled_abort()),
        ran = within(deadline, guest) => ran.unwrap_or_else(|| Err(timeout_abort(limits))),
    }
}

/// `future`'s output, or `None` once `deadline` passes. The timer is made
/// only when the future has to wait: most calls finish in their first poll,
/// and every tokio timer, even one never polled, takes the lock of the
/// runtime's one timer wheel when it is dropped, a lock that concurrent
/// callers would otherwise take on every call. (A guest that computes is
/// stopped at the deadline by the epoch interruption anyway; the timer is
/// for one waiting in the host.)
async fn within<F: Future>(deadline: Instant, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut timer = std::pin::pin!(None::<tokio::time::Sleep>);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        if timer.is_none() {
            timer.set(Some(tokio::time::sleep_until(deadline.into())));
        }
        let expired = timer.as_mut().as_pin_mut().map(|timer| timer.poll(cx));
        match expired {
            Some(Poll::Ready(())) => Poll::Ready(None),
            _ => Poll::Pending,
        }
    })
    .await
}

/// Instantiates the component in a fresh store and runs `invocation`.
async fn guest(
    sandbox: Arc<Sandbox>,
    invocation: Invocation,
    observer: Observer,
    capture: Capture,
    fs: Option<WasiFilesystemCtx>,
) -> Result<GuestReturn, Abort> {
    let limits = &sandbox.grants.limits;
    // The most one host call may copy out of the guest: its outcome, a log
    // line, a WASI request.
    let transfer_cap = match invocation {
        Invocation::Describe => MAX_DESCRIBE_BYTES,
        Invocation::Call { .. } => limits.output_bytes.saturating_add(TRANSFER_SLACK),
    };
    let mut store =
        new_store(&sandbox, &capture, fs, observer, transfer_cap).map_err(|e| Abort {
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
            } => GuestReturn::Outcome(tool.call_call(&mut store, name, arguments).await?),
        })
    }
    .await;
    capture
        .fuel_left
        .store(store.get_fuel().unwrap_or(0), Ordering::Relaxed);
    let refusals = store.data().growth_refusals();
    capture
        .memory_refused
        .store(refusals != GrowthRefusals::None, Ordering::Relaxed);
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
    transfer_cap: usize,
) -> wasmtime::Result<Store<CallState>> {
    let limits = &sandbox.grants.limits;
    // The host's notes (network refusals) go to the call's stderr and
    // events, as the guest's own lines do.
    let notes = {
        let (stderr, observer) = (capture.stderr.clone(), observer.clone());
        let (redactor, meter) = (capture.redactor.clone(), capture.meter.clone());
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
        capture.deadline.into(),
        capture.meter.clone(),
        notes,
        capture.redactor.clone(),
    );
    let sockets = egress.sockets();
    let mut wasi = WasiCtx::builder();
    wasi.stdout(capture.stdout.clone())
        .stderr(capture.stderr.clone());
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
        table: CallState::table(),
        limiter: MemoryLimiter::new(limits.memory_bytes, capture.peak_memory.clone()),
        events: GuestEvents::new(observer, capture.redactor.clone(), capture.meter.clone()),
        settings: sandbox.grants.settings.clone(),
    };
    let mut store = Store::new(sandbox.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(transfer_cap);
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX))?;
    store.set_epoch_deadline(1);
    let fuel_left = capture.fuel_left.clone();
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

    #[tokio::test]
    async fn a_future_within_its_deadline_gives_its_output() {
        let past = Instant::now() - Duration::from_secs(1);
        // Ready at once: the deadline is not even looked at.
        assert_eq!(within(past, async { 7 }).await, Some(7));
        let soon = Instant::now() + Duration::from_secs(5);
        let waited = within(soon, async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            8
        });
        assert_eq!(waited.await, Some(8));
    }

    #[tokio::test]
    async fn a_future_still_waiting_at_its_deadline_is_given_up() {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(20);
        let never = within(deadline, std::future::pending::<()>());
        assert_eq!(never.await, None);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(20) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
