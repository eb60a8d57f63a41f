//! The scenarios. Each run drives one column for one round and returns its figures by name;
//! `main` interleaves the columns within every round.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

use crate::columns::Column;
use crate::cost::Ledger;

/// Figures of one run by name, e.g. `p50_us`.
pub type Metrics = BTreeMap<&'static str, f64>;

/// How long any acquire may wait. Equal to the ttl: in a healthy run nothing waits this long.
pub const WAIT: Duration = crate::columns::TTL;
pub const S2_TASKS: usize = 32;
const S3_TASKS: usize = 8;
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

/// One round of `scenario` for all `entries`, in their order; results in the same order.
pub async fn run_round(
    scenario: Scenario,
    entries: &[Entry<'_>],
    plan: &Plan,
    server: &RedisServer,
) -> Vec<Result<Metrics, String>> {
    match scenario {
        // The cost rows only where every column's server is the single node.
        Scenario::S1 => latency(entries, plan.s1_cycles, Some(server.url())).await,
        Scenario::S1c => latency(entries, plan.s1_cycles, None).await,
        Scenario::S4 => latency(entries, plan.s4_cycles, None).await,
        Scenario::S2 => throughput(entries, plan.s2_duration, Some(server.url())).await,
        Scenario::S2c => throughput(entries, plan.s2c_duration, None).await,
        // Only distlock has a batched watchdog and the attributes, and S3x runs in processes
        // of its own; `main` runs them on their own (`annotated`, `held_locks`,
        // `two_processes`).
        Scenario::S3x
        | Scenario::S5
        | Scenario::S6
        | Scenario::S7
        | Scenario::S8
        | Scenario::S6b
        | Scenario::S6q
        | Scenario::S10
        | Scenario::S11
        | Scenario::S12
        | Scenario::S13 => entries
            .iter()
            .map(|_| Err("S3x and S5 to S13 run on their own".to_owned()))
            .collect(),
        // Whole runs: fairness and hand-off need one long stretch of contention.
        Scenario::S3 | Scenario::S3b => {
            let hold = if scenario == Scenario::S3 {
                S3_HOLD
            } else {
                S3B_HOLD
            };
            let mut results = Vec::with_capacity(entries.len());
            for entry in entries {
                let before = server.commandstats();
                let run = contended(
                    entry.column,
                    &entry.key,
                    S3_TASKS,
                    hold,
                    Instant::now() + plan.s3_duration,
                    None,
                )
                .await;
                let commands = lock_commands(&before, &server.commandstats());
                results.push(run.map(|run| {
                    let acquisitions = run.acquisitions() as f64;
                    let mut metrics = run.metrics();
                    metrics.insert("cmds_per_acq", commands as f64 / acquisitions);
                    metrics
                }));
            }
            results
        }
    }
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

/// Sequential acquire+release cycles, the columns taking turns of `SLICE_CYCLES`: p50/p99
/// per cycle, and with `metered` (the server's URL) the cost rows (`cost`).
async fn latency(
    entries: &[Entry<'_>],
    cycles: usize,
    metered: Option<String>,
) -> Vec<Result<Metrics, String>> {
    let mut samples: Vec<Result<Vec<Duration>, String>> = entries
        .iter()
        .map(|_| Ok(Vec::with_capacity(cycles)))
        .collect();
    let mut ledger = Ledger::new(metered, entries.len()).await;
    let mut order = TurnOrder::new(entries.len());
    for start in (0..cycles).step_by(SLICE_CYCLES) {
        let turn = SLICE_CYCLES.min(cycles - start);
        for i in order.next_pass() {
            let (entry, samples) = (&entries[i], &mut samples[i]);
            let failed = match samples {
                Ok(done) => {
                    ledger.start().await;
                    let run = sequential(entry, turn, done).await;
                    ledger.stop(i).await;
                    run.err()
                }
                Err(_) => None,
            };
            if let Some(e) = failed {
                *samples = Err(e);
            }
        }
    }
    samples
        .into_iter()
        .enumerate()
        .map(|(i, samples)| {
            let mut samples = samples?;
            samples.sort_unstable();
            let mut metrics = Metrics::from([
                ("p50_us", micros(percentile(&samples, 0.50))),
                ("p99_us", micros(percentile(&samples, 0.99))),
            ]);
            ledger.per_cycle(i, samples.len() as u64, &mut metrics);
            Ok(metrics)
        })
        .collect()
}

async fn sequential(
    entry: &Entry<'_>,
    cycles: usize,
    samples: &mut Vec<Duration>,
) -> Result<(), String> {
    for _ in 0..cycles {
        let started = Instant::now();
        entry
            .column
            .acquire(&entry.key, WAIT)
            .await?
            .release()
            .await?;
        samples.push(started.elapsed());
    }
    Ok(())
}

/// 32 tasks per column, each cycling on its own key, the columns taking turns of `S2_SLICE`:
/// all cycles over all the time the column's turns took, and with `metered` (the server's
/// URL) the cost rows (`cost`).
async fn throughput(
    entries: &[Entry<'_>],
    duration: Duration,
    metered: Option<String>,
) -> Vec<Result<Metrics, String>> {
    let turns = (duration.as_secs_f64() / S2_SLICE.as_secs_f64())
        .round()
        .max(1.0) as usize;
    let mut totals: Vec<Result<(u64, Duration), String>> =
        entries.iter().map(|_| Ok((0, Duration::ZERO))).collect();
    let mut ledger = Ledger::new(metered, entries.len()).await;
    let mut order = TurnOrder::new(entries.len());
    for _ in 0..turns {
        for i in order.next_pass() {
            let (entry, total) = (&entries[i], &mut totals[i]);
            let failed = match total {
                Ok((cycles, elapsed)) => {
                    ledger.start().await;
                    let run = distinct_keys(entry, S2_SLICE).await;
                    ledger.stop(i).await;
                    match run {
                        Ok((c, e)) => {
                            *cycles += c;
                            *elapsed += e;
                            None
                        }
                        Err(e) => Some(e),
                    }
                }
                Err(_) => None,
            };
            if let Some(e) = failed {
                *total = Err(e);
            }
        }
    }
    totals
        .into_iter()
        .enumerate()
        .map(|(i, total)| {
            let (cycles, elapsed) = total?;
            let mut metrics =
                Metrics::from([("cycles_per_s", cycles as f64 / elapsed.as_secs_f64())]);
            ledger.per_cycle(i, cycles, &mut metrics);
            Ok(metrics)
        })
        .collect()
}

/// One turn of S2: cycles done, and the time until the last task finished (cycles that ran
/// past the turn's end are counted, so their time is too).
async fn distinct_keys(entry: &Entry<'_>, duration: Duration) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..S2_TASKS)
        .map(|i| {
            let column = Arc::clone(entry.column);
            let key = s2_key(&entry.key, i);
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while Instant::now() < deadline {
                    column.acquire(&key, WAIT).await?.release().await?;
                    cycles += 1;
                }
                Ok::<_, String>(cycles)
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.map_err(|e| e.to_string())??;
    }
    Ok((total, started.elapsed()))
}

/// The key of S2's (and S2c's) task `i` in a run on `key`.
pub fn s2_key(key: &str, i: usize) -> String {
    format!("{key}:{i}")
}

/// What the contended tasks saw. Hand-off: from the moment holder k is about to call
/// release to the moment the next successful acquire (any task's) returns.
pub struct Contended {
    pub elapsed: Duration,
    pub per_task: Vec<u64>,
    pub handoffs: Vec<Duration>,
    pub max_occupancy: usize,
}

impl Contended {
    fn acquisitions(&self) -> u64 {
        self.per_task.iter().sum()
    }

    fn metrics(mut self) -> Metrics {
        self.handoffs.sort_unstable();
        let min = self.per_task.iter().min().copied().unwrap_or(0);
        let max = self.per_task.iter().max().copied().unwrap_or(0);
        Metrics::from([
            (
                "acq_per_s",
                self.acquisitions() as f64 / self.elapsed.as_secs_f64(),
            ),
            ("handoff_p50_us", micros(percentile(&self.handoffs, 0.50))),
            ("handoff_p99_us", micros(percentile(&self.handoffs, 0.99))),
            ("fairness", min as f64 / max.max(1) as f64),
            ("max_occupancy", self.max_occupancy as f64),
        ])
    }
}

/// Tasks inside the critical section now, and the most ever at once. S3x keeps one in memory
/// both of its processes map (`s3x`), so that one counts across processes; `repr(C)` fixes the
/// layout the parent reads back.
#[derive(Default)]
#[repr(C)]
pub struct Occupancy {
    pub inside: AtomicUsize,
    pub max_inside: AtomicUsize,
}

impl Occupancy {
    pub fn enter(&self) {
        let inside = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(inside, Ordering::SeqCst);
    }

    pub fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Probe {
    occupancy: Occupancy,
    /// When the last holder was about to release, and the hand-offs measured so far. One
    /// mutex: holders are serialised by the lock anyway, so it is never contended for long.
    timeline: Mutex<(Option<Instant>, Vec<Duration>)>,
}

/// `tasks` tasks take turns on one key, each holding it for `hold` (a spin, so the hold is
/// exact and costs CPU like real work), starting no new cycle after `deadline`. Occupancy is
/// counted in this process, and also in `shared` if given.
pub async fn contended(
    column: &Arc<dyn Column>,
    key: &str,
    tasks: usize,
    hold: Duration,
    deadline: Instant,
    shared: Option<&'static Occupancy>,
) -> Result<Contended, String> {
    let probe = Arc::new(Probe::default());
    let started = Instant::now();
    let count = tasks;
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let (column, probe, key) = (Arc::clone(column), Arc::clone(&probe), key.to_owned());
            tokio::spawn(async move {
                let mut acquisitions = 0u64;
                while Instant::now() < deadline {
                    let held = column.acquire(&key, WAIT).await?;
                    let acquired = Instant::now();
                    {
                        let mut timeline = probe.timeline.lock().expect("timeline");
                        if let Some(released) = timeline.0.take() {
                            timeline
                                .1
                                .push(acquired.saturating_duration_since(released));
                        }
                    }
                    probe.occupancy.enter();
                    if let Some(shared) = shared {
                        shared.enter();
                    }
                    let until = Instant::now() + hold;
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    if let Some(shared) = shared {
                        shared.leave();
                    }
                    probe.occupancy.leave();
                    probe.timeline.lock().expect("timeline").0 = Some(Instant::now());
                    held.release().await?;
                    acquisitions += 1;
                }
                Ok::<_, String>(acquisitions)
            })
        })
        .collect();
    let mut per_task = Vec::with_capacity(count);
    for task in tasks {
        per_task.push(task.await.map_err(|e| e.to_string())??);
    }
    let elapsed = started.elapsed();
    let handoffs = std::mem::take(&mut probe.timeline.lock().expect("timeline").1);
    Ok(Contended {
        elapsed,
        per_task,
        handoffs,
        max_occupancy: probe.occupancy.max_inside.load(Ordering::SeqCst),
    })
}

/// S6: one fresh distlock `Client` takes `S6_LOCKS` distinct locks and holds them for
/// `window` under the watchdog (see `held`, which S6b and S6q share).
pub async fn held_locks(
    server: &RedisServer,
    key: &str,
    window: Duration,
) -> Result<Metrics, String> {
    let client = crate::held::client(&[server]).await?;
    crate::held::hold_many(&client, &[server], key, S6_LOCKS, window).await
}

/// Commands the server executed between two `INFO commandstats` snapshots, without the
/// snapshots' own (`INFO`, and `CLIENT SETINFO` from the kit's fresh connection). Calls made
/// inside Lua scripts count: Redis counts them like any other command.
pub fn lock_commands(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "client|setinfo"))
        .map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0))
        .sum()
}

