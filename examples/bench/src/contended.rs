//! S3 and S3b: tasks contending on one key, each holding it for a spin; acquisitions/s,
//! hand-offs, fairness and occupancy. Also the MONITOR pass (one untimed S3 run per column),
//! and the occupancy counter S3x, S7 and S10 share.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

use crate::columns::Column;
use crate::cost::lock_commands;
use crate::scenarios::{micros, percentile, Entry, Metrics, S3_HOLD, S3_TASKS, WAIT};

/// One round of S3 (or S3b, with its `hold`) for all `entries`, one whole run each:
/// fairness and hand-off need one long stretch of contention. Results in `entries`' order.
pub async fn round(
    entries: &[Entry<'_>],
    hold: Duration,
    duration: Duration,
    server: &RedisServer,
) -> Vec<Result<Metrics, String>> {
    let mut results = Vec::with_capacity(entries.len());
    for entry in entries {
        let before = server.commandstats();
        let run = contended(
            entry.column,
            &entry.key,
            S3_TASKS,
            hold,
            Instant::now() + duration,
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

/// What the contended tasks saw. Hand-off: from the moment holder k is about to call
/// release to the moment the next successful acquire (any task's) returns.
pub struct Contended {
    pub elapsed: Duration,
    pub per_task: Vec<u64>,
    pub handoffs: Vec<Duration>,
    pub max_occupancy: usize,
}

impl Contended {
    pub fn acquisitions(&self) -> u64 {
        self.per_task.iter().sum()
    }

    pub fn metrics(mut self) -> Metrics {
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
