//! Wake-up on release: waiters sleep until a release is published instead of polling Redis.
//!
//! Release scripts publish on the lock's channel (the lock key's string, same slot), with the
//! payload `all` when every waiter should try (readers after a writer left), `writer` when
//! only a waiting writer should (a read/write lock's last reader left while writers wait, and
//! the readers behind them cannot enter yet). A setnx release
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

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::channels::{Channel, Channels};
use crate::handoff::{self, OpenSlot, Terms};
use crate::key::LockKey;
use crate::nodes::Nodes;
use crate::probe::Probing;
use crate::sync::lock;

/// Bound on an UNSUBSCRIBE's answer: the connection's own response timeout applies too; this
/// only keeps a frozen quorum node from holding the channel's state for long.
const RESPONSE_BOUND: Duration = Duration::from_secs(1);

/// Subscribes waiters and delivers releases to them.
pub(crate) struct Notifier {
    channels: Arc<Channels>,
    nodes: Arc<Nodes>,
    /// The task that sees the subscriptions' connection back (none on a quorum).
    rejoin: Option<tokio::task::AbortHandle>,
    /// When the server last refused the subscription as an unknown command (`SSUBSCRIBE` on
    /// a Redis 6 Cluster): for [`REFUSAL_MEMO`] after that, waiters poll without asking again.
    refused_at: std::sync::Mutex<Option<Instant>>,
}

/// How long a server's refusal of the subscription command is taken as its answer for every
/// channel. Asked on every poll, a Redis 6 Cluster refused one waiter's `SSUBSCRIBE` 500 times
/// in 2 s (`suite/servers.rs`); asked again after this, a Cluster upgraded to 7.0 meanwhile
/// gives its waiters their wake-ups back.
const REFUSAL_MEMO: Duration = Duration::from_secs(10);

/// The server does not know the command (`ERR unknown command`): it will not later either.
fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.to_string().contains("unknown command")
}

