//! The state of one call's Store and the walls around it: the WASI context,
//! the capabilities it composes, the memory limiter and the captured output.
//!
//! Threat model: the guest is hostile. Its store is new for every call (so
//! nothing it does survives into the next call or leaks into a concurrent
//! one) and holds, by default, nothing of the host: no environment
//! variables, no arguments, an empty stdin, no filesystem, and no network.
//! The operator's mounts are its only files, and its grants (see `net`) its
//! only destinations. Its stdout and stderr go to bounded in-memory buffers
//! ([`CappedPipe`]), never to the host's own streams. Its memory and tables
//! are capped together, over every memory and table of its instances
//! ([`MemoryLimiter`]), and so are the counts of instances, memories,
//! tables and resources, so that declaring many of them multiplies nothing.
//!
//! Each capability keeps its own context and links itself (as
//! wasmtime-wasi's do): the guest's events in `outcome`, the settings in
//! `settings`, name lookups in `net::sockets`, requests in `net`. This
//! module composes them ([`add_to_linker`]), and serves stdout and stderr
//! from the call's pipes ([`Outputs`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::ResourceLimiter;
use wasmtime::component::{HasData, HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::DynOutputStream;
use wasmtime_wasi::p2::bindings::cli::{stderr, stdout};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{config_store, toolcage};
use super::limits::Limits;
use super::net::sockets::{self, LookupView, Sockets};
use super::net::{Egress, Meter, redacted};
use super::outcome::GuestEvents;
use super::secrets::redact::Redactor;
use super::settings::SettingsCtx;
use super::tools::ToolsCtx;

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
pub(crate) const MAX_WASI_RESOURCES: usize = 1024;
/// The most component-model resource handles a call may hold.
pub(crate) const MAX_COMPONENT_HANDLES: usize = 10_000;

/// The data of a call's Store: each capability's context, side by side.
pub(crate) struct CallState {
    pub(super) wasi: WasiCtx,
    /// The guest's stdout and stderr (see [`Outputs`]).
    pub(super) outputs: Outputs,
    pub(super) http: WasiHttpCtx,
    pub(super) egress: Egress,
    pub(super) sockets: Sockets,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) events: GuestEvents,
    pub(super) settings: SettingsCtx,
    pub(super) tools: ToolsCtx,
}

/// Links everything a component may import, each capability over its own
/// part of [`CallState`]: WASI 0.2 (with toolcage's `ip-name-lookup`),
/// outgoing `wasi:http`, `toolcage:tool/host`, `toolcage:tool/tools` and
/// `wasi:config/store`.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    // toolcage's own stdout and stderr, in place of wasmtime-wasi's.
    linker.allow_shadowing(true);
    stdout::add_to_linker::<_, Outputs>(linker, CallState::outputs)?;
    stderr::add_to_linker::<_, Outputs>(linker, CallState::outputs)?;
    linker.allow_shadowing(false);
    sockets::add_to_linker(linker, CallState::lookups)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    toolcage::tool::host::add_to_linker::<_, HasSelf<GuestEvents>>(linker, |state| {
        &mut state.events
    })?;
    toolcage::tool::tools::add_to_linker::<_, HasSelf<ToolsCtx>>(linker, |state| &mut state.tools)?;
    toolcage::tool::session::add_to_linker::<_, HasSelf<ToolsCtx>>(linker, |state| {
        &mut state.tools
    })?;
    config_store::add_to_linker::<_, HasSelf<SettingsCtx>>(linker, |state| &mut state.settings)
}

impl CallState {
    /// A new resource table for a call, capped at [`MAX_WASI_RESOURCES`].
    pub(super) fn table() -> ResourceTable {
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_WASI_RESOURCES);
        table
    }

    /// What toolcage's `wasi:sockets/ip-name-lookup` works on.
    fn lookups(&mut self) -> LookupView<'_> {
        LookupView {
            table: &mut self.table,
            sockets: &self.sockets,
        }
    }

    /// Whether, and how recently, the memory limiter refused a growth.
    pub(super) fn growth_refusals(&self) -> GrowthRefusals {
        self.limiter.refusals
    }

    fn outputs(&mut self) -> OutputsView<'_> {
        OutputsView {
            outputs: &self.outputs,
            table: &mut self.table,
        }
    }
}

/// A call's `wasi:cli/stdout` and `stderr`: its capped pipes. They are
/// served here rather than from the WASI context, so that the context can
/// be made without its builder, which seeds the context's random
/// generators twice (see `net::sockets`), on every call.
pub(crate) struct Outputs {
    pub stdout: CappedPipe,
    pub stderr: CappedPipe,
}

impl HasData for Outputs {
    type Data<'a> = OutputsView<'a>;
}

/// The outputs and the table their streams go in.
pub(crate) struct OutputsView<'a> {
    outputs: &'a Outputs,
    table: &'a mut ResourceTable,
}

