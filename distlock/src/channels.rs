//! The waiters of one process, per lock channel: the push frames connections deliver (the
//! releases heard), the queue of local waiters a release wakes one at a time, the tasks
//! that may take a hold handed over, and what local waiters learned of the holder. The
//! subscriptions themselves are [`crate::notify`]'s.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::handoff::{self, Terms, Transfer};
use crate::key::{lock_of_channel, LockKey};
use crate::nodes::Listeners;
use crate::probe::Probing;
use crate::sync::lock;

/// The payload a release script publishes to wake every waiter instead of one.
pub(crate) const WAKE_ALL: &[u8] = b"all";

/// The payload a release script publishes to wake a waiting writer and no reader: a
/// read/write lock's last reader leaving while a writer's intent keeps new readers out.
pub(crate) const WAKE_WRITER: &[u8] = b"writer";

/// The payload a semaphore's release publishes: one permit freed, for one waiter, but counted
/// by every waiter between its attempt and its sleep (see [`Channel::wake_alls`]): several
/// permits freed while a process's waiters have attempts in flight wake one of them, since a
/// `Notify` keeps one permit, and the others must not sleep through the rest.
pub(crate) const PERMIT_FREED: &[u8] = b"permit";

/// The payload of a message that frees nothing (a new leader saying it took the lock, see
/// `election`): it wakes the channel's observers, never a waiter.
pub(crate) const TAKEN: &[u8] = b"taken";

/// Lock key to its channel's state. Keys can come from user input: a seeded hasher, but not
/// SipHash, which cost more than the lookups themselves.
type ChannelMap = HashMap<Arc<[u8]>, Arc<Channel>, foldhash::quality::RandomState>;

/// The waiters of one process, per channel. Keyed by the lock's key (shared with the
/// [`LockKey`], so an entry costs no copy of it), which [`lock_of_channel`] finds from the
/// channel.
#[derive(Default)]
pub(crate) struct Channels {
    pub(crate) map: Mutex<ChannelMap>,
    /// Local first attempts in flight, per lock key. Kept apart from the channels so that an
    /// uncontended acquisition (an attempt nobody waits behind) makes no channel entry: that
    /// allocation and its teardown were a twentieth of the client's work per cycle.
    pub(crate) attempts: Mutex<HashMap<Arc<[u8]>, usize, foldhash::quality::RandomState>>,
    /// Signalled when the connection the subscriptions live on is lost: wakes the task that
    /// waits for it to come back (see [`Notifier::rejoins`]).
    pub(crate) down: Notify,
    /// How many times that connection came back, subscribed again, so far.
    pub(crate) rejoins: AtomicU64,
    /// Waiters subscribed, over all channels: lets a release see in one load that no waiter
    /// of this client listens, the common case (see [`listening`](Self::listening)).
    pub(crate) waiting: AtomicUsize,
}

