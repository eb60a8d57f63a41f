//! S12: the read/write lock under the mix teams run it with. `TASKS` tasks on one name, every
//! tenth call of a task a write (9 reads : 1 write), reads held `READ_HOLD` and writes
//! `WRITE_HOLD`, each waiting with the library's own mechanism, for distlock
//! (`Client::read`/`Client::write`) and `distributed-lock-redis`'s read/write lock (the only
//! peer that has one). Every holder counts itself in and out on one in-process counter, so a
//! writer beside anyone else is seen (an overlap).
//!
//! The read/write locks are not `Column`s (a lock has one mode), so they have a trait of their
//! own here, and `main` connects them once for all rounds.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

use crate::columns::{BoxFut, Held, Kind, Release, FENCED_ONLY, TTL};
use crate::cost::lock_commands;
use crate::results::{absolute, row, Fmt, Results, RowSpec, Source, TargetSpec};
use crate::scenarios::{Metrics, Scenario, TurnOrder, WAIT};

/// Tasks on the one name, and the holds.
pub const TASKS: usize = 8;
const READ_HOLD: Duration = Duration::from_micros(100);
const WRITE_HOLD: Duration = Duration::from_micros(200);
/// Every `WRITE_EVERY`-th call of a task is a write.
const WRITE_EVERY: usize = 10;
/// Length of a column's turn: longer than S2's 250 ms, so a wait of several hundred ms (a
/// missed wake-up ended by a timer) happens inside a turn and is seen.
pub const TURN: Duration = Duration::from_millis(500);
/// What a writer stores in the occupancy counter: far below anything readers could undo.
const WRITER_INSIDE: i64 = -1_000_000;

/// A read/write lock implementation under test, connected to its server.
pub trait RwLock: Send + Sync {
    fn read<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>>;
    fn write<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>>;
}

/// Every column's read/write lock on one node; `Err` says why a column has none.
pub type Columns = Vec<(Kind, Result<Arc<dyn RwLock>, String>)>;

/// Why `kind` has no S12 figure, if it has none.
pub fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock | Kind::DlRedis => None,
        Kind::DistlockFenced => Some(FENCED_ONLY),
        Kind::Rslock | Kind::Redlock => Some("no read/write lock"),
        Kind::Limit => Some("no minimal read/write lock written"),
    }
}

/// Connects every column's read/write lock to `url` and warms it up (not measured).
pub async fn connect_all(url: &str) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        let column = match skips(kind) {
            Some(why) => Err(why.to_owned()),
            None => connect(kind, url).await,
        };
        if let Ok(lock) = &column {
            let name = format!("bench:S12:warmup:{}", kind.name());
            for i in 0..20 {
                let held = if i % 2 == 0 {
                    lock.read(&name, WAIT).await
                } else {
                    lock.write(&name, WAIT).await
                };
                if let Err(e) = async { held?.release().await }.await {
                    eprintln!("S12 warm-up of {}: {e}", kind.name());
                    break;
                }
            }
        }
        columns.push((kind, column));
    }
    columns
}

async fn connect(kind: Kind, url: &str) -> Result<Arc<dyn RwLock>, String> {
    let failed = |e: &dyn std::fmt::Display| format!("connect failed: {e}");
    Ok(match kind {
        Kind::Distlock => Arc::new(Distlock(
            distlock::Client::connect(url)
                .await
                .map_err(|e| failed(&e))?,
        )),
        Kind::DlRedis => Arc::new(DlRedis(crate::columns::dl_redis_provider(&[url]).await?)),
        other => return Err(skips(other).unwrap_or("no read/write lock").to_owned()),
    })
}

