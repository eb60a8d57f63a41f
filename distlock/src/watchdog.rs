//! Lease renewal for every lock a client holds: one task and one pipeline per tick.
//!
//! A timer per lock would make 10,000 held locks cost 10,000 timers and 10,000 round trips
//! per period. Instead one task per client keeps the held leases in a table, sleeps until the
//! earliest is due, and renews every lease that is at least half-way to its due time in one
//! pipeline of owner-checked extend scripts: one round trip per node per tick, however many
//! locks. A quorum lease is renewed when a majority of nodes renewed it. On a Redis Cluster a
//! pipeline can only go to one node, so the batch is split by master (see
//! [`renew_on_cluster`]): one round trip per master per tick.
//!
//! A refused renewal (the lock is no longer ours) declares the lease lost at once. A failed
//! one (timeout, connection down) is retried soon; if no renewal succeeds before the lease
//! runs out on the local clock, the guard reports it lost by its own deadline
//! (see [`LeaseState`]). Releasing removes the lease from the table before the release script
//! is sent on the same connection, so no renewal can follow a release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::algorithm::{renewed_lease, Algorithm, HoldId};
use crate::conn::{Conn, SlotOwners};
use crate::key::LockKey;
use crate::lease::LeaseState;
use crate::quorum::{majority_lease, Node, Nodes};

/// How soon a renewal that failed for a transient reason is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// One held lease to keep alive.
pub(crate) struct Watch {
    pub(crate) algorithm: &'static Algorithm,
    pub(crate) key: LockKey,
    pub(crate) id: HoldId,
    pub(crate) ttl_ms: u64,
    pub(crate) period: Duration,
    /// Renewal stops here (the optional cap on total hold time); the lease then runs out.
    pub(crate) stop_at: Option<Instant>,
    pub(crate) lease: Arc<LeaseState>,
}

struct Entry {
    watch: Watch,
    due: Instant,
}

/// Handle to a client's renewal task.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

#[derive(Default)]
struct Shared {
    entries: Mutex<HashMap<u64, Entry, foldhash::fast::RandomState>>,
    next_id: AtomicU64,
    /// Wakes the task when a lease is added (it may be due sooner than the current sleep).
    added: Notify,
    /// Renewal round trips sent, for benchmarks and tests.
    round_trips: AtomicU64,
    /// When the task will wake on its own (`None`: it waits for a lease to be added).
    sleeping_until: Mutex<Option<Instant>>,
    /// On a Redis Cluster: which master serves which slots, to batch renewals per master.
    slot_owners: tokio::sync::Mutex<SlotOwners>,
}

impl Shared {
    fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, Entry, foldhash::fast::RandomState>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sleeping_until(&self) -> Option<Instant> {
        *self
            .sleeping_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn set_sleeping_until(&self, at: Option<Instant>) {
        *self
            .sleeping_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = at;
    }
}

impl Watchdog {
    pub(crate) fn start(nodes: Arc<Nodes>) -> Watchdog {
        let shared = Arc::new(Shared::default());
        // The task holds the table too; dropping the client aborts it.
        let task = tokio::spawn(run(shared.clone(), nodes)).abort_handle();
        Watchdog { shared, task }
    }

    /// Starts renewing a lease; returns the id to [`unwatch`](Self::unwatch) it with.
    pub(crate) fn watch(&self, watch: Watch) -> u64 {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let due = Instant::now() + watch.period;
        let mut entries = self.shared.entries();
        entries.insert(id, Entry { watch, due });
        // Wake the task only if it sleeps past this lease's due time; usually it is already
        // due to wake earlier, and waking it for every acquisition would cost every lock.
        let wake = self.shared.sleeping_until().is_none_or(|t| due < t);
        drop(entries);
        if wake {
            self.shared.added.notify_one();
        }
        id
    }

    /// Stops renewing a lease. Synchronous, so it takes effect before the caller's next
    /// command is sent.
    pub(crate) fn unwatch(&self, id: u64) {
        self.shared.entries().remove(&id);
    }

