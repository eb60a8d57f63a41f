//! Waiting for a busy lock. Every mode waits here and nowhere else.
//!
//! A waiter subscribes to the lock's release channel (see [`crate::notify`]) and sleeps until
//! a release is published, re-trying within about one round trip of it. The sleep is capped
//! by the holder's remaining lease, which the acquire script returns: the lock is free by then
//! at the latest, so a lost message costs at most that, never a stall. If subscribing fails
//! (the connection is down), the waiter falls back to jittered exponential backoff.
//!
//! The waiters of one process that wait for one lock share what they learn of the holder's
//! lease, so they would all wake when it ends. The first whose sleep runs out attempts for all
//! of them (a [`Probe`]); the others wait for its outcome, and sleep on to the holder's new
//! lease end if it found the lock still held. Each process wakes a random moment after that
//! end (up to [`SPREAD`] of the lease, at most [`MAX_SPREAD`]), so the processes that saw the
//! same end do not attempt together either. While a lock is held elsewhere, its waiters cost
//! Redis one attempt per process per lease, however many they are.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::channels::{Arrival, InFlight};
use crate::handoff::{OpenSlot, Terms, Transfer};
use crate::key::LockKey;
use crate::lease::after;
use crate::notify::{Notifier, Subscription};
use crate::probe::Probe;

/// First pause of the fallback backoff, used while no subscription is possible.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
/// Longest pause of the fallback backoff.
const MAX_PAUSE: Duration = Duration::from_millis(64);
/// Sleep cap when the holder's remaining lease is unknown.
const UNKNOWN_HOLDER: Duration = Duration::from_millis(250);
/// Waking after the holder's lease ends is spread over up to this fraction of the lease...
const SPREAD: u32 = 16;
/// ...and at most this much.
const MAX_SPREAD: Duration = Duration::from_secs(1);
/// How long a waiter waits for a probe's outcome before it attempts itself (up to twice this,
/// at random): a probe is an attempt, answered or failed within the response timeout, unless
/// its caller stopped polling it.
const PROBE_PATIENCE: Duration = Duration::from_secs(1);

/// Test hook (`__test_hooks::wake_ups_only`, feature `_test_hooks`): a subscribed sleep ends
/// only by a wake-up or with the caller's whole wait, never at its cap, so a missed wake-up
/// shows as a timeout.
#[cfg(feature = "_test_hooks")]
pub(crate) static WAKE_UPS_ONLY: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The state of one caller's wait for one lock.
pub(crate) struct Waiter<'a> {
    notifier: &'a Notifier,
    key: LockKey,
    subscription: Option<Subscription>,
    /// Marks this caller's first attempt as in flight, so local newcomers queue behind it.
    in_flight: Option<InFlight>,
    /// Held while this caller attempts for the local waiters whose sleep ran out.
    probe: Option<Probe>,
    backoffs: u32,
    /// Set when this caller takes a hold handed by a local holder (see [`crate::handoff`]).
    terms: Option<Terms>,
    /// A hold handed to this caller while it slept (boxed: rare, and kept in every
    /// acquisition's future).
    handed: Option<Box<Transfer>>,
    /// The last sleep ended with a release heard (not a timeout or a hand-off).
    woken: bool,
    /// [`Notifier::rejoins`] when this caller's last attempt was sent.
    attempt_rejoins: u64,
    /// Holders may share the lock (a reader): a probe that got in may have let everyone in.
    shared: bool,
    /// [`Subscription::wake_count`] when this caller's last attempt was sent (or when it
    /// queued on arrival). A release that frees the lock for many (the last reader leaving
    /// while a writer waits, a writer leaving) is for every waiter, even if another took its
    /// wake-up: readers and writers alike.
    attempt_wake_alls: u64,
    /// This caller attempted (it did not only queue on arrival): subscriptions count in
    /// [`attempt_wake_alls`](Self::attempt_wake_alls) too.
    attempted: bool,
}