/// The error a waiter gets in place of a subscription the server refused recently.
fn refused() -> redis::RedisError {
    (
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
        "unknown command: the server refused the wake-up subscription lately; polling",
    )
        .into()
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop();
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
            refused_at: std::sync::Mutex::new(None),
        }
    }

    /// Whether the server refused the subscription command less than [`REFUSAL_MEMO`] ago.
    fn refused_recently(&self) -> bool {
        lock(&self.refused_at).is_some_and(|at| at.elapsed() < REFUSAL_MEMO)
    }

    /// Stops the task behind [`rejoins`](Self::rejoins), for good (the client is shut down or
    /// dropped).
    pub(crate) fn stop(&self) {
        if let Some(task) = &self.rejoin {
            task.abort();
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
    /// connections than the subscriptions' one (see `nodes::Node::lane`), so their attempts
    /// do not wait for it to come back; this is what tells them when it has.
    pub(crate) fn rejoins(&self) -> u64 {
        self.channels.rejoins.load(Ordering::Acquire)
    }

    /// Joins the queue of `channel`, subscribing the connection if this is its first waiter.
    /// The subscription is confirmed before this returns, so a release published afterwards
    /// cannot be missed. Returns whether this call sent the SUBSCRIBE or is the first waiter
    /// on a channel subscribed already (by an observer, or by waiters gone meanwhile): that
    /// caller must re-check the lock once before sleeping, since a release just before the
    /// subscription (or its own arrival) reached nobody here. Later joiners
    /// need not for a release that wakes one: it was either heard by this process or
    /// preceded the first joiner's re-check. A release that wakes all is for every waiter,
    /// which compares [`Subscription::wake_count`] (it counts the subscription too).
    pub(crate) async fn subscribe(
        &self,
        key: &LockKey,
    ) -> redis::RedisResult<(Subscription, bool)> {
        self.join(key, Role::Waiter).await
    }

    /// Listens to `key`'s channel as an observer (see [`Role::Observer`]), subscribing the
    /// connection if nobody here listens yet; confirmed, as with [`subscribe`](Self::subscribe),
    /// before this returns.
    pub(crate) async fn observe(&self, key: &LockKey) -> redis::RedisResult<Subscription> {
        Ok(self.join(key, Role::Observer).await?.0)
    }

    async fn join(&self, key: &LockKey, role: Role) -> redis::RedisResult<(Subscription, bool)> {
        let (ch, first_waiter) = {
            let mut map = self.channels.lock();
            let ch = Channels::entry(&mut map, key);
            let before = match role {
                Role::Waiter => {
                    self.channels.waiting.fetch_add(1, Ordering::AcqRel);
                    ch.waiters.fetch_add(1, Ordering::AcqRel)
                }
                Role::Observer => ch.observers.fetch_add(1, Ordering::AcqRel),
            };
            (ch, role == Role::Waiter && before == 0)
        };
        let subscription = Subscription {
            key: key.clone(),
            ch: ch.clone(),
            channels: Arc::downgrade(&self.channels),
            nodes: self.nodes.clone(),
            role,
        };
        let mut subscribed = ch.subscribed.lock().await;
        if !subscribed.is_empty() {
            // The first waiter re-checks even on a channel subscribed already (an observer's):
            // the subscription may postdate its last attempt, and a release between the two
            // reached nobody.
            return Ok((subscription, first_waiter));
        }
        // A quorum's releases publish on every node that held the lock: it listens on all
        // that answer (see `Nodes::subscribe`).
        let single = !self.nodes.is_quorum();
        if single && self.refused_recently() {
            return Err(refused());
        }
        match self.nodes.subscribe(&key.channel()).await {
            Ok(nodes) => *subscribed = nodes,
            Err(e) => {
                if single && is_unknown_command(&e) {
                    *lock(&self.refused_at) = Some(Instant::now());
                }
                return Err(e);
            }
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
        let channel = sub.key.channel();
        match (self.nodes)
            .resubscribe(subscribed[0], &channel, RESPONSE_BOUND)
            .await
        {
            Ok(()) => true,
            Err(_) => {
                sub.ch.dropped.store(true, Ordering::Release);
                false
            }
        }
    }
}

/// Who listens to a lock's channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A task waiting for the lock: each release wakes one waiter, and local newcomers queue
    /// behind the waiters.
    Waiter,
    /// A task that only watches who holds the lock (see `election`): woken by every message
    /// ([`Subscription::changed`]), it takes no waiter's wake-up and queues nobody.
    Observer,
}

/// One waiter's place in a channel's queue (or an observer's); leaving the last place
/// unsubscribes.
pub(crate) struct Subscription {
    key: LockKey,
    ch: Arc<Channel>,
    channels: Weak<Channels>,
    nodes: Arc<Nodes>,
    role: Role,
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

    /// How many releases that free the lock for many were heard on the channel, plus (with
    /// `with_subscriptions`) the subscriptions made to it. Every waiter compares it with the
    /// count when its last attempt was sent: such a release in between freed the lock for it
    /// too (for readers, or for a writer once the last reader left), though its wake-up may
    /// have gone to another waiter, and one just before a subscription reached nobody here.
    /// A waiter that queued on arrival without an attempt counts the releases alone.
    pub(crate) fn wake_count(&self, with_subscriptions: bool) -> u64 {
        self.ch.wake_count(with_subscriptions)
    }

    /// Resolves at the next message heard on the channel, or when messages may have gone
    /// unheard (see [`Channel::observed`]). Enable it before reading the lock, so that a
    /// message during the read is not missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.ch.observed.notified()
    }

    /// The lock's probe among this process's waiters.
    pub(crate) fn probing(&self) -> &Arc<Probing> {
        &self.ch.probing
    }

    /// Sleeps until a release is published (true) or `fallback` passes (false), in the queue
    /// of the waiters that may share the lock if `shared`. Returns true at once if the
    /// subscriptions' connection came back since `rejoins` (the caller's
    /// [`Notifier::rejoins`] when it last attempted): a release may have gone unheard; or if
    /// the channel's [`wake_count`](Self::wake_count) (with subscriptions if `seen.0`) is no
    /// longer `seen.1`: a release for several came since the caller's last attempt.
    ///
    /// The wake-up is registered before either is read. A message handled on the connection's
    /// thread between a check and the registration would otherwise miss this caller: a
    /// `notify_waiters` wakes only those registered, and the one permit a `notify_one` keeps
    /// goes to whichever waiter registers first (spec/wakeup.pml found it: two permits freed
    /// and one waiter asleep, or a reader asleep past a writer's release).
    pub(crate) async fn released(
        &self,
        fallback: Duration,
        rejoins: u64,
        shared: bool,
        seen: (bool, u64),
    ) -> bool {
        let released = if shared {
            self.ch.released_shared.notified()
        } else {
            self.ch.released.notified()
        };
        tokio::pin!(released);
        released.as_mut().enable();
        let rejoined = self
            .channels
            .upgrade()
            .is_some_and(|channels| channels.rejoins.load(Ordering::Acquire) != rejoins);
        let counted = self.wake_count(seen.0) != seen.1;
        rejoined || counted || tokio::time::timeout(fallback, released).await.is_ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let (mine, others) = match self.role {
            Role::Waiter => {
                if let Some(channels) = self.channels.upgrade() {
                    channels.waiting.fetch_sub(1, Ordering::AcqRel);
                }
                (&self.ch.waiters, &self.ch.observers)
            }
            Role::Observer => (&self.ch.observers, &self.ch.waiters),
        };
        // SeqCst: a waiter and an observer leaving together must not both see the other
        // still there.
        if mine.fetch_sub(1, Ordering::SeqCst) != 1 || others.load(Ordering::SeqCst) != 0 {
            return;
        }
        // The last local listener left: unsubscribe, unless a new one arrived meanwhile.
        let (ch, key, channels, nodes) = (
            self.ch.clone(),
            self.key.clone(),
            self.channels.clone(),
            self.nodes.clone(),
        );
        let tasks = nodes.tasks.clone();
        tasks.spawn(async move {
            let mut subscribed = ch.subscribed.lock().await;
            if ch.waiters.load(Ordering::Acquire) != 0 || ch.observers.load(Ordering::Acquire) != 0
            {
                return;
            }
            // Whether an UNSUBSCRIBE whose answer was lost took effect is unknown: count the
            // channel as not subscribed either way, so the next waiter subscribes afresh
            // (SUBSCRIBE is idempotent) rather than trust a subscription that may be gone.
            let on = std::mem::take(&mut *subscribed);
            nodes.unsubscribe(&on, &key.channel(), RESPONSE_BOUND).await;
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
        nodes.subscriptions_answer(REJOIN_PAUSE).await;
        channels.rejoins.fetch_add(1, Ordering::AcqRel);
        channels.wake_all();
    }
}