    /// Renewal pipelines sent so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::Relaxed)
    }

    /// Leases currently renewed.
    pub(crate) fn len(&self) -> usize {
        self.shared.entries().len()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One renewal in a batch.
struct Due {
    id: u64,
    algorithm: &'static Algorithm,
    key: LockKey,
    hold: HoldId,
    ttl_ms: u64,
}

async fn run(shared: Arc<Shared>, nodes: Arc<Nodes>) {
    loop {
        let (batch, next) = collect(&shared);
        if batch.is_empty() {
            let added = shared.added.notified();
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = added => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
                    }
                }
                None => added.await,
            }
            continue;
        }
        let sent = Instant::now();
        // A client that only renews keeps its holders' record alive too.
        nodes.records.rewrite_if_old(&nodes.nodes);
        if let [node] = &nodes.nodes[..] {
            if let Conn::Cluster(_) = node.conn {
                let (replies, pipelines) =
                    renew_on_cluster(&node.conn, &batch, &shared.slot_owners).await;
                shared.round_trips.fetch_add(pipelines, Ordering::Relaxed);
                record(&shared, &batch, &[replies], nodes.quorum, sent);
                continue;
            }
        }
        // One pipeline per node, all nodes at once; a quorum lease needs a majority of them.
        let per_node = nodes
            .nodes
            .iter()
            .map(|node| renew_on(node, &batch, nodes.node_timeout, nodes.is_quorum()));
        let replies = futures_util::future::join_all(per_node).await;
        shared.round_trips.fetch_add(1, Ordering::Relaxed);
        record(&shared, &batch, &replies, nodes.quorum, sent);
    }
}

/// What one node said to a batch: per lease, renewed (with the lease it now holds) or refused
/// (`Some(None)`); `None` where it gave no usable answer (unreachable, too slow, distrusted,
/// or a script error).
type NodeReplies = Vec<Option<Option<Duration>>>;

async fn renew_on(node: &Node, batch: &[Due], node_timeout: Duration, quorum: bool) -> NodeReplies {
    let nothing = || vec![None; batch.len()];
    if !node.trusted() {
        return nothing();
    }
    let mut pipe = redis::Pipeline::with_capacity(batch.len());
    for d in batch {
        pipe.add_command(d.algorithm.extend_cmd(&d.key, &d.hold, d.ttl_ms));
    }
    let mut conn = node.conn.clone();
    let query = pipe
        .ignore_errors()
        .query_async::<Vec<redis::RedisResult<i64>>>(&mut conn);
    // A single node is bounded by the response timeout; in a quorum one slow node must not
    // hold up the renewal the majority can make without it.
    let replies = if quorum {
        match tokio::time::timeout(node_timeout, query).await {
            Ok(r) => r,
            Err(_) => return nothing(),
        }
    } else {
        query.await
    };
    let Ok(replies) = replies else {
        return nothing();
    };
    let mut reload = Vec::new();
    let answers = batch
        .iter()
        .zip(replies)
        .map(|(d, reply)| match reply {
            Ok(ms) => Some(renewed_lease(ms)),
            Err(e) => {
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                    reload.push(d.algorithm);
                }
                None
            }
        })
        .collect();
    // The server lost its scripts (a restart): load them again before the retry.
    for algorithm in dedup(reload) {
        let _ = algorithm
            .extend
            .prepare_invoke()
            .load_async(&mut conn)
            .await;
    }
    answers
}

