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
//!
//! A call that calls tools holds its slot while it waits for them (its
//! instance lives on), and counts as *parked* meanwhile. A nested call that
//! finds every slot held by a parked caller is refused at once: no slot can
//! free until a nested call runs, so waiting could only end at the deadline.
//!
//! Taking and giving back a free slot is one atomic operation each way, with
//! no lock: concurrent callers would otherwise contend for a semaphore's
//! lock on every call (tokio's takes its waiters' lock on every release).
//! A slot borrows its pool, so that taking one does not also count a
//! reference on the pool's shared cache line; only a slot handed to another
//! thread owns a reference ([`Slot::owned`]).
//! Only a call that finds every slot taken waits, in turn, and callers that
//! arrive while others wait queue behind them rather than take a slot first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

/// The slots calls and loads take, shared by a runtime and every sandbox it
/// runs. Cloning shares them.
#[derive(Clone)]
pub(crate) struct Slots {
    calls: Arc<Pool>,
    loading: Arc<Pool>,
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
            calls: Arc::new(Pool::new(max_calls)),
            loading: Arc::new(Pool::new(loading_slots())),
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
        self.max_calls - self.calls.free.load(Ordering::Relaxed)
    }

    /// How many calls were given up on while blocked in a file operation.
    pub(crate) fn stuck(&self) -> usize {
        self.stuck.load(Ordering::Relaxed)
    }

    pub(crate) fn stuck_counter(&self) -> &Arc<AtomicUsize> {
        &self.stuck
    }

    fn pool(&self, loading: bool) -> &Arc<Pool> {
        match loading {
            true => &self.loading,
            false => &self.calls,
        }
    }

    /// A free slot, if there is one now and no call is waiting for one.
    pub(crate) fn free(&self, loading: bool) -> Option<Slot<'_>> {
        Pool::take(self.pool(loading))
    }

    /// Waits for a free slot until `deadline`, in turn with the other
    /// waiting calls.
    pub(crate) async fn wait(&self, deadline: Instant, loading: bool) -> Option<Slot<'_>> {
        let pool = self.pool(loading);
        if let Some(slot) = Pool::take(pool) {
            return Some(slot);
        }
        tokio::time::timeout_at(deadline.into(), Pool::queue(pool))
            .await
            .ok()
    }

    /// Like [`wait`](Self::wait), for a nested call: `Err(Stalled)` at once
    /// when every call slot is held by a caller waiting on its own nested
    /// calls, now or while this call waits.
    pub(crate) async fn wait_nested(&self, deadline: Instant) -> Result<Option<Slot<'_>>, Stalled> {
        let pool = &self.calls;
        tokio::select! {
            biased;
            slot = self.wait(deadline, false) => Ok(slot),
            () = pool.stalled(self.max_calls) => Err(Stalled),
        }
    }

    /// Counts the slot of a call that waits on nested calls as parked,
    /// while the guard lives.
    pub(crate) fn park(&self) -> Parked {
        let parked = self.calls.parked.fetch_add(1, Ordering::SeqCst) + 1;
        if parked >= self.max_calls {
            self.calls.all_parked.notify_waiters();
        }
        Parked {
            pool: self.calls.clone(),
        }
    }
}

/// Every call slot is held by a caller waiting on nested calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stalled;

/// A caller's slot counted as parked; no longer when dropped.
pub(crate) struct Parked {
    pool: Arc<Pool>,
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.pool.parked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A counting semaphore: `free` slots, and the calls waiting for one.
struct Pool {
    free: AtomicUsize,
    waiting: AtomicUsize,
    /// Told when a slot is given back while calls wait.
    given_back: Notify,
    /// Slots held by callers waiting on nested calls.
    parked: AtomicUsize,
    /// Told when every slot is held by a parked caller.
    all_parked: Notify,
}

/// A slot taken from a pool, given back when dropped.
pub(crate) struct Slot<'a> {
    pool: &'a Arc<Pool>,
}

impl Slot<'_> {
    /// The same slot, owning a reference to its pool: for another thread.
    pub(crate) fn owned(self) -> OwnedSlot {
        let pool = self.pool.clone();
        std::mem::forget(self);
        OwnedSlot { pool }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pool.give_back();
    }
}

/// A slot that owns a reference to its pool ([`Slot::owned`]).
pub(crate) struct OwnedSlot {
    pool: Arc<Pool>,
}