/// One round of S12 on the single node: the columns take turns of `TURN` in an order drawn
/// afresh every pass, `duration` each in all.
pub async fn round(
    columns: &Columns,
    server: &RedisServer,
    duration: Duration,
    round: usize,
    results: &mut Results,
) {
    let started = Instant::now();
    let mut runs = Vec::new();
    for i in 0..columns.len() {
        let (kind, column) = &columns[(i + round) % columns.len()];
        match column {
            Ok(lock) => runs.push((*kind, lock, Ok(Totals::default()))),
            Err(why) => results.cell(Scenario::S12, *kind).na = Some(why.clone()),
        }
    }
    let turns = (duration.as_secs_f64() / TURN.as_secs_f64())
        .round()
        .max(1.0) as usize;
    let mut order = TurnOrder::new(runs.len());
    for t in 0..turns {
        for i in order.next_pass() {
            let (kind, lock, total) = &mut runs[i];
            let Ok(sum) = total else { continue };
            // A name per turn: a lease a failed turn left behind slows no later one.
            let name = format!("bench:S12:{}:r{round}:t{t}", kind.name());
            let before = server.commandstats();
            match turn(lock, &name).await {
                Ok(mut totals) => {
                    totals.commands = lock_commands(&before, &server.commandstats());
                    sum.add(totals);
                }
                Err(e) => *total = Err(e),
            }
        }
    }
    for (kind, _, total) in runs {
        let cell = results.cell(Scenario::S12, kind);
        match total {
            Ok(total) => cell.rounds.push(total.metrics()),
            Err(e) => {
                eprintln!("S12 {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S12  {:>6.2} s", started.elapsed().as_secs_f64());
}

#[derive(Default)]
struct Totals {
    reads: u64,
    writes: u64,
    read_waits: Vec<Duration>,
    write_waits: Vec<Duration>,
    overlaps: u64,
    not_served: u64,
    commands: u64,
    elapsed: Duration,
}

impl Totals {
    fn add(&mut self, t: Totals) {
        self.reads += t.reads;
        self.writes += t.writes;
        self.read_waits.extend(t.read_waits);
        self.write_waits.extend(t.write_waits);
        self.overlaps += t.overlaps;
        self.not_served += t.not_served;
        self.commands += t.commands;
        self.elapsed += t.elapsed;
    }

    fn metrics(mut self) -> Metrics {
        let secs = self.elapsed.as_secs_f64();
        let calls = 2 * (self.reads + self.writes);
        self.read_waits.sort_unstable();
        self.write_waits.sort_unstable();
        let ms = |sorted: &[Duration], p: f64| {
            if sorted.is_empty() {
                return f64::NAN;
            }
            let rank = (p * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
        };
        Metrics::from([
            ("reads_per_s", self.reads as f64 / secs),
            ("writes_per_s", self.writes as f64 / secs),
            ("read_wait_p99_ms", ms(&self.read_waits, 0.99)),
            ("read_wait_max_ms", ms(&self.read_waits, 1.0)),
            ("write_wait_p99_ms", ms(&self.write_waits, 0.99)),
            ("write_wait_max_ms", ms(&self.write_waits, 1.0)),
            ("cmds_per_call", self.commands as f64 / calls.max(1) as f64),
            ("overlaps", self.overlaps as f64),
            ("not_served", self.not_served as f64),
        ])
    }
}

/// Holders inside now: readers count up, a writer stores `WRITER_INSIDE`; and the overlaps
/// seen.
#[derive(Default)]
struct Inside {
    now: AtomicI64,
    overlaps: AtomicU64,
}

/// One turn: `TASKS` tasks call until the turn is over (a call under way then is finished and
/// counted, and so is its time).
async fn turn(lock: &Arc<dyn RwLock>, name: &str) -> Result<Totals, String> {
    let inside = Arc::new(Inside::default());
    let started = Instant::now();
    let deadline = started + TURN;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (lock, inside, name) = (Arc::clone(lock), Arc::clone(&inside), name.to_owned());
            tokio::spawn(async move {
                let mut totals = Totals::default();
                let mut n = t;
                while Instant::now() < deadline {
                    n += 1;
                    let write = n % WRITE_EVERY == 0;
                    let asked = Instant::now();
                    let held = if write {
                        lock.write(&name, WAIT).await
                    } else {
                        lock.read(&name, WAIT).await
                    };
                    let Ok(held) = held else {
                        totals.not_served += 1;
                        continue;
                    };
                    let waited = asked.elapsed();
                    if write {
                        totals.write_waits.push(waited);
                        if inside.now.swap(WRITER_INSIDE, Ordering::SeqCst) != 0 {
                            inside.overlaps.fetch_add(1, Ordering::Relaxed);
                        }
                        spin(WRITE_HOLD);
                        inside.now.store(0, Ordering::SeqCst);
                        totals.writes += 1;
                    } else {
                        totals.read_waits.push(waited);
                        if inside.now.fetch_add(1, Ordering::SeqCst) < 0 {
                            inside.overlaps.fetch_add(1, Ordering::Relaxed);
                        }
                        spin(READ_HOLD);
                        inside.now.fetch_sub(1, Ordering::SeqCst);
                        totals.reads += 1;
                    }
                    held.release().await?;
                }
                Ok::<_, String>(totals)
            })
        })
        .collect();
    let mut sum = Totals::default();
    for task in tasks {
        sum.add(task.await.map_err(|e| e.to_string())??);
    }
    sum.elapsed = started.elapsed();
    sum.overlaps = inside.overlaps.load(Ordering::Relaxed);
    Ok(sum)
}

/// Holds for `d` without giving the thread to anyone (a short critical section's work, as
/// S3's hold).
fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

struct Distlock(distlock::Client);

impl RwLock for Distlock {
    fn read<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let request = self.0.read(name).ttl(TTL).wait(wait);
            let guard = request.acquire().await.map_err(|e| e.to_string())?;
            Ok(Box::new(guard) as Held)
        })
    }

    fn write<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let request = self.0.write(name).ttl(TTL).wait(wait);
            let guard = request.acquire().await.map_err(|e| e.to_string())?;
            Ok(Box::new(guard) as Held)
        })
    }
}

