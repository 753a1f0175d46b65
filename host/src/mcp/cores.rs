//! One single-threaded async runtime per core, for the protocol's work.
//!
//! Why: rmcp hands every request through three tasks (its service loop, a
//! task for the handler, a task to send the answer), and on tokio's
//! multi-threaded runtime each hand-off may wake a parked worker on the
//! other core to steal it. On a virtual machine such a wake-up costs tens of
//! microseconds, more than the call itself, and it came with every call.
//! On a single-threaded runtime a hand-off is a push onto a local queue.
//! So each connection (each HTTP connection, the one stdio client) is
//! served on one core for its whole life, and connections are spread over
//! the cores: with many clients every core works, and no request waits on
//! another core's wake-up.
//!
//! Threat model: none beyond the server's; this is about speed and about
//! not letting one connection starve another. A guest yields at every
//! epoch tick (see `sandbox::engine`), so a long call shares its core with
//! the other connections placed there, as it would on the multi-threaded
//! runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio_util::sync::{CancellationToken, DropGuard};

/// A single-threaded runtime per core, each on a thread of its own; work
/// spawned there stays on that thread. The threads end when the last clone
/// is dropped (tasks still running there are dropped with them).
#[derive(Clone)]
pub(crate) struct Cores {
    inner: Arc<Inner>,
}

struct Inner {
    runtimes: Vec<Handle>,
    next: AtomicUsize,
    _stop: DropGuard,
}

impl Cores {
    /// One runtime per core the process may use (`name-N` threads).
    pub(crate) fn per_core(name: &str) -> std::io::Result<Self> {
        let count = std::thread::available_parallelism().map_or(1, usize::from);
        Self::new(name, count)
    }

    /// `count` runtimes (at least one), on threads named `name-N`.
    pub(crate) fn new(name: &str, count: usize) -> std::io::Result<Self> {
        Self::with_park_hook(name, count, || {})
    }

    /// [`Self::new`], each runtime calling `before_sleep` before its
    /// thread sleeps for want of work.
    pub(crate) fn with_park_hook(
        name: &str,
        count: usize,
        before_sleep: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let before_sleep = Arc::new(before_sleep);
        let stop = CancellationToken::new();
        let mut runtimes = Vec::new();
        for index in 0..count.max(1) {
            let before_sleep = before_sleep.clone();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(move || before_sleep())
                .build()?;
            runtimes.push(runtime.handle().clone());
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || runtime.block_on(stop.cancelled_owned()))?;
        }
        Ok(Cores {
            inner: Arc::new(Inner {
                runtimes,
                next: AtomicUsize::new(0),
                _stop: stop.drop_guard(),
            }),
        })
    }

    /// The runtime for the next connection, in turn.
    pub(crate) fn next(&self) -> &Handle {
        let runtimes = &self.inner.runtimes;
        &runtimes[self.inner.next.fetch_add(1, Ordering::Relaxed) % runtimes.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::Cores;

    fn thread_name() -> String {
        std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string()
    }

    #[tokio::test]
    async fn connections_take_the_cores_in_turn_and_stay_there() {
        let cores = Cores::new("test-core", 2).unwrap();
        let mut names = Vec::new();
        for _ in 0..4 {
            let name = cores
                .next()
                .spawn(async {
                    let before = thread_name();
                    // A hand-off within the runtime stays on its thread.
                    let inner = tokio::spawn(async { thread_name() }).await.unwrap();
                    assert_eq!(before, inner);
                    before
                })
                .await
                .unwrap();
            names.push(name);
        }
        assert_eq!(
            names,
            ["test-core-0", "test-core-1", "test-core-0", "test-core-1"]
        );
    }

    #[tokio::test]
    async fn the_threads_end_with_the_last_clone() {
        let cores = Cores::new("test-ending", 1).unwrap();
        let (sender, receiver) = tokio::sync::oneshot::channel::<()>();
        // A task still waiting when the cores go is dropped with them.
        let waiting = cores.next().spawn(async move {
            receiver.await.ok();
        });
        drop(cores);
        assert!(waiting.await.unwrap_err().is_cancelled());
        drop(sender);
    }
}
