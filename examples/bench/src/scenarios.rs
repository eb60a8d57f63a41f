//! The scenarios: their names, their sizes, and what every scenario's run shares (the figures
//! by name, a column's part of a round, the turns' order, percentiles). The scenarios every
//! column runs alike are in `uncontended` (S1, S2, S4 and their cluster forms) and `contended`
//! (S3, S3b); `rounds` interleaves the columns within every round, and runs the other
//! scenarios (their modules) on their own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::columns::{Column, Kind, FENCED_ONLY};

/// Figures of one run by name, e.g. `p50_us`.
pub type Metrics = BTreeMap<&'static str, f64>;

/// How long any acquire may wait. Equal to the ttl: in a healthy run nothing waits this long.
pub const WAIT: Duration = crate::columns::TTL;
pub const S2_TASKS: usize = 32;
pub const S3_TASKS: usize = 8;
pub const S3_HOLD: Duration = Duration::from_micros(200);
pub const S3B_HOLD: Duration = Duration::from_millis(5);
/// S3x: OS processes, and tasks in each, contending on one key with `S3_HOLD`.
pub const S3X_PROCESSES: usize = 2;
pub const S3X_TASKS: usize = 4;
/// S6: locks held at once, and their ttl (the watchdog renews every ttl/3).
pub const S6_LOCKS: usize = 10_000;
pub const S6_TTL: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    S1,
    S2,
    /// S1 on the 3-master Redis Cluster.
    S1c,
    /// S2 on the 3-master Redis Cluster.
    S2c,
    S3,
    S3b,
    S3x,
    S4,
    S5,
    S6,
    /// The semaphore (`semaphore`).
    S7,
    /// Leader failover (`failover`).
    S8,
    /// S6 with 100,000 locks, and with 20,000 on a 3-node quorum (`held`).
    S6b,
    S6q,
    /// 10,000 waiters on one lock (`herd`).
    S10,
    /// Memory per held lock, client and server (`memory`).
    S11,
    /// The read/write lock under a 9:1 read/write mix (`rwmix`).
    S12,
    /// A fenced write against a plain one, on Redis and PostgreSQL (`fenced_writes`).
    S13,
}

impl Scenario {
    pub const ALL: [Scenario; 18] = [
        Scenario::S1,
        Scenario::S2,
        Scenario::S1c,
        Scenario::S2c,
        Scenario::S3,
        Scenario::S3b,
        Scenario::S3x,
        Scenario::S4,
        Scenario::S5,
        Scenario::S6,
        Scenario::S7,
        Scenario::S8,
        Scenario::S6b,
        Scenario::S6q,
        Scenario::S10,
        Scenario::S11,
        Scenario::S12,
        Scenario::S13,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Scenario::S1 => "S1",
            Scenario::S2 => "S2",
            Scenario::S1c => "S1c",
            Scenario::S2c => "S2c",
            Scenario::S3 => "S3",
            Scenario::S3b => "S3b",
            Scenario::S3x => "S3x",
            Scenario::S4 => "S4",
            Scenario::S5 => "S5",
            Scenario::S6 => "S6",
            Scenario::S7 => "S7",
            Scenario::S8 => "S8",
            Scenario::S6b => "S6b",
            Scenario::S6q => "S6q",
            Scenario::S10 => "S10",
            Scenario::S11 => "S11",
            Scenario::S12 => "S12",
            Scenario::S13 => "S13",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scenario::S1 => "S1 uncontended acquire+release, 1 task",
            Scenario::S2 => "S2 32 tasks, distinct keys",
            Scenario::S1c => "S1c S1 on a 3-master Redis Cluster (limit: limit on the cluster)",
            Scenario::S2c => "S2c S2 on a 3-master Redis Cluster (keys over all 3 masters)",
            Scenario::S3 => "S3 8 tasks, one key, hold 200 µs",
            Scenario::S3b => "S3b 8 tasks, one key, hold 5 ms",
            Scenario::S3x => "S3x 2 processes × 4 tasks, one key, hold 200 µs",
            Scenario::S4 => "S4 5-node quorum acquire+release, 1 task (limit: limit-quorum)",
            Scenario::S5 => "S5 annotated fn vs the same lock by hand, 1 task",
            Scenario::S6 => "S6 10,000 held locks under the watchdog (ttl 3 s)",
            Scenario::S7 => "S7 semaphore: 16 tasks, 4 permits, one name",
            Scenario::S8 => {
                "S8 leader failover: SIGKILL of the leader's process to the next leader's `campaign()` returning"
            }
            Scenario::S6b => "S6b 100,000 held locks under the watchdog (ttl 3 s)",
            Scenario::S6q => "S6q 20,000 held locks on a 3-node quorum under the watchdog (ttl 3 s)",
            Scenario::S10 => "S10 herd: 10,000 waiters on one lock held by another process",
            Scenario::S11 => "S11 memory per held lock, client and server, at 10,000 and 100,000 held",
            Scenario::S12 => {
                "S12 read/write lock: 8 tasks, one name, 9 reads (hold 100 µs) to 1 write (hold 200 µs)"
            }
            Scenario::S13 => {
                "S13 fenced write (distlock fenced) against the plain write (limit), Redis and PostgreSQL, 1 task"
            }
        }
    }

    /// Why `kind`'s column does not run this scenario, if it does not: the fenced variant only
    /// shows what fencing costs, on the uncontended and the many-keys paths.
    pub fn skips(self, kind: Kind) -> Option<&'static str> {
        match (kind, self) {
            (Kind::DistlockFenced, Scenario::S1 | Scenario::S2 | Scenario::S4) => None,
            (Kind::DistlockFenced, _) => Some(FENCED_ONLY),
            _ => None,
        }
    }

    /// Runs on the five independent nodes instead of the single one.
    pub fn quorum(self) -> bool {
        self == Scenario::S4
    }

    /// Runs on the Redis Cluster instead of the single node.
    pub fn cluster(self) -> bool {
        matches!(self, Scenario::S1c | Scenario::S2c)
    }
}

