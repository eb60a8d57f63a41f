//! Lease renewal for every lock a client holds: one task, batched pipelines per node.
//!
//! A timer per lock would make 10,000 held locks cost 10,000 timers and 10,000 round trips
//! per period. Instead one task per client keeps the held leases in a table, sleeps until the
//! earliest is due, and then starts a renewal of every lease that is at least half-way to its
//! due time: it queues the lease on every node, the lease that ends first at the head of the
//! queue (see [`table`]). Each node has a sender that sends its queue as pipelines of
//! owner-checked extend scripts, [`CHUNK`] renewals at most and a few pipelines outstanding
//! at a time (see [`send`]): a node works through a tick's renewals a chunk at a time instead
//! of being handed all of them at once, a node that is slow holds up no other node, and one
//! that falls behind is not sent more than those few chunks. When renewals cannot keep up,
//! the leases closest to running out are renewed first. On a Redis Cluster a pipeline can
//! only go to one node, so each chunk is split by master (see [`cluster`]).
//!
//! Every answer is a fact about one node: the hold was there, with this much lease left, after
//! the renewal was sent; or it was not there. A lease holds for as long as a majority of nodes
//! proved it (see [`table`]), whichever renewal each proof answered. No answer is
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
mod table;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::algorithm::{renewed_lease, Algorithm, ExtendArgs, HoldId, ScriptCall};
use crate::conn::{Args, Command, SlotOwners};
use crate::key::LockKey;
use crate::lease::LeaseState;
use crate::nodes::Nodes;
use crate::setnx::{native_extend, NativeExtend};
use crate::sync::lock;
use table::Table;

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
            table: Mutex::new(Table::new(nodes)),
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

    /// Starts renewing a lease just granted on a request sent at `sent`, until the returned
    /// [`Watching`] is dropped.
    pub(crate) fn watch(&self, watch: Watch, sent: Instant) -> Watching {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut table = self.shared.table();
        let due = table.insert(id, watch, sent);
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
        self.shared.table().len()
    }

    /// Renews every lease now rather than at its time (`distlock::testing::end_lease`).
    #[cfg(feature = "testing")]
    pub(crate) fn renew_now(&self) {
        self.shared.table().due_now(Instant::now());
        self.shared.added.notify_one();
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
        self.shared.table().remove(self.id);
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

/// One renewal in a pipeline: the table's lease (shared, so that taking a chunk copies no
/// key or owner).
struct Due {
    id: u64,
    watch: Arc<Watch>,
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
            let now = Instant::now();
            nodes
                .records
                .rewrite_if_old(&nodes.nodes, &nodes.tasks, now);
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

/// A tick (see [`Table::start_due`]); records when the task will next wake on its own.
fn start_due(shared: &Shared) -> (bool, Option<Instant>) {
    let mut table = shared.table();
    let (started, next) = table.start_due(Instant::now());
    // Under the table's lock, so `watch` sees either this or the next wake-up time.
    shared.set_sleeping_until(next);
    (started, next)
}

/// A server's answer to one extend script: the lease it now holds, `Some(None)` when the
/// hold is not there, `None` for anything else (an error).
fn answer(value: redis::Value) -> Option<Option<Duration>> {
    match value {
        redis::Value::Int(ms) => Some(renewed_lease(ms)),
        _ => None,
    }
}

/// One renewal as sent: the server's native command, or the extend script.
enum Renewal<'a> {
    Native(NativeExtend<'a>),
    Script(ScriptCall<'a, ExtendArgs<'a>>),
}

impl Command for Renewal<'_> {
    fn write(&self, out: &mut impl Args) {
        match self {
            Renewal::Native(native) => native.write(out),
            Renewal::Script(call) => call.write(out),
        }
    }
}

/// The renewals of `chunk` at `indices`, for one pipeline: as the server's native command
/// where `native[i]` says so (see `setnx::native_extend`), else the extend script;
/// `with_source`: each script as `EVAL` with its source, for a server that answered
/// `NOSCRIPT` (see `algorithm::script`).
fn renewals<'a>(
    chunk: &'a [Due],
    indices: &[usize],
    with_source: bool,
    native: &[bool],
) -> Vec<Renewal<'a>> {
    indices
        .iter()
        .map(|&i| {
            let d = &chunk[i];
            let w = &*d.watch;
            let natively = native.get(i).copied().unwrap_or(false);
            match natively.then(|| native_extend(w.algorithm, &w.key, &w.id, w.ttl_ms)) {
                Some(Some(command)) => Renewal::Native(command),
                _ => Renewal::Script(
                    w.algorithm
                        .extend_call(&w.key, &w.id, w.ttl_ms, with_source),
                ),
            }
        })
        .collect()
}