/// Renews a batch on a Redis Cluster: one pipeline per master, all at once (a pipeline goes
/// to one node; which master serves which slot comes from [`SlotOwners`]). Slots the map
/// does not know get a pipeline each, routed by slot. A renewal the master refused with an
/// error (the slot moved or is migrating, or a promoted replica lacks the script) is sent
/// again alone, through the routing that follows redirections and sends the script's source
/// where it is missing, and the map is read again before the next tick. Returns the answers
/// and the number of pipelines sent.
async fn renew_on_cluster(
    conn: &Conn,
    batch: &[Due],
    owners: &tokio::sync::Mutex<SlotOwners>,
) -> (NodeReplies, u64) {
    #[derive(PartialEq, Eq, Hash)]
    enum Target {
        Master(String, u16),
        Slot(u16),
    }
    let mut owners = owners.lock().await;
    if owners.needs_reading() {
        owners.read(&mut conn.clone()).await;
    }
    let mut groups: HashMap<Target, Vec<usize>> = HashMap::new();
    for (i, d) in batch.iter().enumerate() {
        let slot = d.key.slot();
        let target = match owners.owner(slot) {
            Some((host, port)) => Target::Master(host.to_owned(), port),
            None => Target::Slot(slot),
        };
        groups.entry(target).or_default().push(i);
    }
    let pipelines = groups.len() as u64;
    let misrouted = AtomicBool::new(false);
    let misrouted = &misrouted;
    let per_group = groups.into_iter().map(|(target, indices)| async move {
        let mut conn = conn.clone();
        let send = |conn: &mut Conn, indices: &[usize]| {
            let mut pipe = redis::Pipeline::with_capacity(indices.len());
            for &i in indices {
                let d = &batch[i];
                pipe.add_command(d.algorithm.extend_cmd(&d.key, &d.hold, d.ttl_ms));
            }
            let mut conn = conn.clone();
            let target = &target;
            async move {
                match target {
                    Target::Master(host, port) => conn.pipeline_to_node(&pipe, host, *port).await,
                    Target::Slot(slot) => conn.pipeline_to_slot(&pipe, *slot).await,
                }
            }
        };
        let Ok(mut values) = send(&mut conn, &indices).await else {
            misrouted.store(true, Ordering::Relaxed);
            return indices.into_iter().map(|i| (i, None)).collect::<Vec<_>>();
        };
        // A master that never ran the extend script (only acquisitions so far), or a promoted
        // replica, answers NOSCRIPT: load the scripts there once and send those again together.
        let noscript = |v: &redis::Value| {
            matches!(v, redis::Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript))
        };
        let missing: Vec<usize> = (0..indices.len()).filter(|&k| noscript(&values[k])).collect();
        if !missing.is_empty() {
            let algorithms = dedup(missing.iter().map(|&k| batch[indices[k]].algorithm).collect());
            let mut load = redis::Pipeline::new();
            for algorithm in algorithms {
                load.cmd("SCRIPT").arg("LOAD").arg(algorithm.extend.source());
            }
            let loaded = match &target {
                Target::Master(host, port) => conn.pipeline_to_node(&load, host, *port).await,
                Target::Slot(slot) => conn.pipeline_to_slot(&load, *slot).await,
            };
            let again: Vec<usize> = missing.iter().map(|&k| indices[k]).collect();
            if let (Ok(_), Ok(retried)) = (loaded, send(&mut conn, &again).await) {
                for (&k, value) in missing.iter().zip(retried) {
                    values[k] = value;
                }
            }
        }
        // Any other error (the slot moved or is migrating): that renewal alone again, through
        // the routing that follows redirections; all such at once.
        let answers = indices.into_iter().zip(values).map(|(i, value)| {
            let mut conn = conn.clone();
            async move {
                let answer = match value {
                    redis::Value::Int(ms) => Some(renewed_lease(ms)),
                    redis::Value::ServerError(_) => {
                        misrouted.store(true, Ordering::Relaxed);
                        let d = &batch[i];
                        let cmd = d.algorithm.extend_cmd(&d.key, &d.hold, d.ttl_ms);
                        d.algorithm.send_extend(&mut conn, &d.key, &cmd).await.ok()
                    }
                    _ => None,
                };
                (i, answer)
            }
        });
        futures_util::future::join_all(answers).await
    });
    let mut replies = vec![None; batch.len()];
    for (i, answer) in futures_util::future::join_all(per_group)
        .await
        .into_iter()
        .flatten()
    {
        replies[i] = answer;
    }
    if misrouted.load(Ordering::Relaxed) {
        owners.mark_stale();
    }
    (replies, pipelines)
}