/// Sizes of one round; `--quick` shrinks them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub rounds: usize,
    pub s1_cycles: usize,
    pub s4_cycles: usize,
    pub ping_count: usize,
    pub s2_duration: Duration,
    /// S2c's length per column, in S2's 250 ms turns: shorter than S2's in the full run, so
    /// the four cluster columns add under a minute.
    pub s2c_duration: Duration,
    pub s3_duration: Duration,
    /// Length of one S3x run (both processes run for it).
    pub s3x_duration: Duration,
    /// Length of the one extra S3 run per column under MONITOR (outside the timed rounds).
    pub accounting_duration: Duration,
    /// S6: how long the 10,000 locks are held and measured (several renewal periods).
    pub s6_window: Duration,
    /// S7's length per column, in S2's 250 ms turns.
    pub s7_duration: Duration,
    /// S12's length per column, in turns of `rwmix::TURN`.
    pub s12_duration: Duration,
    /// S8: kills per ttl of `failover::TTLS` (1 s, 5 s, 30 s), in one pass after the rounds.
    pub s8_samples: [usize; 3],
    pub warmup_cycles: usize,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                rounds: 3,
                s1_cycles: 500,
                s4_cycles: 200,
                ping_count: 500,
                s2_duration: Duration::from_millis(500),
                s2c_duration: Duration::from_millis(500),
                s3_duration: Duration::from_secs(1),
                s3x_duration: Duration::from_secs(1),
                accounting_duration: Duration::from_millis(500),
                s6_window: Duration::from_secs(3),
                s7_duration: Duration::from_millis(500),
                s12_duration: Duration::from_secs(1),
                s8_samples: [3, 2, 1],
                warmup_cycles: 50,
            }
        } else {
            Plan {
                rounds: 7,
                s1_cycles: 2_000,
                s4_cycles: 1_000,
                ping_count: 2_000,
                s2_duration: Duration::from_secs(2),
                s2c_duration: Duration::from_millis(1_500),
                s3_duration: Duration::from_secs(3),
                s3x_duration: Duration::from_millis(1_500),
                accounting_duration: Duration::from_secs(1),
                s6_window: Duration::from_secs(6),
                s7_duration: Duration::from_secs(2),
                s12_duration: Duration::from_secs(3),
                s8_samples: [7, 5, 3],
                warmup_cycles: 200,
            }
        }
    }
}

/// Cycles per turn of a column in S1/S4. Short turns spread a burst of machine noise (other
/// processes on this 2-core machine) over every column instead of the one running then.
pub const SLICE_CYCLES: usize = 50;
/// Length of a column's turn in S2.
pub const S2_SLICE: Duration = Duration::from_millis(250);

/// One column's part of a round. `key` is unique per scenario, column and round, so a lock
/// left behind by one run can never slow down another.
pub struct Entry<'a> {
    pub column: &'a Arc<dyn Column>,
    pub key: String,
}

/// The order of the columns' turns, drawn afresh for every pass through them. A column's
/// figures depend on the column that ran just before it: measured here with S1's turns in a
/// fixed cyclic order, the column after redlock (whose blocking-pool threads and per-command
/// TCP connections leave both cores awake) ran 5-15 % faster than in the reversed order, which
/// moved distlock between 0.93x and 1.06x the limit. A fresh random order each pass gives
/// every column every predecessor alike; the seed is fixed, so runs repeat the same orders.
pub struct TurnOrder {
    rng: rand::rngs::StdRng,
    order: Vec<usize>,
}

impl TurnOrder {
    pub fn new(columns: usize) -> TurnOrder {
        use rand::SeedableRng;
        TurnOrder {
            rng: rand::rngs::StdRng::seed_from_u64(0x5eed),
            order: (0..columns).collect(),
        }
    }

    pub fn next_pass(&mut self) -> Vec<usize> {
        use rand::seq::SliceRandom;
        self.order.shuffle(&mut self.rng);
        self.order.clone()
    }
}

/// p50 of `PING` on one multiplexed connection: one round trip, the floor of any command.
pub async fn ping_p50(url: &str, count: usize) -> Result<f64, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        samples.push(started.elapsed());
    }
    samples.sort_unstable();
    Ok(micros(percentile(&samples, 0.50)))
}

/// p50 of an empty `spawn_blocking` round trip: the cost the redlock column pays per call
/// for running a blocking client under Tokio.
pub async fn spawn_blocking_p50(count: usize) -> f64 {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        tokio::task::spawn_blocking(|| ())
            .await
            .expect("empty task");
        samples.push(started.elapsed());
    }
    samples.sort_unstable();
    micros(percentile(&samples, 0.50))
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