/// An S3 run (200 µs hold) under `MONITOR`, outside the timed rounds: MONITOR tells the
/// requests clients sent from the calls scripts made, which `INFO commandstats` cannot.
pub async fn count_requests(
    column: &Arc<dyn Column>,
    key: &str,
    duration: Duration,
    server: &RedisServer,
) -> Result<Metrics, String> {
    let monitor = Monitor::start(&server.addr()).map_err(|e| format!("MONITOR: {e}"))?;
    let run = contended(
        column,
        key,
        S3_TASKS,
        S3_HOLD,
        Instant::now() + duration,
        None,
    )
    .await;
    let (requests, lua_calls) = monitor.finish().map_err(|e| format!("MONITOR: {e}"))?;
    let acquisitions = run?.acquisitions() as f64;
    Ok(Metrics::from([
        ("requests_per_acq", requests as f64 / acquisitions),
        ("lua_calls_per_acq", lua_calls as f64 / acquisitions),
    ]))
}

const MONITOR_END: &str = "distlock-bench-monitor-end";

struct Monitor {
    addr: String,
    counter: std::thread::JoinHandle<std::io::Result<(u64, u64)>>,
}

impl Monitor {
    fn start(addr: &str) -> std::io::Result<Monitor> {
        let mut stream = TcpStream::connect(addr)?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut lines = BufReader::new(stream);
        let mut ok = String::new();
        lines.read_line(&mut ok)?; // "+OK": from here on every command is a line
                                   // A thread of its own: counting must not take turns with the tasks being measured.
        let counter = std::thread::spawn(move || {
            let (mut requests, mut lua_calls) = (0, 0);
            let mut line = Vec::new();
            loop {
                line.clear();
                if lines.read_until(b'\n', &mut line)? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                if contains(&line, MONITOR_END.as_bytes()) {
                    return Ok((requests, lua_calls));
                }
                // `+<time> [<db> lua] "GET" ...` for calls from scripts, `[<db> <addr>]` else.
                if contains(&line, b" lua] ") {
                    lua_calls += 1;
                } else {
                    requests += 1;
                }
            }
        });
        Ok(Monitor {
            addr: addr.to_owned(),
            counter,
        })
    }

