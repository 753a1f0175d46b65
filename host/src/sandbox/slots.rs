//! Admission to the pool of sandbox slots: how many calls run at once.
//!
//! Threat model: a flood of calls must not turn into allocator failures or
//! unbounded threads. The engines' pools have room for exactly as many
//! instances as these semaphores admit (see `engine`), so a call that finds
//! every slot taken waits for one within its own timeout, and no pool error
//! ever reaches a caller. Loading (`describe()`) has slots of its own, one
//! per core, so that a reload never waits for calls to end. A call whose
//! caller gave up while its tool was blocked in a file operation keeps its
//! slot until the operation returns; such calls are counted, so that past a
//! few of them file operations move to tokio's blocking pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots calls and loads take, shared by a runtime and every sandbox it
/// runs. Cloning shares them.
#[derive(Clone)]
pub(crate) struct Slots {
    calls: Arc<Semaphore>,
    loading: Arc<Semaphore>,
    max_calls: usize,
    /// Calls whose caller gave up (timeout, cancellation) while their worker
    /// was still blocked in a file operation.
    stuck: Arc<AtomicUsize>,
}

/// How many components are described at once while loading: one per core.
pub(crate) fn loading_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Slots {
    /// `max_calls` slots for calls (at least 1), and [`loading_slots`] for
    /// loading.
    pub(crate) fn new(max_calls: usize) -> Slots {
        let max_calls = max_calls.max(1);
        Slots {
            calls: Arc::new(Semaphore::new(max_calls)),
            loading: Arc::new(Semaphore::new(loading_slots())),
            max_calls,
            stuck: Arc::default(),
        }
    }

    /// How many calls may run at once.
    pub(crate) fn max_calls(&self) -> usize {
        self.max_calls
    }

    /// How many slots are running a call now.
    pub(crate) fn busy(&self) -> usize {
        self.max_calls - self.calls.available_permits()
    }

    /// How many calls were given up on while blocked in a file operation.
    pub(crate) fn stuck(&self) -> usize {
        self.stuck.load(Ordering::Relaxed)
    }

    pub(crate) fn stuck_counter(&self) -> &Arc<AtomicUsize> {
        &self.stuck
    }

    fn semaphore(&self, loading: bool) -> &Arc<Semaphore> {
        match loading {
            true => &self.loading,
            false => &self.calls,
        }
    }

    /// A free slot, if there is one now.
    pub(crate) fn free(&self, loading: bool) -> Option<OwnedSemaphorePermit> {
        self.semaphore(loading).clone().try_acquire_owned().ok()
    }

    /// Waits for a free slot until `deadline`.
    pub(crate) async fn wait(
        &self,
        deadline: Instant,
        loading: bool,
    ) -> Option<OwnedSemaphorePermit> {
        let slots = self.semaphore(loading).clone();
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        tokio::time::timeout_at(deadline.into(), slots.acquire_owned())
            .await
            .ok()?
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn calls_and_loads_take_slots_of_their_own() {
        let slots = Slots::new(2);
        let first = slots.free(false).unwrap();
        let _second = slots.free(false).unwrap();
        assert_eq!(slots.busy(), 2);
        assert!(slots.free(false).is_none(), "every call slot is taken");
        assert!(slots.free(true).is_some(), "loading never waits for calls");
        drop(first);
        assert_eq!(slots.busy(), 1);
        assert!(slots.free(false).is_some());
    }

    #[test]
    fn there_is_always_a_slot() {
        assert_eq!(Slots::new(0).max_calls(), 1);
    }

    #[tokio::test]
    async fn a_wait_ends_at_its_deadline_or_when_a_slot_frees() {
        let slots = Slots::new(1);
        let held = slots.free(false).unwrap();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(slots.wait(deadline, false).await.is_none());
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                slots.wait(deadline, false).await.is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(held);
        assert!(waiter.await.unwrap(), "the freed slot goes to the waiter");
    }
}
