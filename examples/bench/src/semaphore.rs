//! S7: a counting semaphore under contention. `SEM_TASKS` tasks cycle acquire + release on
//! one name with `SEM_PERMITS` permits, for distlock's `Client::semaphore`, the semaphore of
//! `distributed-lock-redis` and `limit` (the minimal correct semaphore with redis-rs). The
//! other columns have no semaphore. Every holder counts itself in and out on an in-process
//! occupancy counter: more than `SEM_PERMITS` inside at once is a broken limit.
//!
//! The semaphores are not `Column`s (a lock has no permits), so they have a trait of their
//! own here, and `main` connects them once for all rounds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::columns::{BoxFut, Held, Kind, Release, FENCED_ONLY, TTL};
use crate::contended::Occupancy;
use crate::results::{absolute, row, versus_limit, Better, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::{Metrics, TurnOrder, S2_SLICE, WAIT};

/// Tasks contending for the permits, and the permits.
pub const SEM_TASKS: usize = 16;
pub const SEM_PERMITS: u32 = 4;
/// How often `limit` polls a full semaphore: the lock limit's poll.
const LIMIT_POLL: Duration = Duration::from_millis(1);
/// The peer's retry pause, drawn uniformly from [0, this): the lock columns' peer pause.
const PEER_RETRY_DELAY: Duration = Duration::from_millis(2);

/// A semaphore implementation under test, connected to its server.
pub trait Permits: Send + Sync {
    /// Takes one of `SEM_PERMITS` permits of `name`, waiting up to `wait` while all are held.
    fn acquire<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>>;
}

/// Every column's semaphore on one node; `Err` says why a column has none.
pub type Columns = Vec<(Kind, Result<Arc<dyn Permits>, String>)>;

/// Why `kind` has no semaphore figure, if it has none.
pub fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock | Kind::DlRedis | Kind::Limit => None,
        Kind::DistlockFenced => Some(FENCED_ONLY),
        Kind::Rslock | Kind::Redlock => Some("no semaphore"),
    }
}

/// How each column's semaphore is set up, printed under the table.
pub fn note(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock => Some(
            "S7 distlock: `client.semaphore(name, 4).ttl(10 s).wait(w).acquire()` on the same \
             `Client` settings as the lock column, `guard.release()`; a waiter waits the way distlock \
             waits (a release publishes one wake-up).",
        ),
        Kind::DlRedis => Some(
            "S7 distributed-lock-redis: `provider.create_semaphore(name, 4).try_acquire()` (one EVAL \
             of its script: `TIME`, `ZREMRANGEBYSCORE` expired, `ZCARD`, `ZADD` with the ticket's expiry, \
             `PEXPIRE` of the set), `handle.release()` (an EVAL of `ZREM`). Its own `acquire(timeout)` \
             backs off from 10 ms to 200 ms between tries, so the bench loops over `try_acquire()` with \
             a uniform [0, 2 ms) pause, as for its lock. Each handle spawns an extension task, as its \
             lock does.",
        ),
        Kind::Limit => Some(
            "S7 limit: the minimal correct semaphore with redis-rs on one MultiplexedConnection: one \
             `redis::Script` (EVALSHA) that reads the server's `TIME`, drops expired permits \
             (`ZREMRANGEBYSCORE`), and if `ZCARD` is below 4 adds the caller's 128-bit token with its \
             own expiry as the score (`ZADD`) and sets the set's `PEXPIRE` to the ttl (never before \
             any live permit's end); release is a plain `ZREM`; a full semaphore is polled every 1 ms.",
        ),
        _ => None,
    }
}

/// Connects `kind`'s semaphore to one node.
pub async fn connect(kind: Kind, url: &str) -> Result<Arc<dyn Permits>, String> {
    let failed = |e: &dyn std::fmt::Display| format!("connect failed: {e}");
    Ok(match kind {
        Kind::Distlock => Arc::new(Distlock(
            distlock::Client::connect(url)
                .await
                .map_err(|e| failed(&e))?,
        )),
        Kind::DlRedis => Arc::new(DlRedis(crate::columns::dl_redis_provider(&[url]).await?)),
        Kind::Limit => Arc::new(Limit {
            conn: redis::Client::open(url)
                .map_err(|e| failed(&e))?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| failed(&e))?,
            acquire: Arc::new(redis::Script::new(LIMIT_ACQUIRE)),
        }),
        other => return Err(skips(other).unwrap_or("no semaphore").to_owned()),
    })
}