pub(crate) struct Channel {
    /// Waiters that take the lock for themselves alone: a release wakes the first queued
    /// (or leaves a permit if none is parked), a release that frees the lock for many too
    /// (only one of them can get in; waking all of a process's writers at each writer's
    /// release cost n * n / 2 attempts to serve n of them).
    pub(crate) released: Notify,
    /// Waiters that may share the lock (readers, permits): a release that frees it for many
    /// wakes all of them, any other the first queued.
    pub(crate) released_shared: Notify,
    /// Live subscriptions of this process to the channel.
    pub(crate) waiters: AtomicUsize,
    /// Live subscriptions of observers (see `notify::Role::Observer`): they keep the channel
    /// subscribed, but take no wake-up and queue nobody.
    pub(crate) observers: AtomicUsize,
    /// Wakes every observer at each message heard, and when messages may have gone unheard
    /// (the subscriptions' connection lost or back, the subscription dropped).
    pub(crate) observed: Notify,
    /// Serialises SUBSCRIBE / UNSUBSCRIBE for the channel; the nodes subscribed on.
    pub(crate) subscribed: tokio::sync::Mutex<Vec<usize>>,
    /// Wake-up ids of releases heard lately, so one heard from several nodes wakes once.
    pub(crate) heard: Mutex<VecDeque<Vec<u8>>>,
    /// When the current holder's lease ends at the latest, as last seen by a local waiter:
    /// bounds the sleep of waiters that queue without asking the server.
    pub(crate) holder_until: Mutex<Option<Instant>>,
    /// When a local waiter, woken by a release, last found the lock taken by another
    /// process: other processes contend for it.
    pub(crate) rival_seen: Mutex<Option<Instant>>,
    /// Local waiters woken by a release of this process hold back until then, so that
    /// waiters of other processes get the lock as often as ours (see `before_release`).
    pub(crate) courtesy_until: Mutex<Option<Instant>>,
    /// The server dropped the subscription (a Cluster slot migrated away, taking its shard
    /// channels along): the next waiter to sleep subscribes again.
    pub(crate) dropped: AtomicBool,
    /// Local waiters that take a hold handed to them (see [`crate::handoff`]).
    pub(crate) handoff: handoff::Queue,
    /// Releases heard that free the lock for many (a writer leaving, the last reader leaving
    /// while writers wait, a forced unlock) or free one of several places (a semaphore's
    /// permit), and subscriptions made (a release just before one reached nobody here):
    /// counted, because the waiters between an attempt's busy answer and their sleep miss
    /// such a wake-up (a `Notify` keeps one permit, not one per waiter), and must know to try
    /// again (see [`Subscription::wake_count`]). A release of an exclusive lock is not
    /// counted: it frees the lock for one, and the permit it leaves wakes the one waiter that
    /// sleeps next.
    pub(crate) wake_alls: AtomicU64,
    /// The releases alone among [`wake_alls`](Self::wake_alls): what a waiter that queued on
    /// arrival, without an attempt, compares. A subscription made since its arrival is no news
    /// to it (it never found the lock busy), and counting those sent a crowd of waiters that
    /// queued together to attempt all at once.
    pub(crate) alls_heard: AtomicU64,
    /// The attempt one local waiter makes for the others (see [`Probing`]).
    pub(crate) probing: Arc<Probing>,
}

impl handoff::HasQueue for Channel {
    fn queue(&self) -> &handoff::Queue {
        &self.handoff
    }
}

impl Channel {
    pub(crate) fn new() -> Arc<Channel> {
        Arc::new(Channel {
            released: Notify::new(),
            released_shared: Notify::new(),
            waiters: AtomicUsize::new(0),
            observers: AtomicUsize::new(0),
            observed: Notify::new(),
            subscribed: tokio::sync::Mutex::new(Vec::new()),
            heard: Mutex::new(VecDeque::new()),
            holder_until: Mutex::new(None),
            rival_seen: Mutex::new(None),
            courtesy_until: Mutex::new(None),
            dropped: AtomicBool::new(false),
            handoff: handoff::Queue::default(),
            wake_alls: AtomicU64::new(0),
            alls_heard: AtomicU64::new(0),
            probing: Arc::default(),
        })
    }
}

/// How long local waiters hold back after a release of this process while other processes
/// contend: the other processes' waiters are woken by the same message, but their threads
/// are often parked while ours run, so without it this process wins nearly every race (two
/// processes measured 0.61 per-process fairness in the bench's S3x). Tokio's timer rounds it
/// up to its 1 ms tick.
const COURTESY: Duration = Duration::from_micros(500);

/// A rival seen longer ago than this no longer counts as contending.
const RIVAL_WINDOW: Duration = Duration::from_millis(50);

/// How many wake-up ids a channel remembers: more than the releases of one lock that can be
/// on their way from different nodes at once.
const HEARD: usize = 16;

impl Channel {
    /// See [`Channels::wake_count`].
    pub(crate) fn wake_count(&self, with_subscriptions: bool) -> u64 {
        if with_subscriptions {
            self.wake_alls.load(Ordering::Acquire)
        } else {
            self.alls_heard.load(Ordering::Acquire)
        }
    }

    /// A release that frees the lock for one: the first queued waiter of each kind tries (a
    /// read/write lock's last reader leaving may let a writer in, or a reader if none waits).
    fn wake_one(&self) {
        self.released.notify_one();
        self.released_shared.notify_one();
    }