struct DlRedis(distributed_lock_redis::RedisLockProvider);

impl RwLock for DlRedis {
    fn read<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        use distributed_lock_core::traits::{
            DistributedReaderWriterLock, ReaderWriterLockProvider,
        };
        Box::pin(async move {
            let lock = self.0.create_reader_writer_lock(name);
            let handle = lock
                .acquire_read(Some(wait))
                .await
                .map_err(|e| e.to_string())?;
            Ok(Box::new(handle) as Held)
        })
    }

    fn write<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        use distributed_lock_core::traits::{
            DistributedReaderWriterLock, ReaderWriterLockProvider,
        };
        Box::pin(async move {
            let lock = self.0.create_reader_writer_lock(name);
            let handle = lock
                .acquire_write(Some(wait))
                .await
                .map_err(|e| e.to_string())?;
            Ok(Box::new(handle) as Held)
        })
    }
}

impl Release for distributed_lock_redis::RedisReadLockHandle {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        use distributed_lock_core::traits::LockHandle;
        Box::pin(async move { LockHandle::release(*self).await.map_err(|e| e.to_string()) })
    }
}

impl Release for distributed_lock_redis::RedisWriteLockHandle {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        use distributed_lock_core::traits::LockHandle;
        Box::pin(async move { LockHandle::release(*self).await.map_err(|e| e.to_string()) })
    }
}

/// How each column's read/write lock is set up, printed under the table.
pub fn note(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock => Some(
            "S12 distlock: `client.read(name)` / `client.write(name)` `.ttl(10 s).wait(10 s).acquire()` on a \
             `Client::connect(url)` of its own, `guard.release()`; a waiter waits the way distlock waits.",
        ),
        Kind::DlRedis => Some(
            "S12 distributed-lock-redis: `provider.create_reader_writer_lock(name)` (provider as in S7: \
             expiry 10 s, min_validity 9 s, extension cadence 10 s / 3), `acquire_read(Some(10 s))` / \
             `acquire_write(Some(10 s))`, its own waiting, `handle.release()`. Its `acquire_read` makes one \
             attempt and returns `Timeout` at once when a writer holds or waits (it does not wait for the \
             10 s; its `acquire_write` does wait): such a call counts as not served and the task makes its \
             next call at once, as a caller of its API would retry.",
        ),
        _ => None,
    }
}

/// S12's rows of the table.
pub const ROWS: &[RowSpec] = &[
    row("S12", "reads/s", "reads_per_s", Fmt::Rate),
    row("S12", "writes/s", "writes_per_s", Fmt::Rate),
    row(
        "S12",
        "reader's wait p99 ms",
        "read_wait_p99_ms",
        Fmt::Ratio,
    ),
    row(
        "S12",
        "reader's longest wait ms",
        "read_wait_max_ms",
        Fmt::Ratio,
    ),
    row(
        "S12",
        "writer's wait p99 ms",
        "write_wait_p99_ms",
        Fmt::Ratio,
    ),
    row(
        "S12",
        "writer's longest wait ms",
        "write_wait_max_ms",
        Fmt::Ratio,
    ),
    row(
        "S12",
        "server commands / call (commandstats, incl. Lua calls)",
        "cmds_per_call",
        Fmt::Ratio,
    ),
    row(
        "S12",
        "overlaps (a writer beside anyone)",
        "overlaps",
        Fmt::Count,
    ),
    row(
        "S12",
        "calls not served (refused, error or 10 s wait over)",
        "not_served",
        Fmt::Count,
    ),
];

pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S12",
        metric: "reads_per_s",
        goal: "≥ 1.00× distributed-lock-redis (the peer's read/write lock)",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| crate::results::versus(r, k, Kind::DlRedis, "S12", "reads_per_s", 1.0, false),
        ahead: None,
    },
    TargetSpec {
        scenario: "S12",
        metric: "overlaps",
        goal: "= 0",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S12", "overlaps", |v| v == 0.0),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S12: one name per column, round and turn on the single node; 8 tasks each loop: every 10th call of a task (task t starts its count at t, so the writes are spread) takes the write lock and holds it 200 µs, the others take the read lock and hold it 100 µs (a spin, like S3's hold), all with ttl 10 s and wait 10 s, each library waiting its own way; the columns take turns of 500 ms (3 s per column and round; 1 s with --quick), in an order drawn afresh for every pass. reads/s and writes/s: calls served over the time the column's turns took (each until its last task finished); waits: from the call to its return, p99 and the longest over all the column's calls in the round (the table shows their medians over rounds); server commands / call: `INFO commandstats` calls delta around each turn (without INFO and CLIENT SETINFO; Lua calls counted) over acquisitions + releases; overlaps: a writer entering while anyone else is inside, or a reader entering beside a writer, on one in-process counter, the most in any round (must be 0); not served: acquisitions that returned without the lock (refused, an error, or the wait over), the most in any round; the task goes on with its next call at once (see the columns' notes).",
];
