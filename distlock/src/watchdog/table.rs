//! The table of held leases: what each node said about each, the nodes' queues of renewals
//! (most urgent first), and the judgement of a lease by its nodes' answers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Due, NodeReplies, Watch, CHUNK};
use crate::lease::valid_until;
use crate::majority::Majority;

struct Entry {
    watch: Arc<Watch>,
    due: Instant,
    /// The renewal in progress, if one is.
    round: Option<Round>,
    /// The lease on each node.
    on: PerNode,
    /// When the renewal the lease was last given by this table was sent.
    basis: Option<Instant>,
    /// When the lease ends as last granted or renewed here: the queues' order. Kept here, as
    /// the lease's own deadline (on the boot clock, under its lock) costs a lock and two clock
    /// reads to read, for each of a tick's leases.
    ends: Instant,
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
    /// In a pipeline the node has not answered yet.
    in_flight: bool,
    /// The node's latest answer was no answer (an error, a timeout).
    failing: bool,
    /// The node's latest proof: when its renewal was sent, and the lease the server then held.
    proof: Option<(Instant, Duration)>,
    /// The node said the hold is not there; it never will be again.
    refused: bool,
}

/// A lease's state on each node: kept inline for a single node, the usual client, so that
/// adding a lease allocates nothing for it.
enum PerNode {
    One([OnNode; 1]),
    Many(Box<[OnNode]>),
}

impl PerNode {
    fn new(nodes: usize) -> PerNode {
        match nodes {
            1 => PerNode::One([OnNode::default()]),
            n => PerNode::Many(vec![OnNode::default(); n].into()),
        }
    }
}

impl std::ops::Deref for PerNode {
    type Target = [OnNode];

    fn deref(&self) -> &[OnNode] {
        match self {
            PerNode::One(one) => one,
            PerNode::Many(many) => many,
        }
    }
}

impl std::ops::DerefMut for PerNode {
    fn deref_mut(&mut self) -> &mut [OnNode] {
        match self {
            PerNode::One(one) => one,
            PerNode::Many(many) => many,
        }
    }
}

/// A node's queue: the leases to renew there, by when each lease ends, the first to end at
/// the front, so that when renewals cannot keep up, those closest to running out go first (a
/// first-in-first-out queue sent them in table order, however close to its end each lease
/// was). Keyed by the lease's end when it was queued; an id whose lease is gone is skipped
/// when taken. New work comes in batches (a tick's, a chunk's leases owed again), each sorted
/// and merged in (see [`enqueue`]): a binary heap's pop of 100,000 leases touched a cache line
/// per level, and cost the client more than all the rest of a renewal.
type Queue = VecDeque<(Instant, u64)>;

/// Adds `batch` to `queue`, keeping it in order.
fn enqueue(queue: &mut Queue, mut batch: Vec<(Instant, u64)>) {
    batch.sort_unstable();
    let (Some(&first), Some(&last)) = (batch.first(), queue.back()) else {
        queue.extend(batch);
        return;
    };
    if last <= first {
        // The usual case: leases just renewed end after those still waiting.
        queue.extend(batch);
        return;
    }
    let mut merged = VecDeque::with_capacity(queue.len() + batch.len());
    let (mut old, mut new) = (queue.drain(..).peekable(), batch.into_iter().peekable());
    while let (Some(a), Some(b)) = (old.peek(), new.peek()) {
        merged.push_back(if a <= b { old.next() } else { new.next() }.expect("peeked"));
    }
    merged.extend(old.chain(new));
    *queue = merged;
}

/// The leases and the nodes' queues, under one lock.
pub(super) struct Table {
    entries: HashMap<u64, Entry, foldhash::fast::RandomState>,
    queues: Box<[Queue]>,
}

impl Table {
    pub(super) fn new(nodes: usize) -> Table {
        Table {
            entries: HashMap::default(),
            queues: (0..nodes).map(|_| Queue::new()).collect(),
        }
    }