    /// True the first time a release's wake-up id is heard.
    pub(crate) fn first_hearing(&self, id: &[u8]) -> bool {
        let mut heard = lock(&self.heard);
        if heard.iter().any(|h| h.as_slice() == id) {
            return false;
        }
        if heard.len() == HEARD {
            heard.pop_front();
        }
        heard.push_back(id.to_vec());
        true
    }
}

/// What a task arriving at a lock should do first; see [`Channels::arrive`].
pub(crate) enum Arrival {
    /// Attempt at once; the attempt counts as in flight while this lives.
    Attempt(InFlight),
    /// Queue behind this process's other tasks.
    Queue { holder_until: Option<Instant> },
}

/// A local first attempt in flight.
pub(crate) struct InFlight {
    key: LockKey,
    channels: Weak<Channels>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(channels) = self.channels.upgrade() {
            let mut attempts = channels.attempts();
            if let Some(n) = attempts.get_mut(self.key.lock()) {
                *n -= 1;
                if *n == 0 {
                    attempts.remove(self.key.lock());
                }
            }
        }
    }
}

impl Channels {
    /// Handles one push frame from the connection. Runs on the connection's reader, so it only
    /// looks up a map and wakes a task: it never blocks.
    pub(crate) fn on_push(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let Some(Value::BulkString(channel)) = push.data.first() else {
                    return;
                };
                let key = lock_of_channel(channel);
                let Some(ch) = self.lock().get(key).cloned() else {
                    return;
                };
                // An observer is counted, and listens, from before its read of the lock: it
                // cannot miss this message.
                if ch.observers.load(Ordering::Acquire) > 0 {
                    ch.observed.notify_waiters();
                }
                // A release that frees the lock for many (a writer leaving a read/write lock
                // lets every reader in) says so; any other wakes one waiter.
                match push.data.get(1) {
                    Some(Value::BulkString(payload)) if payload.as_slice() == WAKE_ALL => {
                        ch.wake_alls.fetch_add(1, Ordering::AcqRel);
                        ch.alls_heard.fetch_add(1, Ordering::AcqRel);
                        ch.released_shared.notify_waiters();
                        ch.released_shared.notify_one();
                        ch.released.notify_one();
                    }
                    // Readers stay asleep: the intent that turned them away stands until its
                    // writer leaves (its release wakes all), gives up (so does its withdrawal)
                    // or lapses. Counted as a release that wakes all, for the writers between
                    // their attempt and their sleep (see `Subscription::wake_count`).
                    Some(Value::BulkString(payload)) if payload.as_slice() == WAKE_WRITER => {
                        ch.wake_alls.fetch_add(1, Ordering::AcqRel);
                        ch.alls_heard.fetch_add(1, Ordering::AcqRel);
                        ch.released.notify_one();
                    }
                    // One permit of several: one waiter is woken, and every waiter whose
                    // attempt was in flight tries again (the count) instead of sleeping, so
                    // that two permits freed together are taken by two.
                    Some(Value::BulkString(payload)) if payload.as_slice() == PERMIT_FREED => {
                        ch.wake_alls.fetch_add(1, Ordering::AcqRel);
                        ch.alls_heard.fetch_add(1, Ordering::AcqRel);
                        ch.wake_one();
                    }
                    Some(Value::BulkString(payload)) if payload.as_slice() == TAKEN => {}
                    Some(Value::BulkString(id)) if !id.is_empty() => {
                        if ch.first_hearing(id) {
                            ch.wake_one();
                        }
                    }
                    _ => ch.wake_one(),
                }
            }
            // A shard channel the server dropped on its own (its slot migrated to another
            // master) while this process has waiters on it: they would hear nothing more.
            // Let them try once now, and have the next one to sleep subscribe again; our own
            // SUNSUBSCRIBE (sent once the last waiter left) is confirmed the same way and is
            // ignored here.
            PushKind::SUnsubscribe => {
                let Some(Value::BulkString(channel)) = push.data.first() else {
                    return;
                };
                let key = lock_of_channel(channel);
                let Some(ch) = self.lock().get(key).cloned() else {
                    return;
                };
                if ch.waiters.load(Ordering::Acquire) > 0
                    || ch.observers.load(Ordering::Acquire) > 0
                {
                    ch.dropped.store(true, Ordering::Release);
                    ch.released.notify_waiters();
                    ch.released_shared.notify_waiters();
                    ch.observed.notify_waiters();
                }
            }
            // Releases published while the connection was down are lost: let every waiter
            // try once now rather than sleep until its fallback, and once more when the
            // connection is back (see `Notifier::rejoins`).
            PushKind::Disconnection => {
                self.wake_all();
                self.down.notify_one();
            }
            _ => {}
        }
    }

    /// How many releases that free `key` for many this process heard on its channel, plus
    /// its subscriptions to it if `with_subscriptions` (0 when nobody here listens); see
    /// [`Subscription::wake_count`]. Without a waiter here it answers 0 without looking (an
    /// uncontended attempt takes no lock for it): a count below the true one only costs a
    /// waiter one early attempt.
    pub(crate) fn wake_count(&self, key: &LockKey, with_subscriptions: bool) -> u64 {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.lock()
            .get(key.lock())
            .map_or(0, |ch| ch.wake_count(with_subscriptions))
    }

    /// Called before a task's first attempt at a lock. If other tasks of this process are
    /// already attempting or waiting, the newcomer should queue behind them (returns
    /// [`Arrival::Queue`] with when the holder's lease ends at the latest, if known), instead
    /// of racing them: a task that just released would otherwise win again at once, and a
    /// crowd arriving together would all hit Redis. Otherwise the caller attempts, marked as
    /// in flight until the returned [`Arrival::Attempt`] is dropped.
    pub(crate) fn arrive(self: &Arc<Self>, key: &LockKey) -> Arrival {
        // The channels stay locked until this caller is counted in (always in this order:
        // channels, then attempts), so a waiter that subscribes meanwhile is seen.
        let map = self.lock();
        let mut attempts = self.attempts();
        let waiting = map.get(key.lock());
        let busy = waiting.is_some_and(|ch| ch.waiters.load(Ordering::Acquire) > 0)
            || attempts.contains_key(key.lock());
        if busy {
            let until = waiting.and_then(|ch| *lock(&ch.holder_until));
            return Arrival::Queue {
                holder_until: until.filter(|&t| t > Instant::now()),
            };
        }
        attempts.insert(key.shared().clone(), 1);
        Arrival::Attempt(InFlight {
            key: key.clone(),
            channels: Arc::downgrade(self),
        })
    }

    /// How many tasks of this process wait subscribed to `key`'s channel.
    pub(crate) fn local_waiters(&self, key: &[u8]) -> usize {
        self.lock()
            .get(key)
            .map_or(0, |ch| ch.waiters.load(Ordering::Acquire))
    }

    /// Passes a released hold to the first local waiter of its lock, if that waiter takes
    /// holds on the same `terms`; gives the transfer back (`Some`) otherwise.
    pub(crate) fn hand_off(&self, transfer: Transfer, terms: &Terms) -> Option<Transfer> {
        let Some(ch) = self.lock().get(transfer.hold.key.lock()).cloned() else {
            return Some(transfer);
        };
        ch.handoff.offer(transfer, terms)
    }

    /// How many tasks of this process wait for `key` ready to take a hold handed to them.
    pub(crate) fn handoff_waiters(&self, key: &[u8]) -> usize {
        self.lock().get(key).map_or(0, |ch| ch.handoff.len())
    }

    /// Called before a real release of a hold that could have been handed over: if local
    /// waiters wait and other processes were seen contending lately, the local waiters this
    /// release wakes hold back for [`COURTESY`], giving the others' waiters the first try.
    pub(crate) fn before_release(&self, key: &LockKey) {
        if !handoff::slots_open() {
            return;
        }
        let Some(ch) = self.lock().get(key.lock()).cloned() else {
            return;
        };
        let now = Instant::now();
        let rival = *lock(&ch.rival_seen);
        if rival.is_some_and(|t| now.saturating_duration_since(t) < RIVAL_WINDOW) {
            *lock(&ch.courtesy_until) = Some(now + COURTESY);
        }
    }

    /// The entry of `key`'s channel, made if there is none (the key is shared, not copied).
    /// The caller holds the map's lock until it has counted itself in.
    pub(crate) fn entry(map: &mut ChannelMap, key: &LockKey) -> Arc<Channel> {
        match map.get(key.lock()) {
            Some(ch) => ch.clone(),
            None => map
                .entry(key.shared().clone())
                .or_insert_with(Channel::new)
                .clone(),
        }
    }

    /// Drops the channel's entry if nobody uses it any more.
    pub(crate) fn forget_if_idle(&self, key: &[u8], ch: &Arc<Channel>) {
        let mut map = self.lock();
        let idle = ch.waiters.load(Ordering::Acquire) == 0
            && ch.observers.load(Ordering::Acquire) == 0
            && ch.subscribed.try_lock().is_ok_and(|s| s.is_empty());
        if idle && map.get(key).is_some_and(|c| Arc::ptr_eq(c, ch)) {
            map.remove(key);
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ChannelMap> {
        lock(&self.map)
    }

    /// Wakes every sleeping waiter of this process for one attempt, and every observer.
    pub(crate) fn wake_all(&self) {
        for ch in self.lock().values() {
            ch.released.notify_waiters();
            ch.released_shared.notify_waiters();
            ch.observed.notify_waiters();
        }
    }

    fn attempts(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<[u8]>, usize, foldhash::quality::RandomState>> {
        lock(&self.attempts)
    }
}

impl Listeners for Channels {
    /// True when a task of this client waits subscribed to `key`'s channel (any name's of a
    /// set). Its release then publishes whether or not the lock is marked as waited for: tasks
    /// that queued behind a local attempt never sent one, so never marked it, and the local
    /// attempt that did mark it may be the very hold now released.
    fn listening(&self, key: &LockKey) -> bool {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return false;
        }
        let map = self.lock();
        key.members().iter().any(|name| {
            map.get(name.lock())
                .is_some_and(|ch| ch.waiters.load(Ordering::Acquire) > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(channel: &[u8], payload: &[u8]) -> PushInfo {
        PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.to_vec()),
                Value::BulkString(payload.to_vec()),
            ],
        }
    }

    /// A process with a waiter on `key`'s channel (the count is kept only while one listens).
    fn listening(key: &LockKey) -> (Arc<Channels>, Arc<Channel>) {
        let channels = Arc::new(Channels::default());
        let ch = Channels::entry(&mut channels.lock(), key);
        ch.waiters.fetch_add(1, Ordering::AcqRel);
        channels.waiting.fetch_add(1, Ordering::AcqRel);
        (channels, ch)
    }

    /// Two permits freed while a process's waiters have attempts in flight: a `Notify` keeps
    /// one wake-up, so the second waiter to sleep would sleep to the lease end its busy answer
    /// named. Each freed permit is counted, so every waiter whose attempt was in flight sees
    /// the count move and tries again. The payload is the one the semaphore's release script
    /// publishes (issue 36, item 1: the script published an empty payload, which counted
    /// nothing).
    #[test]
    fn every_freed_permit_is_counted_for_the_waiters_in_flight() {
        let release = include_str!("semaphore/release.lua");
        let published = format!("KEYS[1], '{}')", std::str::from_utf8(PERMIT_FREED).unwrap());
        assert!(
            release.contains(&published),
            "the semaphore's release publishes {PERMIT_FREED:?}"
        );
        let key = LockKey::new("distlock", b"permits", 1024).unwrap();
        let (channels, _ch) = listening(&key);
        let at_attempt = channels.wake_count(&key, true);
        channels.on_push(message(key.lock(), PERMIT_FREED));
        channels.on_push(message(key.lock(), PERMIT_FREED));
        assert_eq!(channels.wake_count(&key, true), at_attempt + 2);
        assert_eq!(
            channels.wake_count(&key, false),
            2,
            "queued waiters count them too"
        );
    }

    /// The control: a release of an exclusive lock frees it for one, so it is not counted
    /// (a waiter in flight would only make an attempt bound to fail).
    #[test]
    fn a_release_for_one_is_not_counted() {
        let key = LockKey::new("distlock", b"one", 1024).unwrap();
        let (channels, _ch) = listening(&key);
        let at_attempt = channels.wake_count(&key, true);
        channels.on_push(message(key.lock(), b""));
        channels.on_push(message(key.lock(), b"wake-id-1"));
        assert_eq!(channels.wake_count(&key, true), at_attempt);
    }
}