/// One column's part of an S7 round: its semaphore and the name it contends on.
pub struct SemEntry<'a> {
    pub permits: &'a Arc<dyn Permits>,
    pub name: String,
}

/// One round of S7: the columns take turns of `S2_SLICE` in an order drawn afresh every
/// pass, for `duration` each in all; results in `entries`' order.
pub async fn round(entries: &[SemEntry<'_>], duration: Duration) -> Vec<Result<Metrics, String>> {
    let turns = (duration.as_secs_f64() / S2_SLICE.as_secs_f64())
        .round()
        .max(1.0) as usize;
    let mut totals: Vec<Result<Totals, String>> =
        entries.iter().map(|_| Ok(Totals::default())).collect();
    let mut order = TurnOrder::new(entries.len());
    for _ in 0..turns {
        for i in order.next_pass() {
            let Ok(total) = &mut totals[i] else { continue };
            match turn(&entries[i], S2_SLICE).await {
                Ok(t) => total.add(t),
                Err(e) => totals[i] = Err(e),
            }
        }
    }
    totals
        .into_iter()
        .map(|total| total.map(Totals::metrics))
        .collect()
}

#[derive(Default)]
struct Totals {
    per_task: Vec<u64>,
    elapsed: Duration,
    max_occupancy: usize,
}

impl Totals {
    fn add(&mut self, t: Totals) {
        if self.per_task.is_empty() {
            self.per_task = vec![0; t.per_task.len()];
        }
        for (sum, n) in self.per_task.iter_mut().zip(t.per_task) {
            *sum += n;
        }
        self.elapsed += t.elapsed;
        self.max_occupancy = self.max_occupancy.max(t.max_occupancy);
    }

    fn metrics(self) -> Metrics {
        let total: u64 = self.per_task.iter().sum();
        let min = self.per_task.iter().min().copied().unwrap_or(0);
        let max = self.per_task.iter().max().copied().unwrap_or(0);
        Metrics::from([
            ("acq_per_s", total as f64 / self.elapsed.as_secs_f64()),
            ("fairness", min as f64 / max.max(1) as f64),
            ("max_occupancy", self.max_occupancy as f64),
        ])
    }
}

/// One turn: `SEM_TASKS` tasks cycle on the entry's name until `duration` is over (a cycle
/// under way then is finished and counted, and so is its time). A holder stays inside across
/// one yield to the scheduler, so the other tasks run while it holds.
async fn turn(entry: &SemEntry<'_>, duration: Duration) -> Result<Totals, String> {
    let occupancy = Arc::new(Occupancy::default());
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..SEM_TASKS)
        .map(|_| {
            let (permits, occupancy) = (Arc::clone(entry.permits), Arc::clone(&occupancy));
            let name = entry.name.clone();
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while Instant::now() < deadline {
                    let held = permits.acquire(&name, WAIT).await?;
                    occupancy.enter();
                    tokio::task::yield_now().await;
                    occupancy.leave();
                    held.release().await?;
                    cycles += 1;
                }
                Ok::<_, String>(cycles)
            })
        })
        .collect();
    let mut per_task = Vec::with_capacity(SEM_TASKS);
    for task in tasks {
        per_task.push(task.await.map_err(|e| e.to_string())??);
    }
    Ok(Totals {
        per_task,
        elapsed: started.elapsed(),
        max_occupancy: occupancy.max_inside.load(Ordering::SeqCst),
    })
}

fn timed_out(name: &str, wait: Duration) -> String {
    format!("no permit of `{name}` within {wait:?}")
}

struct Distlock(distlock::Client);

impl Permits for Distlock {
    fn acquire<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let request = self.0.semaphore(name, SEM_PERMITS).ttl(TTL).wait(wait);
            let guard = request.acquire().await.map_err(|e| e.to_string())?;
            Ok(Box::new(guard) as Held)
        })
    }
}

struct DlRedis(distributed_lock_redis::RedisLockProvider);

