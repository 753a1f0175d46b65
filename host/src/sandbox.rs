//! One sandbox per call: a fresh Store, WASI context and set of limits.
//!
//! Threat model: the guest is hostile. It gets a new instance for every call
//! (so nothing it does survives into the next call or leaks into a concurrent
//! one) and, by default, nothing of the host: no environment variables, no
//! arguments, an empty stdin, no filesystem, and no network (TCP, UDP and
//! name lookup are all denied). The operator's mounts are its only files.
//! Its stdout and stderr go to bounded in-memory buffers, never to the host's
//! own streams. Its `log` and `progress` imports are bounded in count and
//! size, so they cannot flood the host's logs. Fuel, memory, stack and an
//! epoch-driven wall-clock deadline stop it however it misbehaves.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{Level, ToolsetPre, WitDescriptor, WitOutcome, toolcage};
use crate::{CancelToken, ErrorKind, GuestEvent, Limits, LogLevel, Logs, Mount};

/// The most `log` lines and `progress` reports a call may make; later ones
/// are dropped.
const MAX_GUEST_EVENTS: usize = 1_000;
/// The longest `log` or `progress` message kept, in bytes.
const MAX_EVENT_MESSAGE: usize = 4 << 10;
/// The most table elements a call's instances may hold, all tables together.
const MAX_TABLE_ELEMENTS: usize = 100_000;
/// The most core instances, linear memories and tables a component may
/// create: enough for any toolchain's output, few enough that nobody can
/// multiply the memory limit by declaring many memories.
const MAX_INSTANCES: usize = 64;
const MAX_MEMORIES: usize = 8;
const MAX_TABLES: usize = 32;
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
    pub logs: Logs,
}

/// Where the guest's `log` and `progress` go, and what they are tagged with.
#[derive(Clone)]
pub(crate) struct Observer {
    pub events: Option<Arc<dyn Fn(GuestEvent) + Send + Sync>>,
}

/// The data of a call's Store.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    observer: Observer,
    guest_events: usize,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl toolcage::tool::host::Host for CallState {
    fn log(&mut self, level: Level, message: String) {
        if !self.admit_event() {
            return;
        }
        let message = truncate(message, MAX_EVENT_MESSAGE);
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
        if let Some(events) = &self.observer.events {
            let level = match level {
                Level::Trace => LogLevel::Trace,
                Level::Debug => LogLevel::Debug,
                Level::Info => LogLevel::Info,
                Level::Warn => LogLevel::Warn,
                Level::Error => LogLevel::Error,
            };
            events(GuestEvent::Log { level, message });
        }
    }

    fn progress(&mut self, message: String, fraction: Option<f32>) {
        if !self.admit_event() {
            return;
        }
        let message = truncate(message, MAX_EVENT_MESSAGE);
        let fraction = fraction
            .filter(|f| f.is_finite())
            .map(|f| f.clamp(0.0, 1.0));
        tracing::debug!(target: "toolcage::guest", fraction, "progress: {}", message.escape_debug());
        if let Some(events) = &self.observer.events {
            events(GuestEvent::Progress { message, fraction });
        }
    }
}

