//! Lease renewal for every lock a client holds: one task, batched pipelines per node.
//!
//! A timer per lock would make 10,000 held locks cost 10,000 timers and 10,000 round trips
//! per period. Instead one task per client keeps the held leases in a table, sleeps until the
//! earliest is due, and then starts a renewal of every lease that is at least half-way to its
//! due time: it queues the lease on every node. Each node has a sender that sends its queue
//! as pipelines of owner-checked extend scripts, [`CHUNK`] renewals at most and one pipeline
//! outstanding at a time (see [`send`]): a node works through a tick's renewals a chunk at a
//! time instead of being handed all of them at once, a node that is slow holds up no other
//! node, and one that falls behind is not sent more. On a Redis Cluster a pipeline can only
//! go to one node, so each chunk is split by master (see [`cluster`]).
//!
//! Every answer is a fact about one node: the hold was there, with this much lease left, after
//! the renewal was sent; or it was not there. A lease holds for as long as a majority of nodes
//! proved it (see [`Entry::judge`]), whichever renewal each proof answered. No answer is
//! discarded for coming late (after a quorum's node timeout, say): the server renewed the
//! lease when it ran the script, and the proof counts from when the renewal was sent. A
//! renewal waits for no one: a majority's proofs decide it as they arrive.
//!
//! A refused renewal (the lock is no longer ours) on too many nodes for a majority to remain
//! declares the lease lost at once. A failed one (timeout, connection down) is sent to that
//! node again soon; if no renewal succeeds before the lease runs out on the local clock, the
//! guard reports it lost by its own deadline (see [`LeaseState`]). Releasing removes the lease
//! from the table before the release script is sent, so no renewal of it is sent after the
//! release.

mod cluster;
mod send;

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::algorithm::{with_body, Algorithm, HoldId};
use crate::conn::SlotOwners;
use crate::key::LockKey;
use crate::lease::{valid_until, LeaseState};
use crate::majority::Majority;
use crate::nodes::Nodes;
use crate::sync::lock;

/// Most renewals in one pipeline. A server answers a pipeline only once it has run all of it:
/// a chunk this size is answered well within a quorum's node timeout, where a tick's whole
/// batch of tens of thousands was not, and renewals are recorded as each chunk is answered;
/// a few such round trips still renew ten thousand leases.
const CHUNK: usize = 2_000;

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
    /// The renewal in progress, if one is.
    round: Option<Round>,
    /// The lease on each node.
    on: Box<[OnNode]>,
    /// When the renewal the lease was last given by this table was sent.
    basis: Option<Instant>,
}

struct Round {
    started: Instant,
    /// Its failure was logged.
    warned: bool,
}

/// One lease's renewal on one node.
#[derive(Clone, Copy, Default)]
struct OnNode {
    /// Waiting in the node's queue.
    queued: bool,
    /// In the pipeline the node has not answered yet.
    in_flight: bool,
    /// The node's latest answer was no answer (an error, a timeout).
    failing: bool,
    /// The node's latest proof: when its renewal was sent, and the lease the server then held.
    proof: Option<(Instant, Duration)>,
    /// The node said the hold is not there; it never will be again.
    refused: bool,
}

/// The leases and the nodes' queues, under one lock.
struct Table {
    entries: HashMap<u64, Entry, foldhash::fast::RandomState>,
    /// Per node: leases to renew there, in order. An id whose lease is gone is skipped.
    queues: Box<[VecDeque<u64>]>,
}

/// Handle to a client's renewal task.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

struct Shared {
    table: Mutex<Table>,
    next_id: AtomicU64,
    /// Wakes the task when a lease is added (it may be due sooner than the current sleep).
    added: Notify,
    /// Per node: wakes its sender when its queue gets work.
    work: Box<[Notify]>,
    /// Renewal pipelines sent, for benchmarks and tests.
    round_trips: AtomicU64,
    /// When the task will wake on its own (`None`: it waits for a lease to be added).
    sleeping_until: Mutex<Option<Instant>>,
    /// On a Redis Cluster: which master serves which slots, to batch renewals per master.
    slot_owners: tokio::sync::Mutex<SlotOwners>,
}