impl Permits for DlRedis {
    fn acquire<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        use distributed_lock_core::traits::{DistributedSemaphore, SemaphoreProvider};
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            let semaphore = self.0.create_semaphore(name, SEM_PERMITS);
            loop {
                match semaphore.try_acquire().await {
                    Ok(Some(handle)) => return Ok(Box::new(handle) as Held),
                    Ok(None) if Instant::now() < deadline => {
                        let pause = rand::random_range(0..PEER_RETRY_DELAY.as_micros() as u64);
                        tokio::time::sleep(Duration::from_micros(pause)).await;
                    }
                    Ok(None) => return Err(timed_out(name, wait)),
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
    }
}

impl Release for distributed_lock_redis::RedisSemaphoreHandle {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        use distributed_lock_core::traits::LockHandle;
        Box::pin(async move { LockHandle::release(*self).await.map_err(|e| e.to_string()) })
    }
}

/// `KEYS[1]` the semaphore's sorted set; `ARGV[1]` permits, `ARGV[2]` ttl in ms, `ARGV[3]` token.
/// Scores are whole milliseconds of the server's clock, written as integers.
const LIMIT_ACQUIRE: &str = r"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', string.format('%d', now))
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('zadd', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0";

struct Limit {
    conn: redis::aio::MultiplexedConnection,
    acquire: Arc<redis::Script>,
}

struct LimitPermit {
    conn: redis::aio::MultiplexedConnection,
    name: String,
    token: String,
}

impl Permits for Limit {
    fn acquire<'a>(&'a self, name: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let token = format!("{:032x}", rand::random::<u128>());
            let deadline = Instant::now() + wait;
            let mut conn = self.conn.clone();
            loop {
                let taken: i64 = self
                    .acquire
                    .key(name)
                    .arg(SEM_PERMITS)
                    .arg(TTL.as_millis() as u64)
                    .arg(&token)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if taken == 1 {
                    return Ok(Box::new(LimitPermit {
                        conn,
                        name: name.to_owned(),
                        token,
                    }) as Held);
                }
                if Instant::now() >= deadline {
                    return Err(timed_out(name, wait));
                }
                tokio::time::sleep(LIMIT_POLL).await;
            }
        })
    }
}

impl Release for LimitPermit {
    fn release(mut self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move {
            let removed: i64 = redis::cmd("ZREM")
                .arg(&self.name)
                .arg(&self.token)
                .query_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            match removed {
                1 => Ok(()),
                _ => Err(format!("a permit of `{}` was no longer ours", self.name)),
            }
        })
    }
}

/// S7's rows of the table.
pub const ROWS: &[RowSpec] = &[
    row("S7", "acquisitions/s", "acq_per_s", Fmt::Rate),
    row(
        "S7",
        "per-task min/max acquisitions",
        "fairness",
        Fmt::Ratio,
    ),
    row(
        "S7",
        "max occupancy (of 4 permits)",
        "max_occupancy",
        Fmt::Count,
    ),
];

/// S7's targets: none in the issue, which asks for the figures; S3's bar for a contended
/// lock is shown, and the limit is a correctness check for every column.
pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S7",
        metric: "acq_per_s",
        goal: "≥ 1.10× limit (S3's bar for a contended lock)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S7", "acq_per_s", 1.10, false),
        ahead: Some(Better::Higher),
    },
    TargetSpec {
        scenario: "S7",
        metric: "max_occupancy",
        goal: "≤ 4 (the permits)",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S7", "max_occupancy", |v| v <= f64::from(SEM_PERMITS)),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S7: one semaphore name per column and round with 4 permits (ttl 10 s, wait 10 s) on the single node; 16 tasks each loop acquire a permit, count themselves in on an in-process occupancy counter, yield once to the scheduler (so the other tasks run while they hold), count themselves out, release. The columns take turns of 250 ms (2 s per column and round; 0.5 s with --quick), in an order drawn afresh for every pass. acquisitions/s: all acquisitions over the time the column's turns took; per-task min/max: the fewest acquisitions of any task over the most; max occupancy: the most holders inside at once in any turn of any round, which must never exceed the 4 permits (it shows whether the semaphore actually lets 4 in at once, too). Only distlock, distributed-lock-redis and limit have a semaphore.",
];