impl CallState {
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

/// Caps linear memory and tables, summed over every memory and table of the
/// call's instances, and remembers whether the cap was hit so a resulting
/// trap is reported as [`ErrorKind::MemoryLimit`].
struct MemoryLimiter {
    max_bytes: usize,
    memory_bytes: usize,
    table_elements: usize,
    hit: bool,
}

impl MemoryLimiter {
    /// Grows `total` by `desired - current` if the result stays within `max`.
    fn grow(total: &mut usize, current: usize, desired: usize, max: usize, hit: &mut bool) -> bool {
        let grown = total.saturating_add(desired.saturating_sub(current));
        let allowed = grown <= max;
        if allowed {
            *total = grown;
        }
        *hit |= !allowed;
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
        Ok(Self::grow(
            &mut self.memory_bytes,
            current,
            desired,
            self.max_bytes,
            &mut self.hit,
        ))
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
            &mut self.hit,
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
    /// Run WASI file operations on the calling thread rather than on tokio's
    /// blocking pool (see `RegistryBuilder::blocking_file_io`).
    pub blocking_file_io: bool,
}

/// Runs `invocation` in a fresh instance of `pre`, within `grants`' limits
/// and seeing only its mounts, until it returns, breaches a limit, or
/// `cancel` fires.
pub(crate) async fn run(
    pre: &ToolsetPre<CallState>,
    grants: &Grants,
    invocation: Invocation,
    observer: Observer,
    cancel: Option<&CancelToken>,
) -> Ran {
    let started = Instant::now();
    let limits = &grants.limits;
    // The most one host call may copy out of the guest: its outcome, a log
    // line, a WASI request.
    let transfer_cap = match invocation {
        Invocation::Describe => MAX_DESCRIBE_BYTES,
        Invocation::Call { .. } => limits.output_bytes.saturating_add(TRANSFER_SLACK),
    };
    let stdout = CappedPipe::new(limits.log_bytes);
    let stderr = CappedPipe::new(limits.log_bytes);
    let fuel_budget = limits.fuel.unwrap_or(u64::MAX);
    // Fuel left, sampled at every epoch tick, so a call stopped from outside
    // still reports what it used. Only a lower bound: compiled code keeps the
    // fuel counter in a register and stores it back at calls, so a tight loop
    // shows the fuel of its last call.
    let fuel_left = Arc::new(AtomicU64::new(fuel_budget));

    let guest = async {
        let mut store = new_store(
            pre,
            grants,
            &stdout,
            &stderr,
            observer,
            fuel_left.clone(),
            transfer_cap,
        )
        .map_err(|e| Stopped {
            kind: ErrorKind::Trap,
            message: format!(
                "The sandbox could not be set up ({e:#}); a mounted directory may have gone away."
            ),
        })?;
        let returned = async {
            let toolset = pre.instantiate_async(&mut store).await?;
            let tool = toolset.toolcage_tool_tool();
            Ok(match &invocation {
                Invocation::Describe => {
                    Returned::Descriptors(tool.call_describe(&mut store).await?)
                }
                Invocation::Call {
                    tool: name,
                    arguments,
                } => Returned::Outcome(tool.call_call(&mut store, name, arguments).await?),
            })
        }
        .await;
        fuel_left.store(store.get_fuel().unwrap_or(0), Ordering::Relaxed);
        returned.map_err(|error| classify(error, store.data().limiter.hit, limits, transfer_cap))
    };

    let result = tokio::select! {
        biased;
        () = cancelled(cancel) => Err(Stopped {
            kind: ErrorKind::Cancelled,
            message: "The call was cancelled before it finished.".into(),
        }),
        ran = tokio::time::timeout(limits.timeout, guest) => ran.unwrap_or_else(|_| Err(Stopped {
            kind: ErrorKind::Timeout,
            message: format!(
                "The tool did not finish within its time limit of {} and was stopped. Ask for less work per call, or a narrower request.",
                human_duration(limits.timeout)
            ),
        })),
    };

    Ran {
        result,
        fuel_used: fuel_budget - fuel_left.load(Ordering::Relaxed),
        duration: started.elapsed(),
        logs: Logs {
            stdout: stdout.text(),
            stderr: stderr.text(),
            truncated: stdout.truncated() || stderr.truncated(),
        },
    }
}

async fn cancelled(cancel: Option<&CancelToken>) {
    match cancel {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

fn new_store(
    pre: &ToolsetPre<CallState>,
    grants: &Grants,
    stdout: &CappedPipe,
    stderr: &CappedPipe,
    observer: Observer,
    fuel_left: Arc<AtomicU64>,
    transfer_cap: usize,
) -> wasmtime::Result<Store<CallState>> {
    let mut wasi = WasiCtx::builder();
    wasi.stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .allow_blocking_current_thread(grants.blocking_file_io);
    let limits = &grants.limits;
    for mount in &grants.mounts {
        let perms = if mount.is_writable() {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        wasi.preopened_dir(mount.host(), mount.guest(), perms)?;
    }
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_WASI_RESOURCES);
    let state = CallState {
        wasi: wasi.build(),
        table,
        limiter: MemoryLimiter {
            max_bytes: limits.memory_bytes,
            memory_bytes: 0,
            table_elements: 0,
            hit: false,
        },
        observer,
        guest_events: 0,
    };
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(transfer_cap);
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX))?;
    store.set_epoch_deadline(1);
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
    memory_limit_hit: bool,
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
    if trap == Some(Trap::OutOfFuel) {
        return Stopped {
            kind: ErrorKind::OutOfFuel,
            message: format!(
                "The tool ran out of fuel (its budget of {} instructions) and was stopped. Ask for less work per call, or a narrower request.",
                limits.fuel.unwrap_or(u64::MAX)
            ),
        };
    }
    if memory_limit_hit {
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

fn truncate(mut text: String, max: usize) -> String {
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
        let mut limiter = MemoryLimiter {
            max_bytes: 64 << 20,
            memory_bytes: 0,
            table_elements: 0,
            hit: false,
        };
        assert!(limiter.memory_growing(0, 40 << 20, None).unwrap());
        assert!(
            limiter.memory_growing(40 << 20, 48 << 20, None).unwrap(),
            "growing the same memory"
        );
        assert!(
            !limiter.memory_growing(0, 40 << 20, None).unwrap(),
            "a second memory shares the budget"
        );
        assert!(limiter.hit);
        assert!(
            limiter.memory_growing(0, 16 << 20, None).unwrap(),
            "what is left is still usable"
        );
        assert!(
            !limiter
                .table_growing(0, MAX_TABLE_ELEMENTS + 1, None)
                .unwrap()
        );
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
