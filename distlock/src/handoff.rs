//! Local hand-off: a released setnx lock (or semaphore permit) goes straight to the next task
//! of this process that waits for it, with no round trip.
//!
//! Redis sees one hold: the lock keeps its value and its lease, the watchdog keeps renewing
//! it, and the tasks of this process pass it along in arrival order. Mutual exclusion holds
//! within the process because the hold is moved, never copied (a [`Transfer`] is owned by one
//! task at a time), and across processes because the server's hold never lapses. What it
//! saves is the two round trips of a release and a new acquisition (the release, then the
//! waiter's attempt once the wake-up reached it), which decide the rate of a busy lock.
//!
//! Two bounds keep other processes from being starved: a hold passes at most
//! [`HandOffLimits::passes`] times (default 8), and only within [`HandOffLimits::window`]
//! (default 25 ms) of when it was taken from Redis. Then the release is a real one (the lock is freed and the wake-up published) and
//! the waiters of every process, this one's included, race for it on equal terms.
//!
//! Only holds that are interchangeable pass: the same mode (and a semaphore's number of
//! permits), ttl, renewal period and labels, renewed by the watchdog, with a lease that still
//! has at least half its ttl to run, and no
//! option that gives an acquisition something of its own (a fencing token, replica
//! acknowledgement, `max_hold`, `min_hold`). A waiter whose request differs is served by a
//! real release, and those behind it wait their turn.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::algorithm::Algorithm;
use crate::config::{HandOffLimits, Settings};
use crate::context::LockContext;
use crate::lease::LeaseState;
use crate::release::Hold;
use crate::sync::lock;
use crate::telemetry::Labels;
use crate::watchdog::Watching;

/// Hand-off slots open in this process: lets a release with nobody waiting skip the lookup.
static OPEN_SLOTS: AtomicUsize = AtomicUsize::new(0);

/// True while some task of this process waits in a hand-off slot.
pub(crate) fn slots_open() -> bool {
    OPEN_SLOTS.load(Ordering::Acquire) > 0
}

/// What a hold and a waiting request must share for the hold to pass between them.
#[derive(Clone)]
pub(crate) struct Terms {
    pub(crate) algorithm: &'static Algorithm,
    /// The request's settings, settled (see [`Settings::settled`]): the ones that must
    /// match are its ttl, its renewal and a semaphore's number of permits (a waiter asking
    /// for another is refused by the server, never handed a permit).
    pub(crate) settings: Arc<Settings>,
    pub(crate) labels: Arc<Labels>,
    pub(crate) limits: HandOffLimits,
}

impl Terms {
    fn matches(&self, other: &Terms) -> bool {
        let (mine, theirs) = (&*self.settings, &*other.settings);
        std::ptr::eq(self.algorithm, other.algorithm)
            && mine.permits == theirs.permits
            && mine.ttl == theirs.ttl
            && mine.renewal() == theirs.renewal()
            && *self.labels == *other.labels
    }
}

/// Where a guard stands in a chain of local hand-offs (only guards that may pass one).
#[derive(Clone)]
pub(crate) struct Tenure {
    pub(crate) terms: Terms,
    /// The holding task's context, to record the hold again if no waiter takes it.
    pub(crate) context: LockContext,
    /// Hand-offs since the hold was taken from Redis.
    pub(crate) passes: u32,
    /// When the hold was taken from Redis.
    pub(crate) since: Instant,
}

impl Tenure {
    /// Whether this hold may still pass to a local waiter, with `remaining` lease left.
    pub(crate) fn may_pass(&self, remaining: Duration) -> bool {
        self.passes < self.terms.limits.passes
            && self.since.elapsed() < self.terms.limits.window
            && remaining >= self.terms.settings.ttl / 2
            && slots_open()
    }
}

/// A hold on its way from one task to the next. Whoever drops it untaken (a waiter whose
/// future was dropped after the hold reached it) releases the lock in the background.
pub(crate) struct Transfer {
    pub(crate) hold: Hold,
    pub(crate) lease: Arc<LeaseState>,
    /// The watchdog renewing the lease, which goes along.
    pub(crate) watch: Option<Watching>,
    pub(crate) passes: u32,
    pub(crate) since: Instant,
    pub(crate) armed: bool,
}