impl<'a> Waiter<'a> {
    pub(crate) fn new(
        notifier: &'a Notifier,
        key: &LockKey,
        terms: Option<Terms>,
        shared: bool,
    ) -> Self {
        Waiter {
            notifier,
            key: key.clone(),
            subscription: None,
            in_flight: None,
            probe: None,
            backoffs: 0,
            terms,
            handed: None,
            woken: false,
            attempt_rejoins: notifier.rejoins(),
            shared,
            attempt_wake_alls: 0,
            attempted: false,
        }
    }

    /// Called as each attempt is sent (see [`Notifier::rejoins`] and
    /// [`Subscription::wake_count`]).
    pub(crate) fn attempting(&mut self) {
        self.attempt_rejoins = self.notifier.rejoins();
        self.attempted = true;
        self.attempt_wake_alls = match &self.subscription {
            Some(sub) => sub.wake_count(true),
            None => self.notifier.channels().wake_count(&self.key, true),
        };
    }

    /// Waits from now on for the release of `key`, the name of a set (`Client::lock_many`) that
    /// the last attempt found busy; nothing changes while it is the name already waited for.
    /// What this caller had on another name (its place in the queue, the probe, the last
    /// wake-up) is left to that name's other waiters.
    pub(crate) fn listen_to(&mut self, key: &LockKey) {
        // A single name is always the one waited for: the same key, shared.
        if std::sync::Arc::ptr_eq(key.shared(), self.key.shared()) || key.lock() == self.key.lock()
        {
            return;
        }
        self.key = key.clone();
        self.subscription = None;
        self.in_flight = None;
        self.probe = None;
        self.woken = false;
    }

    /// The hold a local holder handed this caller while it waited, if any: the caller now
    /// holds the lock and must not attempt again.
    pub(crate) fn take_handed(&mut self) -> Option<Transfer> {
        self.handed.take().map(|transfer| *transfer)
    }

    /// Before the first attempt: if tasks of this process already attempt or wait for the
    /// lock, queue behind them. Otherwise a task that just released would win again at once
    /// (its attempt needs no wake-up) and starve the others, and a crowd arriving together
    /// would all strike Redis for one winner. True when it queued (and so may have slept).
    pub(crate) async fn arrive(&mut self, left: Duration) -> bool {
        match self.notifier.channels().arrive(&self.key) {
            Arrival::Attempt(in_flight) => {
                self.in_flight = Some(in_flight);
                false
            }
            Arrival::Queue { holder_until } => {
                // A release that frees the lock for many from now on is for this caller too
                // (not a subscription: the first to join re-checks, see `sleep_subscribed`).
                self.attempt_wake_alls = self.notifier.channels().wake_count(&self.key, false);
                let cap = holder_until.map_or(UNKNOWN_HOLDER, |t| {
                    t.saturating_duration_since(Instant::now())
                });
                // Boxed, here and in `pause`: only a contended lock sleeps, and the sleep's
                // state would otherwise size (and be copied with) every acquisition's future.
                Box::pin(self.sleep_subscribed(cap, false, left)).await;
                true
            }
        }
    }

    /// The attempt after a heard release found the lock busy: if no task of this process
    /// took it (ours pass it on instead of racing), another process did. Remembered so this
    /// process's next releases give the others a fair chance (see `notify::COURTESY`).
    pub(crate) fn busy_after_release(&mut self) {
        if std::mem::take(&mut self.woken) {
            if let Some(sub) = &self.subscription {
                sub.rival_seen();
            }
        }
    }

    /// Whether an attempt made as this caller's wait runs out could find the lock free: a
    /// release was heard, or no local waiter knows the holder's lease to last beyond now.
    /// Waiters that started together end together: without this, each would send one last
    /// attempt at the same moment, only to find the lock held.
    pub(crate) fn worth_a_last_try(&self) -> bool {
        self.woken || !self.knows_holder()
    }