    /// Adds a lease just granted on a request sent at `sent`, first due a period from then
    /// (not from now: a renewal a round trip early is never late); returns that time.
    pub(super) fn insert(&mut self, id: u64, watch: Watch, sent: Instant) -> Instant {
        let due = sent + watch.period;
        let entry = Entry {
            ends: valid_until(sent, Duration::from_millis(watch.ttl_ms)),
            watch: Arc::new(watch),
            due,
            round: None,
            on: PerNode::new(self.queues.len()),
            basis: None,
        };
        self.entries.insert(id, entry);
        due
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.entries.remove(&id);
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Makes every lease due now (`distlock::testing::end_lease`: the holder learns at once
    /// what the server says, as it would at its next renewal).
    #[cfg(feature = "testing")]
    pub(super) fn due_now(&mut self, now: Instant) {
        for e in self.entries.values_mut() {
            e.due = e.due.min(now);
        }
    }

    /// A tick: once the earliest lease is due, starts a renewal of every lease at least
    /// half-way to its due time, so they share this tick's pipelines, and returns whether it
    /// started any and when the next lease is due. Drops leases that are lost or past their
    /// cap.
    ///
    /// Waiting for a lease to be actually due before taking the half-way ones matters when
    /// locks are taken one after another: each lease then crosses its half-way point a moment
    /// after the previous one, and taking them as they cross would send a round trip per lock
    /// instead of one per tick. After a tick, every lease left is more than half a period from
    /// due, so ticks are at least half a period apart. (A renewal that failed on a node is
    /// sent to it again by that node's sender, not here.)
    pub(super) fn start_due(&mut self, now: Instant) -> (bool, Option<Instant>) {
        let Table { entries, queues } = self;
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
        // Each node's new work, added to its queue at once.
        let mut queued: Vec<Vec<(Instant, u64)>> = vec![Vec::new(); queues.len()];
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
                    for (on, queued) in e.on.iter_mut().zip(queued.iter_mut()) {
                        // A node still answering an earlier renewal gets this one once it has.
                        if !(on.queued || on.in_flight || on.refused) {
                            on.queued = true;
                            queued.push((e.ends, id));
                        }
                    }
                }
                next = Some(next.map_or(e.due, |n| n.min(e.due)));
            }
        }
        for (queue, queued) in queues.iter_mut().zip(queued) {
            enqueue(queue, queued);
        }
        (started, next)
    }

    /// Takes the next chunk of node `i`'s queue, marked in flight. A lease that ended on the
    /// local clock while it waited is not sent: no answer could prove it any more, and the
    /// server would only keep a lock nobody holds for another ttl. It is declared lost (its
    /// guard says so already, by its own deadline) and leaves the table, so that renewals
    /// that fall behind spend what the server can answer on the leases still to be saved.
    pub(super) fn take(&mut self, i: usize, now: Instant) -> Vec<Due> {
        let Table { entries, queues } = self;
        let queue = &mut queues[i];
        let mut chunk = Vec::with_capacity(queue.len().min(CHUNK));
        while chunk.len() < CHUNK {
            let Some((_, id)) = queue.pop_front() else {
                break;
            };
            // Released since it was queued.
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            if e.ends <= now && !e.watch.lease.is_valid() {
                e.watch.lease.declare_lost();
                entries.remove(&id);
                continue;
            }
            let on = &mut e.on[i];
            on.queued = false;
            on.in_flight = true;
            chunk.push(Due {
                id,
                watch: e.watch.clone(),
            });
        }
        chunk
    }

    /// Records node `i`'s answers to the chunk sent to it at `sent`. A lease whose renewal
    /// in progress still needs this node's answer (the node failed, or answered a renewal
    /// sent before this one started) is queued on it again.
    pub(super) fn record(
        &mut self,
        majority: Majority,
        i: usize,
        chunk: &[Due],
        sent: Instant,
        replies: NodeReplies,
    ) {
        let mut owed = Vec::new();
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
                    on.proof = Some((sent, e.watch.lease.native.trusted(lease)));
                }
                Some(Some(_)) | None => {}
                Some(None) => on.refused = true,
            }
            if !e.judge(majority) {
                self.entries.remove(&d.id);
                continue;
            }
            let on = &mut e.on[i];
            let again = e.round.as_ref().is_some_and(|round| {
                !on.refused && on.proof.is_none_or(|(at, _)| at < round.started)
            });
            if again {
                on.queued = true;
                owed.push((e.ends, d.id));
            }
        }
        enqueue(&mut self.queues[i], owed);
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
        let proofs = || {
            self.on
                .iter()
                .filter(|on| !on.refused)
                .filter_map(|on| on.proof)
                .map(|(sent, lease)| (valid_until(sent, lease), sent, lease))
        };
        if let Some((_, mut sent, mut lease)) = majority.least_agreed_of(proofs) {
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
            self.ends = valid_until(sent, lease);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::HoldId;
    use crate::key::LockKey;
    use crate::lease::{LeaseState, Stamp};
    use crate::telemetry::Labels;

    const TTL: Duration = Duration::from_secs(6);

    /// A lease granted by a request sent at `t`.
    fn watch(t: Instant) -> Watch {
        let labels = Arc::new(Labels {
            mode: "setnx",
            label: "test".into(),
            name: None,
            site: None,
        });
        Watch {
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
            lease: Arc::new(LeaseState::new(Stamp::of(t), TTL, labels)),
        }
    }

    /// A lease on `nodes` nodes granted by a request sent at `t`.
    fn entry(nodes: usize, t: Instant) -> Entry {
        Entry {
            watch: Arc::new(watch(t)),
            due: t + TTL / 3,
            round: None,
            on: PerNode::new(nodes),
            basis: None,
            ends: valid_until(t, TTL),
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

    /// When renewals fall behind, a node's queue sends the leases that end first before the
    /// others, whatever order they were taken or stored in.
    #[test]
    fn the_lease_that_ends_first_is_renewed_first() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut table = Table::new(2);
        // Ends: 0 last, 2 first, 1 between.
        for (id, sent) in [(0, t + ms(300)), (1, t + ms(200)), (2, t + ms(100))] {
            table.insert(id, watch(sent), sent);
        }
        let (started, _) = table.start_due(t + ms(400) + TTL / 3);
        assert!(started);
        for node in 0..2 {
            let order: Vec<u64> = table.take(node, t).iter().map(|d| d.id).collect();
            assert_eq!(order, [2, 1, 0], "node {node}");
        }
    }

    /// A lease that ended while it waited in the queue (renewals fell behind) is not sent: it
    /// is declared lost and leaves the table, and the leases still alive go in its place.
    #[test]
    fn a_lease_that_ended_in_the_queue_is_reported_lost_not_sent() {
        let now = Instant::now();
        let long_ago = now - TTL - Duration::from_millis(10);
        let mut table = Table::new(1);
        for (id, sent) in [(0, long_ago), (1, now)] {
            table.insert(id, watch(sent), sent);
            // Queued by an earlier tick, while it was still alive.
            table.entries.get_mut(&id).expect("inserted").on[0].queued = true;
            let ends = table.entries[&id].ends;
            table.queues[0].push_back((ends, id));
        }
        let ended = table.entries[&0].watch.lease.clone();
        let chunk: Vec<u64> = table.take(0, Instant::now()).iter().map(|d| d.id).collect();
        assert_eq!(chunk, [1], "only the live lease is sent");
        assert_eq!(table.len(), 1, "the ended one left the table");
        assert!(!ended.is_valid());
        assert!(
            futures_util::FutureExt::now_or_never(ended.until_lost()).is_some(),
            "its loss is reported"
        );
    }

    /// A batch that does not simply follow the queue (leases owed again after a failure, say)
    /// is merged in by lease end.
    #[test]
    fn a_batch_is_merged_into_the_queue_in_order() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let mut queue: Queue = [(at(1), 1), (at(3), 3), (at(5), 5)].into();
        enqueue(&mut queue, vec![(at(6), 6), (at(2), 2), (at(4), 4)]);
        let ids: Vec<u64> = queue.iter().map(|&(_, id)| id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        enqueue(&mut queue, vec![(at(8), 8), (at(7), 7)]);
        assert_eq!(queue.back(), Some(&(at(8), 8)));
        assert_eq!(queue.len(), 8);
    }
}