impl stdout::Host for OutputsView<'_> {
    fn get_stdout(&mut self) -> wasmtime::Result<Resource<DynOutputStream>> {
        Ok(self.table.push(self.outputs.stdout.p2_stream())?)
    }
}

impl stderr::Host for OutputsView<'_> {
    fn get_stderr(&mut self) -> wasmtime::Result<Resource<DynOutputStream>> {
        Ok(self.table.push(self.outputs.stderr.p2_stream())?)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
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

/// What a call's store reports to its caller as it runs, in one place the
/// caller still reads after giving up on a guest stuck in a file operation.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Fuel left, sampled at every epoch tick and when the guest returns.
    /// Only a lower bound of what was used for a call stopped from outside:
    /// compiled code keeps the fuel counter in a register and stores it
    /// back at calls, so a tight loop shows the fuel of its last call.
    pub fuel_left: AtomicU64,
    /// The instance's linear memory, in bytes, as the limiter last saw it.
    pub peak_memory: AtomicU64,
    /// Whether the limiter refused a growth.
    pub memory_refused: AtomicBool,
}

/// Caps linear memory and tables, summed over every memory and table of the
/// call's instances, and remembers refused growths: a trap that follows a
/// refusal with no successful growth since is reported as
/// [`ErrorKind::MemoryLimit`](crate::ErrorKind::MemoryLimit); a refusal the
/// guest recovered from (it grew again afterwards) leaves a later trap a
/// trap, and only adds a note.
pub(crate) struct MemoryLimiter {
    /// Where the memory held is reported to the caller.
    gauges: Arc<Gauges>,
    max_bytes: usize,
    memory_bytes: usize,
    table_elements: usize,
    refusals: GrowthRefusals,
}

/// Whether, and how recently, the limiter refused a growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrowthRefusals {
    /// Never.
    None,
    /// Refused, and the guest grew again afterwards.
    Recovered,
    /// Refused, and nothing grew since.
    Pending,
}

impl MemoryLimiter {
    /// At most `max_bytes` of linear memory, reporting what is held on
    /// `gauges`.
    pub(crate) fn new(max_bytes: usize, gauges: Arc<Gauges>) -> Self {
        MemoryLimiter {
            gauges,
            max_bytes,
            memory_bytes: 0,
            table_elements: 0,
            refusals: GrowthRefusals::None,
        }
    }

    /// Grows `total` by `desired - current` if the result stays within `max`.
    fn grow(
        total: &mut usize,
        current: usize,
        desired: usize,
        max: usize,
        refusals: &mut GrowthRefusals,
    ) -> bool {
        let grown = total.saturating_add(desired.saturating_sub(current));
        let allowed = grown <= max;
        if allowed {
            *total = grown;
            if *refusals == GrowthRefusals::Pending {
                *refusals = GrowthRefusals::Recovered;
            }
        } else {
            *refusals = GrowthRefusals::Pending;
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
            &mut self.refusals,
        );
        // Memories only grow: the total now is the peak. Kept outside the
        // store, so that a call stopped from outside still reports it.
        let held = self.memory_bytes as u64;
        self.gauges.peak_memory.store(held, Ordering::Relaxed);
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
            &mut self.refusals,
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

/// A guest output stream kept in memory up to a capacity. Writes past it are
/// accepted and dropped, so a flood of output truncates but never fails.
#[derive(Clone)]
pub(crate) struct CappedPipe {
    inner: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    capacity: usize,
    truncated: bool,
}

impl CappedPipe {
    pub(crate) fn new(capacity: usize) -> Self {
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
    pub(crate) fn redacted_text(&self, redactor: Option<&Redactor>, meter: &Meter) -> String {
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
    pub(crate) fn append_line(&self, line: &str) {
        let mut captured = self.lock();
        for part in [line.as_bytes(), b"\n"] {
            captured.append(part);
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.lock().truncated
    }
}

impl Captured {
    /// Keeps what fits of `bytes`, and notes a cut.
    fn append(&mut self, bytes: &[u8]) {
        let room = self.capacity.saturating_sub(self.bytes.len());
        let kept = bytes.len().min(room);
        self.bytes.extend_from_slice(&bytes[..kept]);
        self.truncated |= kept < bytes.len();
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
        self.lock().append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
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
        assert_eq!(limiter.refusals, GrowthRefusals::Pending);
        assert!(
            limiter.memory_growing(0, 16 << 20, None).unwrap(),
            "what is left is still usable"
        );
        assert_eq!(
            limiter.refusals,
            GrowthRefusals::Recovered,
            "the guest grew again"
        );
        assert!(
            !limiter
                .table_growing(0, MAX_TABLE_ELEMENTS + 1, None)
                .unwrap()
        );
        assert_eq!(limiter.refusals, GrowthRefusals::Pending);
    }
}
