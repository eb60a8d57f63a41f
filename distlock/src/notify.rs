//! Wake-up on release: waiters sleep until a release is published instead of polling Redis.
//!
//! Release scripts publish on the lock's channel (the lock key's string, same slot), with the
//! payload `all` when every waiter should try (readers after a writer left). A setnx release
//! publishes only when someone may listen: a waiter's busy attempt marks the lock as waited
//! for (see `setnx/acquire.lua`), and a client whose own tasks wait says so with its release
//! ([`Channels::listening`]); an uncontended release costs Redis no `PUBLISH`. The
//! client's connections run RESP3, so those messages arrive as push frames on a connection
//! it already has (a single node's first one), and redis-rs re-subscribes by itself after a
//! reconnect.
//!
//! Per channel, local waiters queue on one [`Notify`]: a release wakes **one** of them, in
//! arrival order, so 200 waiters cost one attempt per release per process instead of 200,
//! and a task that just released cannot jump ahead of tasks already waiting here. A message
//! that is lost (a reconnect, a waiter cancelled at the wrong moment) costs at most the
//! fallback timeout, which the acquire loop caps by the holder's remaining lease.
//!
//! A quorum client subscribes on every node that answers, since any one of them may be
//! frozen or cut off exactly when the holder releases. A setnx release publishes its own
//! wake-up id on each node, and the id is counted once, so five nodes do not wake five
//! waiters for one release.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::handoff::{self, OpenSlot, Terms, Transfer};
use crate::key::{lock_of_channel, LockKey};
use crate::probe::Probing;
use crate::quorum::{until_answered, Nodes};
use crate::sync::lock;

/// The payload a release script publishes to wake every waiter instead of one.
pub(crate) const WAKE_ALL: &[u8] = b"all";

/// Lock key to its channel's state. Keys can come from user input: a seeded hasher, but not
/// SipHash, which cost more than the lookups themselves.
type ChannelMap = HashMap<Arc<[u8]>, Arc<Channel>, foldhash::quality::RandomState>;

/// The waiters of one process, per channel. Keyed by the lock's key (shared with the
/// [`LockKey`], so an entry costs no copy of it), which [`lock_of_channel`] finds from the
/// channel.
#[derive(Default)]
pub(crate) struct Channels {
    map: Mutex<ChannelMap>,
    /// Local first attempts in flight, per lock key. Kept apart from the channels so that an
    /// uncontended acquisition (an attempt nobody waits behind) makes no channel entry: that
    /// allocation and its teardown were a twentieth of the client's work per cycle.
    attempts: Mutex<HashMap<Arc<[u8]>, usize, foldhash::quality::RandomState>>,
    /// Signalled when the connection the subscriptions live on is lost: wakes the task that
    /// waits for it to come back (see [`Notifier::rejoins`]).
    down: Notify,
    /// How many times that connection came back, subscribed again, so far.
    rejoins: AtomicU64,
    /// Waiters subscribed, over all channels: lets a release see in one load that no waiter
    /// of this client listens, the common case (see [`listening`](Self::listening)).
    waiting: AtomicUsize,
}

struct Channel {
    /// A release wakes the first queued waiter (or leaves a permit if none is parked).
    released: Notify,
    /// Live subscriptions of this process to the channel.
    waiters: AtomicUsize,
    /// Serialises SUBSCRIBE / UNSUBSCRIBE for the channel; the nodes subscribed on.
    subscribed: tokio::sync::Mutex<Vec<usize>>,
    /// Wake-up ids of releases heard lately, so one heard from several nodes wakes once.
    heard: Mutex<VecDeque<Vec<u8>>>,
    /// When the current holder's lease ends at the latest, as last seen by a local waiter:
    /// bounds the sleep of waiters that queue without asking the server.
    holder_until: Mutex<Option<Instant>>,
    /// When a local waiter, woken by a release, last found the lock taken by another
    /// process: other processes contend for it.
    rival_seen: Mutex<Option<Instant>>,
    /// Local waiters woken by a release of this process hold back until then, so that
    /// waiters of other processes get the lock as often as ours (see `before_release`).
    courtesy_until: Mutex<Option<Instant>>,
    /// The server dropped the subscription (a Cluster slot migrated away, taking its shard
    /// channels along): the next waiter to sleep subscribes again.
    dropped: AtomicBool,
    /// Local waiters that take a hold handed to them (see [`crate::handoff`]).
    handoff: handoff::Queue,
    /// Releases heard that free the lock for many (a writer leaving), and subscriptions made
    /// (a release just before one reached nobody here): counted, because the waiters between
    /// an attempt's busy answer and their sleep miss such a wake-up (a `Notify` keeps one
    /// permit, not one per waiter), and must know to try again (see
    /// [`Subscription::wake_alls`]).
    wake_alls: AtomicU64,
    /// The attempt one local waiter makes for the others (see [`Probing`]).
    probing: Arc<Probing>,
}