impl Drop for Transfer {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Renewal stops before the release is sent.
        drop(self.watch.take());
        let until = Some(self.lease.valid_until());
        self.hold.clone().release_in_background(until);
    }
}

struct Slot {
    seq: u64,
    terms: Terms,
    to: oneshot::Sender<Transfer>,
}

/// What holds a [`Queue`] (the lock's channel entry, which lives while its waiters do):
/// the queue sits inline in it, so an uncontended acquisition allocates nothing for it.
pub(crate) trait HasQueue: Send + Sync {
    fn queue(&self) -> &Queue;
}

/// The waiters of one lock in this process that would take a hold handed to them, in
/// arrival order.
#[derive(Default)]
pub(crate) struct Queue {
    slots: Mutex<(VecDeque<Slot>, u64)>,
}

impl Queue {
    fn slots(&self) -> std::sync::MutexGuard<'_, (VecDeque<Slot>, u64)> {
        lock(&self.slots)
    }

    /// Opens a slot at the back of `owner`'s queue.
    pub(crate) fn open(owner: Arc<dyn HasQueue>, terms: Terms) -> OpenSlot {
        let (to, from) = oneshot::channel();
        let mut slots = owner.queue().slots();
        slots.1 += 1;
        let seq = slots.1;
        slots.0.push_back(Slot { seq, terms, to });
        OPEN_SLOTS.fetch_add(1, Ordering::AcqRel);
        drop(slots);
        OpenSlot {
            owner,
            seq,
            from,
            open: true,
        }
    }

    /// Waiters still in the queue.
    pub(crate) fn len(&self) -> usize {
        self.slots().0.iter().filter(|s| !s.to.is_closed()).count()
    }

    /// Hands `transfer` to the first waiter, if its terms match; gives it back (`Some`)
    /// otherwise.
    /// Sent under the queue's lock, so a waiter that finds its slot gone knows the hold is
    /// already in its channel.
    pub(crate) fn offer(&self, mut transfer: Transfer, terms: &Terms) -> Option<Transfer> {
        let mut slots = self.slots();
        while let Some(slot) = slots.0.pop_front() {
            OPEN_SLOTS.fetch_sub(1, Ordering::AcqRel);
            if slot.to.is_closed() {
                continue;
            }
            if !slot.terms.matches(terms) {
                // Not interchangeable: a real release serves it, and nobody behind it
                // overtakes it.
                slots.0.push_front(slot);
                OPEN_SLOTS.fetch_add(1, Ordering::AcqRel);
                return Some(transfer);
            }
            match slot.to.send(transfer) {
                Ok(()) => return None,
                Err(back) => transfer = back,
            }
        }
        Some(transfer)
    }
}

/// A waiter's open slot. Closing it (or dropping it) takes it off the queue; a hold that
/// reached it meanwhile is returned by [`close`](Self::close), or released if dropped.
pub(crate) struct OpenSlot {
    owner: Arc<dyn HasQueue>,
    seq: u64,
    from: oneshot::Receiver<Transfer>,
    open: bool,
}

impl OpenSlot {
    /// Waits for a hold handed to this slot (pending forever if none comes).
    pub(crate) async fn handed(&mut self) -> Transfer {
        match (&mut self.from).await {
            Ok(transfer) => transfer,
            // The sender went away without a hold: nothing will come.
            Err(_) => std::future::pending().await,
        }
    }

    /// Leaves the queue; returns the hold if one was handed here before.
    pub(crate) fn close(mut self) -> Option<Transfer> {
        self.withdraw();
        self.from.try_recv().ok()
    }

    fn withdraw(&mut self) {
        if !std::mem::take(&mut self.open) {
            return;
        }
        let mut slots = self.owner.queue().slots();
        if let Some(at) = slots.0.iter().position(|s| s.seq == self.seq) {
            slots.0.remove(at);
            OPEN_SLOTS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        // A hold already in the channel is dropped with it, which releases it.
        self.withdraw();
    }
}

/// Turns an unused transfer back into plain parts (no release on drop).
pub(crate) fn disarm(mut transfer: Transfer) -> Option<Watching> {
    transfer.armed = false;
    transfer.watch.take()
}