    /// True when a local waiter saw the holder's lease recently enough that its end is still
    /// ahead: the next attempt need not ask for it.
    pub(crate) fn knows_holder(&self) -> bool {
        self.subscription
            .as_ref()
            .and_then(Subscription::holder_until)
            .is_some_and(|t| t > Instant::now())
    }

    /// Waits before the next attempt, never past `left` (the caller's remaining wait).
    /// `failed` says the last attempt did not reach Redis (so no release will be heard).
    pub(crate) async fn pause(
        &mut self,
        holder_ttl: Option<Duration>,
        failed: bool,
        left: Duration,
    ) {
        if !failed {
            // +1 ms: PTTL rounds down, and the key must be gone when we retry.
            let cap = match holder_ttl {
                Some(t) => t + Duration::from_millis(1),
                None => self.known_holder_left().unwrap_or(UNKNOWN_HOLDER),
            };
            if Box::pin(self.sleep_subscribed(cap, holder_ttl.is_some(), left)).await {
                // The server answered and the waiter slept subscribed: a later failure
                // starts its backoff afresh.
                self.backoffs = 0;
                return;
            }
            // The server answered but no subscription could be made (its connection is down,
            // or the server refuses it: a Redis 6 Cluster has no `SSUBSCRIBE`): poll with the
            // backoff growing from one answered attempt to the next. Reset on every answer,
            // it stayed at its first step, and a waiter attempted (and tried to subscribe)
            // every 1-2 ms for the whole of the holder's lease.
            self.backoffs = self.backoffs.max(1);
        }
        self.in_flight = None;
        // A probe that failed leaves the next attempt to another waiter.
        self.probe = None;
        if failed && self.backoffs == 0 {
            // A lost connection (a reset, a restart) is usually back within a loopback round
            // trip, and the next request waits for the reconnection by itself: retry at once,
            // and back off only if that fails too.
            self.backoffs = 1;
            tokio::task::yield_now().await;
            return;
        }
        let step = FIRST_PAUSE
            .saturating_mul(1 << self.backoffs.saturating_sub(1).min(5))
            .min(MAX_PAUSE);
        self.backoffs += 1;
        let mut pause = rand::rng().random_range(step / 2..=step);
        if let Some(ttl) = holder_ttl {
            pause = pause.min(ttl + Duration::from_millis(1));
        }
        tokio::time::sleep(pause.min(left)).await;
    }

    fn known_holder_left(&self) -> Option<Duration> {
        let until = self.subscription.as_ref()?.holder_until()?;
        until.checked_duration_since(Instant::now())
    }