impl handoff::HasQueue for Channel {
    fn queue(&self) -> &handoff::Queue {
        &self.handoff
    }
}

impl Channel {
    fn new() -> Arc<Channel> {
        Arc::new(Channel {
            released: Notify::new(),
            waiters: AtomicUsize::new(0),
            subscribed: tokio::sync::Mutex::new(Vec::new()),
            heard: Mutex::new(VecDeque::new()),
            holder_until: Mutex::new(None),
            rival_seen: Mutex::new(None),
            courtesy_until: Mutex::new(None),
            dropped: AtomicBool::new(false),
            handoff: handoff::Queue::default(),
            wake_alls: AtomicU64::new(0),
            probing: Arc::default(),
        })
    }
}

/// Bound on an UNSUBSCRIBE's answer: the connection's own response timeout applies too; this
/// only keeps a frozen quorum node from holding the channel's state for long.
const RESPONSE_BOUND: Duration = Duration::from_secs(1);

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
    /// True the first time a release's wake-up id is heard.
    fn first_hearing(&self, id: &[u8]) -> bool {
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
                // A release that frees the lock for many (a writer leaving a read/write lock
                // lets every reader in) says so; any other wakes one waiter.
                match push.data.get(1) {
                    Some(Value::BulkString(payload)) if payload.as_slice() == WAKE_ALL => {
                        ch.wake_alls.fetch_add(1, Ordering::AcqRel);
                        ch.released.notify_waiters();
                        ch.released.notify_one();
                    }
                    Some(Value::BulkString(id)) if !id.is_empty() => {
                        if ch.first_hearing(id) {
                            ch.released.notify_one();
                        }
                    }
                    _ => ch.released.notify_one(),
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
                if ch.waiters.load(Ordering::Acquire) > 0 {
                    ch.dropped.store(true, Ordering::Release);
                    ch.released.notify_waiters();
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

    /// How many releases that free `key` for many this process heard on its channel (0 when
    /// nobody here listens to it); see [`Subscription::wake_alls`].
    pub(crate) fn wake_alls(&self, key: &LockKey) -> u64 {
        self.lock()
            .get(key.lock())
            .map_or(0, |ch| ch.wake_alls.load(Ordering::Acquire))
    }

    /// True when a task of this client waits subscribed to `key`'s channel. Its release then
    /// publishes whether or not the lock is marked as waited for: tasks that queued behind a
    /// local attempt never sent one, so never marked it, and the local attempt that did mark
    /// it may be the very hold now released.
    pub(crate) fn listening(&self, key: &LockKey) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
            && self
                .lock()
                .get(key.lock())
                .is_some_and(|ch| ch.waiters.load(Ordering::Acquire) > 0)
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
    fn entry(map: &mut ChannelMap, key: &LockKey) -> Arc<Channel> {
        match map.get(key.lock()) {
            Some(ch) => ch.clone(),
            None => map
                .entry(key.shared().clone())
                .or_insert_with(Channel::new)
                .clone(),
        }
    }

    /// Drops the channel's entry if nobody uses it any more.
    fn forget_if_idle(&self, key: &[u8], ch: &Arc<Channel>) {
        let mut map = self.lock();
        let idle = ch.waiters.load(Ordering::Acquire) == 0
            && ch.subscribed.try_lock().is_ok_and(|s| s.is_empty());
        if idle && map.get(key).is_some_and(|c| Arc::ptr_eq(c, ch)) {
            map.remove(key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ChannelMap> {
        lock(&self.map)
    }

    /// Wakes every sleeping waiter of this process for one attempt.
    fn wake_all(&self) {
        for ch in self.lock().values() {
            ch.released.notify_waiters();
        }
    }

    fn attempts(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<[u8]>, usize, foldhash::quality::RandomState>> {
        lock(&self.attempts)
    }
}

/// Subscribes waiters and delivers releases to them.
pub(crate) struct Notifier {
    channels: Arc<Channels>,
    nodes: Arc<Nodes>,
    /// The task that sees the subscriptions' connection back (none on a quorum).
    rejoin: Option<tokio::task::AbortHandle>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = &self.rejoin {
            task.abort();
        }
    }
}

/// Pause between the `PING`s that find the subscriptions' connection back. Each `PING` waits
/// for redis-rs's own reconnection (with its backoff) up to the node timeout; this only keeps
/// a server that stays down from being asked in a tight loop (as a quorum node's monitor).
const REJOIN_PAUSE: Duration = Duration::from_millis(100);

impl Notifier {
    /// Must be called inside a Tokio runtime: it starts the task behind
    /// [`rejoins`](Self::rejoins) for a client with one deployment.
    pub(crate) fn new(channels: Arc<Channels>, nodes: Arc<Nodes>) -> Self {
        // A quorum waiter listens on every node, so one node's outage costs it nothing.
        let rejoin = (!nodes.is_quorum())
            .then(|| tokio::spawn(rejoin(channels.clone(), nodes.clone())).abort_handle());
        Notifier {
            channels,
            nodes,
            rejoin,
        }
    }

    pub(crate) fn channels(&self) -> &Arc<Channels> {
        &self.channels
    }

    /// How many times the subscriptions' connection came back after a loss, subscribed
    /// again. A waiter compares it with its value when its last attempt was sent: if it
    /// changed, the connection was down at some point after that attempt, and a release
    /// published then reached no one here, so the waiter attempts again instead of sleeping.
    /// Waiters asleep when it changes are woken. A single node's waiters attempt on other
    /// connections than the subscriptions' one (see `quorum::Node::lane`), so their attempts
    /// do not wait for it to come back; this is what tells them when it has.
    pub(crate) fn rejoins(&self) -> u64 {
        self.channels.rejoins.load(Ordering::Acquire)
    }

    /// Joins the queue of `channel`, subscribing the connection if this is its first waiter.
    /// The subscription is confirmed before this returns, so a release published afterwards
    /// cannot be missed. Returns whether this call sent the SUBSCRIBE: that caller must
    /// re-check the lock once before sleeping, since a release just before the subscription
    /// reached nobody. Later joiners need not, unless they may share the lock: such a release
    /// was either heard by this process or preceded the first joiner's re-check, which takes
    /// an exclusive lock for itself but lets only itself into a shared one (readers compare
    /// [`Subscription::wake_alls`], which counts the subscription too).
    pub(crate) async fn subscribe(
        &self,
        key: &LockKey,
    ) -> redis::RedisResult<(Subscription, bool)> {
        let ch = {
            let mut map = self.channels.lock();
            let ch = Channels::entry(&mut map, key);
            ch.waiters.fetch_add(1, Ordering::AcqRel);
            self.channels.waiting.fetch_add(1, Ordering::AcqRel);
            ch
        };
        let subscription = Subscription {
            key: key.clone(),
            ch: ch.clone(),
            channels: Arc::downgrade(&self.channels),
            nodes: self.nodes.clone(),
        };
        let mut subscribed = ch.subscribed.lock().await;
        if !subscribed.is_empty() {
            return Ok((subscription, false));
        }
        let channel = key.channel();
        let nodes = &self.nodes;
        if !nodes.is_quorum() {
            nodes.nodes[0].conn.clone().subscribe(&channel).await?;
            subscribed.push(0);
            ch.wake_alls.fetch_add(1, Ordering::AcqRel);
            return Ok((subscription, true));
        }
        // Releases publish on every node that held the lock, but any one node may be frozen
        // or cut off: listen on all of them, each bounded like any quorum request.
        let attempts = nodes.nodes.iter().map(|node| {
            let channel = &channel;
            async move {
                let mut conn = node.conn.clone();
                match tokio::time::timeout(nodes.node_timeout, conn.subscribe(channel)).await {
                    Ok(result) => result,
                    Err(_) => Err((redis::ErrorKind::Io, "no answer to SUBSCRIBE").into()),
                }
            }
        });
        let mut last_error = None;
        for (i, result) in futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .enumerate()
        {
            match result {
                Ok(()) => subscribed.push(i),
                Err(e) => last_error = Some(e),
            }
        }
        if subscribed.is_empty() {
            return Err(last_error
                .unwrap_or_else(|| (redis::ErrorKind::Io, "no node to subscribe on").into()));
        }
        ch.wake_alls.fetch_add(1, Ordering::AcqRel);
        Ok((subscription, true))
    }
}

impl Notifier {
    /// Subscribes the connection again if the server dropped `sub`'s channel (see
    /// [`Channels::on_push`]). True when it did so now: the caller should then attempt at
    /// once, since a release may have gone unheard meanwhile. False when nothing was dropped,
    /// or subscribing failed (the waiter then sleeps until its fallback, and the next one
    /// to sleep tries again).
    pub(crate) async fn resubscribe(&self, sub: &Subscription) -> bool {
        if !sub.ch.dropped.load(Ordering::Acquire) {
            return false;
        }
        let subscribed = sub.ch.subscribed.lock().await;
        if subscribed.is_empty() || !sub.ch.dropped.swap(false, Ordering::AcqRel) {
            return false;
        }
        let mut conn = self.nodes.nodes[subscribed[0]].conn.clone();
        match tokio::time::timeout(RESPONSE_BOUND, conn.subscribe(&sub.key.channel())).await {
            Ok(Ok(())) => true,
            _ => {
                sub.ch.dropped.store(true, Ordering::Release);
                false
            }
        }
    }
}

/// One waiter's place in a channel's queue; leaving the last place unsubscribes.
pub(crate) struct Subscription {
    key: LockKey,
    ch: Arc<Channel>,
    channels: Weak<Channels>,
    nodes: Arc<Nodes>,
}

impl Subscription {
    /// Records how long the holder's lease has left, for waiters queueing after us.
    pub(crate) fn holder_seen(&self, remaining: Duration) {
        *lock(&self.ch.holder_until) = Some(Instant::now() + remaining);
    }

    /// When the holder's lease ends at the latest, as last seen by any local waiter.
    pub(crate) fn holder_until(&self) -> Option<Instant> {
        *lock(&self.ch.holder_until)
    }

    /// Records that a waiter woken by a release found the lock taken by another process.
    pub(crate) fn rival_seen(&self) {
        *lock(&self.ch.rival_seen) = Some(Instant::now());
    }

    /// Until when local waiters woken by a release hold back, if they do.
    pub(crate) fn courtesy_until(&self) -> Option<Instant> {
        *lock(&self.ch.courtesy_until)
    }

    /// Joins the lock's queue of waiters that take a hold handed to them.
    pub(crate) fn open_slot(&self, terms: Terms) -> OpenSlot {
        handoff::Queue::open(self.ch.clone(), terms)
    }

    /// How many releases that free the lock for many were heard on the channel, plus the
    /// subscriptions made to it. A waiter that may share the lock (a reader) compares it with
    /// the count when its last attempt was sent: such a release in between freed the lock
    /// for it too, though its wake-up may have gone to another waiter, and one just before a
    /// subscription reached nobody here.
    pub(crate) fn wake_alls(&self) -> u64 {
        self.ch.wake_alls.load(Ordering::Acquire)
    }

    /// The lock's probe among this process's waiters.
    pub(crate) fn probing(&self) -> &Arc<Probing> {
        &self.ch.probing
    }

    /// Sleeps until a release is published (true) or `fallback` passes (false). Returns true
    /// at once if the subscriptions' connection came back since `rejoins` (the caller's
    /// [`Notifier::rejoins`] when it last attempted): a release may have gone unheard.
    pub(crate) async fn released(&self, fallback: Duration, rejoins: u64) -> bool {
        // Created before the check: a rejoin after it wakes this future.
        let released = self.ch.released.notified();
        let rejoined = self
            .channels
            .upgrade()
            .is_some_and(|channels| channels.rejoins.load(Ordering::Acquire) != rejoins);
        rejoined || tokio::time::timeout(fallback, released).await.is_ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(channels) = self.channels.upgrade() {
            channels.waiting.fetch_sub(1, Ordering::AcqRel);
        }
        if self.ch.waiters.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // The last local waiter left: unsubscribe, unless a new one arrived meanwhile.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (ch, key, channels, nodes) = (
            self.ch.clone(),
            self.key.clone(),
            self.channels.clone(),
            self.nodes.clone(),
        );
        runtime.spawn(async move {
            let mut subscribed = ch.subscribed.lock().await;
            if ch.waiters.load(Ordering::Acquire) != 0 {
                return;
            }
            // Whether an UNSUBSCRIBE whose answer was lost took effect is unknown: count the
            // channel as not subscribed either way, so the next waiter subscribes afresh
            // (SUBSCRIBE is idempotent) rather than trust a subscription that may be gone.
            let channel = key.channel();
            for i in std::mem::take(&mut *subscribed) {
                let mut conn = nodes.nodes[i].conn.clone();
                let _ = tokio::time::timeout(RESPONSE_BOUND, conn.unsubscribe(&channel)).await;
            }
            drop(subscribed);
            if let Some(channels) = channels.upgrade() {
                channels.forget_if_idle(key.lock(), &ch);
            }
        });
    }
}

/// Waits for the subscriptions' connection to be lost, then for it to answer again, and tells
/// the waiters (see [`Notifier::rejoins`]). redis-rs sends the re-subscriptions first on a
/// new connection, so a `PING` answered there is answered after them.
async fn rejoin(channels: Arc<Channels>, nodes: Arc<Nodes>) {
    loop {
        channels.down.notified().await;
        let (ping, node_timeout) = (&redis::cmd("PING"), nodes.node_timeout);
        until_answered(REJOIN_PAUSE, || {
            let mut conn = nodes.nodes[0].conn.clone();
            async move {
                let answer = ping.query_async::<Value>(&mut conn);
                tokio::time::timeout(node_timeout, answer)
                    .await
                    .unwrap_or_else(|_| {
                        Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())
                    })
            }
        })
        .await;
        channels.rejoins.fetch_add(1, Ordering::AcqRel);
        channels.wake_all();
    }
}