impl Shared {
    fn new(nodes: usize) -> Shared {
        Shared {
            table: Mutex::new(Table {
                entries: HashMap::default(),
                queues: (0..nodes).map(|_| VecDeque::new()).collect(),
            }),
            next_id: AtomicU64::new(0),
            added: Notify::new(),
            work: (0..nodes).map(|_| Notify::new()).collect(),
            round_trips: AtomicU64::new(0),
            sleeping_until: Mutex::new(None),
            slot_owners: tokio::sync::Mutex::new(SlotOwners::default()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        lock(&self.table)
    }

    fn sleeping_until(&self) -> Option<Instant> {
        *lock(&self.sleeping_until)
    }

    fn set_sleeping_until(&self, at: Option<Instant>) {
        *lock(&self.sleeping_until) = at;
    }
}

impl Watchdog {
    pub(crate) fn start(nodes: Arc<Nodes>) -> Watchdog {
        let shared = Arc::new(Shared::new(nodes.nodes.len()));
        // The task holds the table too; dropping the client aborts it.
        let task = tokio::spawn(run(shared.clone(), nodes)).abort_handle();
        Watchdog { shared, task }
    }

    /// Starts renewing a lease, until the returned [`Watching`] is dropped.
    pub(crate) fn watch(&self, watch: Watch) -> Watching {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let due = Instant::now() + watch.period;
        let mut table = self.shared.table();
        let on = vec![OnNode::default(); table.queues.len()].into();
        let entry = Entry {
            watch,
            due,
            round: None,
            on,
            basis: None,
        };
        table.entries.insert(id, entry);
        // Wake the task only if it sleeps past this lease's due time; usually it is already
        // due to wake earlier, and waking it for every acquisition would cost every lock.
        let wake = self.shared.sleeping_until().is_none_or(|t| due < t);
        drop(table);
        if wake {
            self.shared.added.notify_one();
        }
        Watching {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Renewal pipelines sent so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::Relaxed)
    }

    /// Leases currently renewed.
    pub(crate) fn len(&self) -> usize {
        self.shared.table().entries.len()
    }
}

/// One lease the watchdog renews, until this is dropped (by the guard that holds the lease,
/// or the hold on its way to another task). Dropping it is synchronous, so it takes effect
/// before the caller's next command (a release) is sent.
pub(crate) struct Watching {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.shared.table().entries.remove(&self.id);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Watchdog {
    /// Stops renewing, for good (the client is shut down or dropped).
    pub(crate) fn stop(&self) {
        self.task.abort();
    }
}

/// One renewal in a pipeline.
struct Due {
    id: u64,
    algorithm: &'static Algorithm,
    key: LockKey,
    hold: HoldId,
    ttl_ms: u64,
}

/// What one node said to a chunk: per lease, renewed (with the lease it now holds) or refused
/// (`Some(None)`); `None` where it gave no usable answer (unreachable, too slow, distrusted,
/// or a script error).
type NodeReplies = Vec<Option<Option<Duration>>>;

/// The scheduler and every node's sender, in one task.
async fn run(shared: Arc<Shared>, nodes: Arc<Nodes>) {
    let senders = (0..nodes.nodes.len()).map(|i| send::sender(&shared, &nodes, i));
    tokio::join!(
        schedule(&shared, &nodes),
        futures_util::future::join_all(senders)
    );
}

async fn schedule(shared: &Shared, nodes: &Nodes) {
    loop {
        let (started, next) = start_due(shared);
        if started {
            // A client that only renews keeps its holders' record alive too.
            nodes.records.rewrite_if_old(&nodes.nodes, &nodes.tasks);
            for work in &shared.work {
                work.notify_one();
            }
        }
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
    }
}

/// A tick: once the earliest lease is due, starts a renewal of every lease at least half-way
/// to its due time, so they share this tick's pipelines, and returns whether it started any
/// and when the next lease is due. Drops leases that are lost or past their cap.
///
/// Waiting for a lease to be actually due before taking the half-way ones matters when locks
/// are taken one after another: each lease then crosses its half-way point a moment after the
/// previous one, and taking them as they cross would send a round trip per lock instead of one
/// per tick. After a tick, every lease left is more than half a period from due, so ticks are
/// at least half a period apart. (A renewal that failed on a node is sent to it again by that
/// node's sender, not here.)
fn start_due(shared: &Shared) -> (bool, Option<Instant>) {
    let now = Instant::now();
    let mut table = shared.table();
    let Table { entries, queues } = &mut *table;
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
    let mut started = false;
    let mut next = earliest;
    if earliest.is_some_and(|t| t <= now) {
        next = None;
        for (&id, e) in entries.iter_mut() {
            if e.due <= now + e.watch.period / 2 {
                started = true;
                e.round = Some(Round {
                    started: now,
                    warned: false,
                });
                // Not again until this renewal's outcome sets a new due time.
                e.due = now + e.watch.period;
                for (on, queue) in e.on.iter_mut().zip(queues.iter_mut()) {
                    // A node still answering an earlier renewal gets this one once it has.
                    if !(on.queued || on.in_flight || on.refused) {
                        on.queued = true;
                        queue.push_back(id);
                    }
                }
            }
            next = Some(next.map_or(e.due, |n| n.min(e.due)));
        }
    }
    // Under the table's lock, so `watch` sees either this or the next wake-up time.
    shared.set_sleeping_until(next);
    (started, next)
}

impl Table {
    /// Takes the next chunk of node `i`'s queue, marked in flight.
    fn take(&mut self, i: usize) -> Vec<Due> {
        let Table { entries, queues } = self;
        let queue = &mut queues[i];
        let mut chunk = Vec::with_capacity(queue.len().min(CHUNK));
        while chunk.len() < CHUNK {
            let Some(id) = queue.pop_front() else { break };
            // Released since it was queued.
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            let on = &mut e.on[i];
            on.queued = false;
            on.in_flight = true;
            chunk.push(Due {
                id,
                algorithm: e.watch.algorithm,
                key: e.watch.key.clone(),
                hold: e.watch.id.clone(),
                ttl_ms: e.watch.ttl_ms,
            });
        }
        chunk
    }

    /// Records node `i`'s answers to the chunk sent to it at `sent`. A lease whose renewal
    /// in progress still needs this node's answer (the node failed, or answered a renewal
    /// sent before this one started) is queued on it again.
    fn record(
        &mut self,
        majority: Majority,
        i: usize,
        chunk: &[Due],
        sent: Instant,
        replies: NodeReplies,
    ) {
        for (d, reply) in chunk.iter().zip(replies) {
            // Released while the renewal was in flight: nothing to record.
            let Some(e) = self.entries.get_mut(&d.id) else {
                continue;
            };
            let on = &mut e.on[i];
            on.in_flight = false;
            on.failing = reply.is_none();
            match reply {
                Some(Some(lease)) if on.proof.is_none_or(|(at, _)| at <= sent) => {
                    on.proof = Some((sent, lease));
                }
                Some(Some(_)) | None => {}
                Some(None) => on.refused = true,
            }
            if !e.judge(majority) {
                self.entries.remove(&d.id);
                continue;
            }
            let on = &mut e.on[i];
            let owed = e.round.as_ref().is_some_and(|round| {
                !on.refused && on.proof.is_none_or(|(at, _)| at < round.started)
            });
            if owed {
                on.queued = true;
                self.queues[i].push_back(d.id);
            }
        }
    }
}

impl Entry {
    /// Judges the lease by what its nodes said so far; false once it is lost (declared so).
    ///
    /// It holds until the latest end that a majority of nodes proved (each proof ends its
    /// lease after it was sent), and is lost once so many nodes refused it that no majority
    /// is left. Its renewal in progress succeeded once a majority answered it with a proof;
    /// it failed, for the log, once too many nodes refused it or failed to answer their last
    /// request for a majority to be left, and goes on meanwhile (the failed nodes asked again)
    /// until it succeeds, the next one starts, or the lease runs out. A node that is only
    /// slow is waited for: its answer, however late, still proves the lease.
    fn judge(&mut self, majority: Majority) -> bool {
        let refused = self.on.iter().filter(|on| on.refused).count();
        if majority.out_of_reach(refused) {
            self.watch.lease.declare_lost();
            return false;
        }
        let mut proofs: Vec<(Instant, Duration)> = self
            .on
            .iter()
            .filter(|on| !on.refused)
            .filter_map(|on| on.proof)
            .collect();
        if majority.reached(proofs.len()) {
            proofs.sort_unstable_by_key(|&(sent, lease)| Reverse(valid_until(sent, lease)));
            let (mut sent, mut lease) = proofs[majority.needed() - 1];
            if let Some(basis) = self.basis.filter(|&basis| sent < basis) {
                // The majority's end went back (a node that proved a later one refused since):
                // the lease keeps to the latest-sent renewal it was given, so give it this end
                // as counted from that one.
                lease = valid_until(sent, lease).saturating_duration_since(basis);
                sent = basis;
            }
            if !self.watch.lease.renewed(sent, lease) {
                // It ran out on our clock first.
                return false;
            }
            self.basis = Some(sent);
        }
        let Some(round) = &mut self.round else {
            return true;
        };
        let started = round.started;
        let proved = |on: &OnNode| !on.refused && on.proof.is_some_and(|(at, _)| at >= started);
        if majority.reached(self.on.iter().filter(|on| proved(on)).count()) {
            self.round = None;
            self.due = started + self.watch.period;
            return true;
        }
        let able = self.on.iter().filter(|on| !(on.refused || on.failing));
        if !round.warned && !majority.reached(able.count()) {
            round.warned = true;
            self.watch.lease.labels.renewal_failed();
        }
        true
    }
}

/// The renewals of `chunk` at `indices`, as one pipeline. `with_source`: each as `EVAL` with
/// the script's source, for a server that answered `NOSCRIPT` (see `algorithm::script`).
fn renewals(chunk: &[Due], indices: &[usize], with_source: bool) -> redis::Pipeline {
    let mut pipe = redis::Pipeline::with_capacity(indices.len());
    for &i in indices {
        let d = &chunk[i];
        let cmd = d.algorithm.extend_cmd(&d.key, &d.hold, d.ttl_ms);
        pipe.add_command(if with_source {
            with_body(&d.algorithm.extend, &cmd)
        } else {
            cmd
        });
    }
    pipe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Labels;

    const TTL: Duration = Duration::from_secs(6);

    /// A lease on `nodes` nodes granted by a request sent at `t`.
    fn entry(nodes: usize, t: Instant) -> Entry {
        let labels = Arc::new(Labels {
            mode: "setnx",
            label: "test".into(),
            name: None,
            site: None,
        });
        Entry {
            watch: Watch {
                algorithm: &crate::setnx::SETNX,
                key: LockKey::new("t", b"k", 64).expect("key"),
                id: HoldId {
                    owner: "o".into(),
                    nonce: "".into(),
                    holder: "".into(),
                    lane: 0,
                },
                ttl_ms: TTL.as_millis() as u64,
                period: TTL / 3,
                stop_at: None,
                lease: Arc::new(LeaseState::new(t, TTL, labels)),
            },
            due: t + TTL / 3,
            round: None,
            on: vec![OnNode::default(); nodes].into(),
            basis: None,
        }
    }

    fn proves(e: &mut Entry, node: usize, sent: Instant) {
        e.on[node].failing = false;
        e.on[node].proof = Some((sent, TTL));
    }

    fn refuses(e: &mut Entry, node: usize) {
        e.on[node].refused = true;
    }

    /// The lease keeps its deadline on the boot clock: read back as an `Instant`, it may be
    /// off by the time between two clock reads.
    fn near(a: Instant, b: Instant) -> bool {
        a.max(b) - a.min(b) < Duration::from_millis(1)
    }

    #[test]
    fn a_lease_holds_until_the_end_a_majority_proved() {
        let t = Instant::now();
        let mut e = entry(3, t);
        let ms = Duration::from_millis;
        proves(&mut e, 0, t + ms(30));
        assert!(e.judge(Majority::of(3)));
        assert!(
            near(e.watch.lease.valid_until(), valid_until(t, TTL)),
            "one node proves nothing"
        );
        proves(&mut e, 2, t + ms(10));
        assert!(e.judge(Majority::of(3)));
        assert!(near(
            e.watch.lease.valid_until(),
            valid_until(t + ms(10), TTL)
        ));
        // A late answer to a renewal sent before the last one counts all the same.
        proves(&mut e, 1, t + ms(20));
        assert!(e.judge(Majority::of(3)));
        assert!(near(
            e.watch.lease.valid_until(),
            valid_until(t + ms(20), TTL)
        ));
    }

    #[test]
    fn a_refusal_that_breaks_the_majority_shortens_the_lease() {
        let t = Instant::now();
        let mut e = entry(3, t);
        let ms = Duration::from_millis;
        proves(&mut e, 0, t + ms(1));
        proves(&mut e, 1, t + ms(500));
        proves(&mut e, 2, t + ms(500));
        assert!(e.judge(Majority::of(3)));
        assert!(near(
            e.watch.lease.valid_until(),
            valid_until(t + ms(500), TTL)
        ));
        // Node 2's hold is gone: only nodes 0 and 1 hold it, until node 0's lease ends.
        refuses(&mut e, 2);
        assert!(e.judge(Majority::of(3)));
        assert!(e.watch.lease.valid_until() <= valid_until(t + ms(1), TTL) + ms(1));
        assert!(e.watch.lease.is_valid());
        // A second refusal leaves no majority.
        refuses(&mut e, 1);
        assert!(!e.judge(Majority::of(3)));
        assert!(!e.watch.lease.is_valid());
    }

    #[test]
    fn a_renewal_succeeds_at_a_majority_of_its_own_answers_and_fails_without_a_majority_left() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let round = t + ms(100);
        let mut e = entry(3, t);
        e.round = Some(Round {
            started: round,
            warned: false,
        });
        // Answers to an earlier renewal do not decide this one.
        proves(&mut e, 0, t + ms(50));
        proves(&mut e, 1, t + ms(50));
        assert!(e.judge(Majority::of(3)));
        assert!(e.round.as_ref().is_some_and(|r| !r.warned));
        proves(&mut e, 0, round + ms(1));
        // One node failing leaves a majority that may still answer.
        e.on[1].failing = true;
        assert!(e.judge(Majority::of(3)));
        assert!(e.round.as_ref().is_some_and(|r| !r.warned));
        refuses(&mut e, 2);
        assert!(e.judge(Majority::of(3)));
        assert!(e.round.as_ref().is_some_and(|r| r.warned), "failed, logged");
        proves(&mut e, 1, round + ms(60));
        assert!(e.judge(Majority::of(3)));
        assert!(e.round.is_none(), "succeeded");
        assert_eq!(e.due, round + TTL / 3);
    }
}