    /// Sleeps until a release is heard or `cap` passes, subscribing first if needed. Returns
    /// false when no subscription could be made (the caller then backs off instead).
    async fn sleep_subscribed(
        &mut self,
        cap: Duration,
        holder_known: bool,
        left: Duration,
    ) -> bool {
        // The subscriptions' connection was lost and is back since the last attempt was
        // sent: a release meanwhile reached no one here. Attempt at once.
        if self.notifier.rejoins() != self.attempt_rejoins {
            return true;
        }
        let sub = match self.subscription.take() {
            Some(sub) => {
                // The server dropped the channel (a Cluster slot migrated): listen again,
                // and attempt at once in case the release came meanwhile.
                if self.notifier.resubscribe(&sub).await {
                    self.subscription = Some(sub);
                    return true;
                }
                sub
            }
            None => match self.notifier.subscribe(&self.key).await {
                Ok((sub, first)) => {
                    self.in_flight = None;
                    if first {
                        // Whoever subscribes the connection retries at once: a release
                        // between the last attempt and the subscription reached nobody.
                        self.subscription = Some(sub);
                        return true;
                    }
                    sub
                }
                Err(_) => return false,
            },
        };
        // A release that freed the lock for many came between this caller's last attempt and
        // now: its wake-up reached the waiters asleep then, and left one permit, which
        // another waiter between its attempt and its sleep may have taken. Attempt at once.
        // (A count that differs because the channel's entry was made anew since counts too.)
        // Writers too: the last reader's release that lets a waiting writer in is one of
        // these, and a writer that missed it slept until its next renewal of its intent.
        if sub.wake_count(self.attempted) != self.attempt_wake_alls {
            self.subscription = Some(sub);
            return true;
        }
        let cap = if holder_known {
            let cap =
                cap + rand::rng().random_range(Duration::ZERO..=(cap / SPREAD).min(MAX_SPREAD));
            sub.holder_seen(cap);
            cap
        } else {
            cap
        };
        // The holder's new lease end is known to the other local waiters now (or this attempt
        // found none): they may go on.
        self.probe = None;
        let now = Instant::now();
        #[cfg(feature = "_test_hooks")]
        let cap = if WAKE_UPS_ONLY.load(std::sync::atomic::Ordering::Relaxed) {
            left
        } else {
            cap
        };
        // `left` is Duration::MAX for a caller that waits without limit.
        let deadline = after(now, cap.min(left));
        let end = after(now, left);
        let mut until = deadline;
        // A local holder may hand the lock over instead of releasing it: wait for that too.
        let mut slot = self.terms.clone().map(|terms| sub.open_slot(terms));
        let mut probed = false;
        // Sleep until woken, or until the holder's lease must have ended.
        let woken = loop {
            let fallback = until.saturating_duration_since(Instant::now());
            if self.heard(&sub, slot.as_mut(), fallback, false).await {
                break true;
            }
            if Instant::now() >= end {
                break false;
            }
            // Another local waiter may have learned a later end meanwhile (a queued newcomer
            // starts from a guess, and a probe may have found the lock still held): keep
            // sleeping rather than strike Redis for nothing.
            if let Some(later) = sub.holder_until().filter(|&later| later > until) {
                until = later.min(end);
                continue;
            }
            // Holders may share the lock: a probe that got in may have let everyone in.
            if self.shared && probed {
                break false;
            }
            if let Some(probe) = sub.probing().claim() {
                self.probe = Some(probe);
                break false;
            }
            let patience = rand::rng().random_range(PROBE_PATIENCE..=2 * PROBE_PATIENCE);
            let asked = Instant::now();
            let wait = end.saturating_duration_since(asked).min(patience);
            if self.heard(&sub, slot.as_mut(), wait, true).await {
                break true;
            }
            if asked.elapsed() >= patience {
                break false;
            }
            probed = true;
        };
        // A hold handed over just as this sleep ended is ours all the same.
        if let Some(transfer) = slot.and_then(|slot| slot.close()) {
            self.handed = Some(Box::new(transfer));
        }
        self.woken = woken && self.handed.is_none();
        if self.woken {
            if let Some(t) = sub
                .courtesy_until()
                .filter(|&t| t > Instant::now() && t < end)
            {
                tokio::time::sleep_until(t.into()).await;
            }
        }
        self.subscription = Some(sub);
        true
    }

    /// Sleeps until a release is heard, a local holder hands this caller the lock (both: true)
    /// or `fallback` passes (false); with `until_probed`, until no probe is out at the latest.
    async fn heard(
        &mut self,
        sub: &Subscription,
        slot: Option<&mut OpenSlot>,
        fallback: Duration,
        until_probed: bool,
    ) -> bool {
        let (rejoins, shared) = (self.attempt_rejoins, self.shared);
        // Every sleep, the first and those that go on to a later end, checks the count again
        // once its wake-up is registered (see `Subscription::released`).
        let seen = (self.attempted, self.attempt_wake_alls);
        let released = async {
            if until_probed {
                tokio::select! {
                    woken = sub.released(fallback, rejoins, shared, seen) => woken,
                    _ = sub.probing().over() => false,
                }
            } else {
                sub.released(fallback, rejoins, shared, seen).await
            }
        };
        match slot {
            Some(slot) => tokio::select! {
                biased;
                transfer = slot.handed() => {
                    self.handed = Some(Box::new(transfer));
                    true
                }
                woken = released => woken,
            },
            None => released.await,
        }
    }
}