/// Applies one tick's answers: a lease is renewed when a majority renewed it, lost when a
/// majority can no longer renew it because nodes refused, else retried soon.
fn record(shared: &Shared, batch: &[Due], replies: &[NodeReplies], quorum: usize, sent: Instant) {
    let nodes = replies.len();
    let mut entries = shared.entries();
    for (i, d) in batch.iter().enumerate() {
        // Released while the renewal was in flight: nothing to record.
        let Some(entry) = entries.get_mut(&d.id) else {
            continue;
        };
        let mut renewed: Vec<Duration> = replies.iter().filter_map(|r| r[i].flatten()).collect();
        let refused = replies.iter().filter(|r| r[i] == Some(None)).count();
        if renewed.len() >= quorum {
            let lease = majority_lease(&mut renewed, quorum);
            if entry.watch.lease.renewed(sent, lease) {
                entry.due = sent + entry.watch.period;
            } else {
                entries.remove(&d.id);
            }
        } else if refused > nodes - quorum {
            entry.watch.lease.declare_lost();
            entries.remove(&d.id);
        } else {
            entry.watch.lease.labels.renewal_failed();
            entry.due = Instant::now() + RETRY_AFTER;
        }
    }
}

/// A tick: once the earliest lease is due, takes every lease at least half-way to its due
/// time, so they share this round trip, and returns the earliest due time of the rest (or,
/// before the earliest is due, nothing and when it will be). Drops leases that are lost or
/// past their cap.
///
/// Waiting for a lease to be actually due before taking the half-way ones matters when locks
/// are taken one after another: each lease then crosses its half-way point a moment after the
/// previous one, and taking them as they cross would send a round trip per lock instead of one
/// per tick. After a tick, every lease left is more than half a period from due, so ticks are
/// at least half a period apart (failed renewals, retried sooner, aside).
fn collect(shared: &Shared) -> (Vec<Due>, Option<Instant>) {
    let now = Instant::now();
    let mut entries = shared.entries();
    let mut earliest: Option<Instant> = None;
    entries.retain(|_, e| {
        if !e.watch.lease.is_valid() {
            e.watch.lease.declare_lost();
            return false;
        }
        if e.watch.stop_at.is_some_and(|stop| e.due >= stop) {
            // Capped: let the lease run out; the guard reports the loss at its deadline.
            return false;
        }
        earliest = Some(earliest.map_or(e.due, |t| t.min(e.due)));
        true
    });
    let mut batch = Vec::new();
    let mut next = earliest;
    if earliest.is_some_and(|t| t <= now) {
        next = None;
        for (&id, e) in entries.iter_mut() {
            if e.due <= now + e.watch.period / 2 {
                batch.push(Due {
                    id,
                    algorithm: e.watch.algorithm,
                    key: e.watch.key.clone(),
                    hold: e.watch.id.clone(),
                    ttl_ms: e.watch.ttl_ms,
                });
                // Not again until this attempt's outcome sets a new due time.
                e.due = now + e.watch.period;
            } else {
                next = Some(next.map_or(e.due, |n| n.min(e.due)));
            }
        }
    }
    // Under the table's lock, so `watch` sees either this or the next wake-up time. While a
    // batch is out the task is awake and re-reads the table before sleeping again.
    shared.set_sleeping_until(if batch.is_empty() { next } else { Some(now) });
    (batch, next)
}

fn dedup(mut algorithms: Vec<&'static Algorithm>) -> Vec<&'static Algorithm> {
    algorithms.sort_by_key(|a| *a as *const Algorithm as usize);
    algorithms.dedup_by_key(|a| *a as *const Algorithm as usize);
    algorithms
}