impl Drop for OwnedSlot {
    fn drop(&mut self) {
        self.pool.give_back();
    }
}

impl Pool {
    fn new(slots: usize) -> Self {
        Pool {
            free: AtomicUsize::new(slots),
            waiting: AtomicUsize::new(0),
            given_back: Notify::new(),
            parked: AtomicUsize::new(0),
            all_parked: Notify::new(),
        }
    }

    /// Resolves once every one of the pool's `slots` is held by a parked
    /// caller.
    async fn stalled(&self, slots: usize) {
        loop {
            let told = self.all_parked.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if self.parked.load(Ordering::SeqCst) >= slots {
                return;
            }
            told.await;
        }
    }

    fn give_back(&self) {
        self.free.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.given_back.notify_one();
        }
    }

    /// A slot, unless none is free or calls are waiting for one.
    fn take(pool: &Arc<Pool>) -> Option<Slot<'_>> {
        if pool.waiting.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Pool::take_free(pool)
    }

    fn take_free(pool: &Arc<Pool>) -> Option<Slot<'_>> {
        let taken = pool
            .free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |free| {
                free.checked_sub(1)
            });
        taken.ok().map(|_| Slot { pool })
    }

    /// Waits, as one of the waiting calls, until a slot is given back.
    async fn queue(pool: &Arc<Pool>) -> Slot<'_> {
        let _waiting = Waiting::count(pool);
        loop {
            // Listening before looking: a slot given back after the look
            // wakes this call (or a waiter before it, which takes it).
            let given_back = pool.given_back.notified();
            tokio::pin!(given_back);
            given_back.as_mut().enable();
            if let Some(slot) = Pool::take_free(pool) {
                // Another waiter may have been told of a slot this call
                // took: pass the word on.
                if pool.free.load(Ordering::SeqCst) > 0 {
                    pool.given_back.notify_one();
                }
                return slot;
            }
            given_back.await;
        }
    }
}

/// A call counted among a pool's waiting calls while it lives.
struct Waiting<'a>(&'a Pool);

impl<'a> Waiting<'a> {
    fn count(pool: &'a Pool) -> Self {
        pool.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(pool)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
        // A waiter that gives up (its deadline passed) may have been the one
        // told of a free slot: pass the word on.
        if self.0.free.load(Ordering::SeqCst) > 0 {
            self.0.given_back.notify_one();
        }
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

    #[tokio::test]
    async fn waiting_calls_are_served_in_turn_and_never_overtaken() {
        let slots = Slots::new(1);
        let held = slots.free(false).unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for n in 0..4 {
            let (slots, order) = (slots.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                let slot = slots.wait(deadline, false).await.expect("a slot in time");
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(slot);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            slots.free(false).is_none(),
            "a newcomer does not overtake the waiters"
        );
        drop(held);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(order.lock().unwrap().len(), 4);
        assert_eq!(slots.busy(), 0, "every slot given back");
        assert!(slots.free(false).is_some());
    }

    #[tokio::test]
    async fn many_callers_never_hold_more_slots_than_there_are() {
        let slots = Slots::new(3);
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (slots, most) = (slots.clone(), most.clone());
                tokio::spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let _slot = slots.wait(deadline, false).await.expect("a slot in time");
                    most.fetch_max(slots.busy(), Ordering::SeqCst);
                    tokio::task::yield_now().await;
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= 3);
        assert_eq!(slots.busy(), 0);
    }

    #[tokio::test]
    async fn a_nested_call_is_refused_once_every_slot_is_parked() {
        let slots = Slots::new(2);
        let (first, second) = (slots.free(false).unwrap(), slots.free(false).unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        let parked = slots.park();
        // One holder still runs: a nested call waits for its slot.
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.wait_nested(deadline).await.map(|s| s.is_some()) })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "it waits while a holder runs");
        // The other holder parks too: the waiter can never get a slot.
        let also_parked = slots.park();
        let waited = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert_eq!(waited.expect("refused at once").unwrap(), Err(Stalled));
        assert_eq!(slots.wait_nested(deadline).await.err(), Some(Stalled));
        drop((parked, also_parked));
        drop(first);
        assert!(matches!(slots.wait_nested(deadline).await, Ok(Some(_))));
        drop(second);
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