    /// Ends the count with a marker command sent on a raw connection (a redis-rs connection
    /// would first send its own `CLIENT SETINFO`, which would be counted).
    fn finish(self) -> std::io::Result<(u64, u64)> {
        let mut stream = TcpStream::connect(&self.addr)?;
        stream.write_all(format!("ECHO {MONITOR_END}\r\n").as_bytes())?;
        self.counter.join().expect("monitor thread")
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
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

/// The lock S5 takes through the attribute: the same settings as the hand-written cycle
/// (ttl 10 s, wait 10 s, the watchdog at its default period), an empty body.
#[distlock::distributed_lock(key = "<key>", client = client, ttl = "10s", wait = "10s")]
async fn annotated_cycle(client: &distlock::Client, key: &str) -> Result<(), distlock::Error> {
    Ok(())
}

/// S5: sequential cycles of the annotated fn and of the same lock taken by hand, taking
/// turns of `SLICE_CYCLES` on one client: p50/p99 of each, and their ratio in this round.
pub async fn annotated(server: &RedisServer, key: &str, cycles: usize) -> Result<Metrics, String> {
    let client = distlock::Client::connect(&server.url())
        .await
        .map_err(|e| e.to_string())?;
    let by_hand_key = format!("{key}:hand");
    let mut annotated = Vec::with_capacity(cycles);
    let mut by_hand = Vec::with_capacity(cycles);
    for start in (0..cycles).step_by(SLICE_CYCLES) {
        for _ in start..(start + SLICE_CYCLES).min(cycles) {
            let started = Instant::now();
            annotated_cycle(&client, key)
                .await
                .map_err(|e| e.to_string())?;
            annotated.push(started.elapsed());
        }
        for _ in start..(start + SLICE_CYCLES).min(cycles) {
            let started = Instant::now();
            let guard = client
                .lock(&by_hand_key)
                .ttl(crate::columns::TTL)
                .wait(WAIT)
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            guard.release().await.map_err(|e| e.to_string())?;
            by_hand.push(started.elapsed());
        }
    }
    annotated.sort_unstable();
    by_hand.sort_unstable();
    let (a50, h50) = (percentile(&annotated, 0.50), percentile(&by_hand, 0.50));
    Ok(Metrics::from([
        ("annotated_p50_us", micros(a50)),
        ("annotated_p99_us", micros(percentile(&annotated, 0.99))),
        ("by_hand_p50_us", micros(h50)),
        ("by_hand_p99_us", micros(percentile(&by_hand, 0.99))),
        ("ratio_p50", a50.as_secs_f64() / h50.as_secs_f64()),
    ]))
}
