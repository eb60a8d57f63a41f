//! S10: a herd. A holder in a child process of this binary (the hidden `--herd-holder`
//! argument) takes one lock and keeps it; `HERD_WAITERS` tasks then wait for it: first all in
//! the bench process on the column's own client, then spread over `HERD_PROCESSES` child
//! processes (`--herd-waiters`, each with its own client). When every waiter has made its
//! first attempt, the parent tells the holder to release, and each waiter, once served,
//! releases at once. The figures:
//! from the holder's release to the first and to the last waiter served (both processes read
//! `CLOCK_MONOTONIC`, so the holder's timestamp and the waiters' compare directly), and the
//! server's commands per acquisition over the same stretch (`INFO commandstats`).
//!
//! distlock's waiters sleep until a release is published; rslock's poll (a `lock()` of 3 tries
//! with a [0, 2 ms) pause, in a loop), so 10,000 of them keep the server and the client busy
//! with failed attempts: rslock runs with a cap on the time after the release, and the figure
//! is how many it served by then.
//!
//! The holder's protocol, one line each: holder → `held`, parent → `release`, holder →
//! `released <CLOCK_MONOTONIC ns just before its release call>`. A waiters process's: child →
//! `waiting`, parent → `released` (its cap starts), child → the JSON list of its waiters'
//! served timestamps.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_testkit::RedisServer;

use crate::child::{in_runtime, read_stdin_line, say, Child};
use crate::columns::{Column, Kind, FENCED_ONLY};
use crate::contended::Occupancy;
use crate::cost::lock_commands;
use crate::results::{absolute, row, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::Metrics;

/// The hidden first arguments that turn the binary into the herd's holder, and into a
/// process of waiters.
pub const CHILD_FLAG: &str = "--herd-holder";
pub const WAITERS_FLAG: &str = "--herd-waiters";

/// Tasks waiting for the one lock, and the child processes they are spread over in the
/// second half of a run.
pub const HERD_WAITERS: usize = 10_000;
const HERD_PROCESSES: usize = 4;
/// After the last waiter started: its first attempt found the lock held, and it waits.
const SETTLE: Duration = Duration::from_millis(500);
/// How long after the release a column's waiters are waited for. distlock's must all be
/// served well within it; rslock's polling serves few, so its cap keeps the run short.
fn cap(kind: Kind) -> Duration {
    match kind {
        Kind::Distlock => Duration::from_secs(60),
        _ => Duration::from_secs(10),
    }
}

/// Why `kind` has no herd figure, if it has none.
pub fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock | Kind::Rslock => None,
        Kind::DistlockFenced => Some(FENCED_ONLY),
        Kind::Redlock => Some(
            "a blocking client: every waiter would hold one of tokio's 512 blocking threads and open a TCP connection per try",
        ),
        Kind::DlRedis => Some(
            "no wake-up on release: its waiters poll `try_acquire()` as rslock's do (rslock stands for the polling locks)",
        ),
        Kind::Limit => Some(
            "polls every 1 ms, as rslock does (rslock stands for the polling locks); no wake-up on release",
        ),
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of the machine.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The holder: `--herd-holder <column> <redis url> <key>`.
pub fn child(args: &[String]) -> ExitCode {
    in_runtime(|| async {
        let [kind, url, key] = args else {
            return Err(format!(
                "usage: bench {CHILD_FLAG} <column> <redis url> <key>"
            ));
        };
        let column = connect(kind, url).await?;
        let held = column.acquire(key, Duration::from_secs(10)).await?;
        say("held")?;
        read_stdin_line().await?;
        let at = monotonic_ns();
        held.release().await?;
        say(&format!("released {at}"))
    })
}

/// Waiters: `--herd-waiters <column> <redis url> <key> <tasks> <occupancy file>`.
pub fn waiters_child(args: &[String]) -> ExitCode {
    in_runtime(|| async {
        let [kind_name, url, key, count, occupancy] = args else {
            return Err(format!(
                "usage: bench {WAITERS_FLAG} <column> <redis url> <key> <tasks> <occupancy file>"
            ));
        };
        let count: usize = count.parse().map_err(|e| format!("tasks `{count}`: {e}"))?;
        let occupancy = crate::s3x::map_shared(occupancy)?;
        let column = connect(kind_name, url).await?;
        // Connections opened and scripts loaded, on a key of its own.
        let warmup = format!("{key}:warmup:{}", std::process::id());
        column
            .acquire(&warmup, Duration::from_secs(10))
            .await?
            .release()
            .await?;
        let waiters = Waiters::start(&column, key, count, occupancy).await;
        say("waiting")?;
        read_stdin_line().await?;
        let kind = Kind::from_name(kind_name).ok_or("unknown column")?;
        let served = waiters.served(cap(kind)).await?;
        say(&serde_json::to_string(&served).map_err(|e| e.to_string())?)
    })
}

async fn connect(kind: &str, url: &str) -> Result<Arc<dyn Column>, String> {
    let kind = Kind::from_name(kind).ok_or_else(|| format!("unknown column `{kind}`"))?;
    kind.connect(&[url.to_owned()]).await
}

/// The occupancy of the in-process herd (reset by each run; one herd runs at a time).
static LOCAL: Occupancy = Occupancy {
    inside: AtomicUsize::new(0),
    max_inside: AtomicUsize::new(0),
};

/// The names of a herd's figures: all waiters in the bench process, and spread over
/// `HERD_PROCESSES` child processes.
const ONE: [&str; 7] = [
    "served",
    "first_ms",
    "median_ms",
    "last_ms",
    "served_per_s",
    "cmds_per_acq",
    "max_occupancy",
];
const SPREAD: [&str; 7] = [
    "p_served",
    "p_first_ms",
    "p_median_ms",
    "p_last_ms",
    "p_served_per_s",
    "p_cmds_per_acq",
    "p_max_occupancy",
];

/// One S10 run of `column` (of `kind`) on `server`: the herd in this process, then spread
/// over `HERD_PROCESSES` child processes, each with a holder of its own.
pub async fn run(
    kind: Kind,
    column: &Arc<dyn Column>,
    server: &RedisServer,
    key: &str,
) -> Result<Metrics, String> {
    let mut metrics = Metrics::new();
    // In this process.
    let mut holder = Holder::start(kind, server, key).await?;
    LOCAL.inside.store(0, Ordering::SeqCst);
    LOCAL.max_inside.store(0, Ordering::SeqCst);
    let waiters = Waiters::start(column, key, HERD_WAITERS, &LOCAL).await;
    let before = server.commandstats();
    let released = holder.release().await?;
    let served = waiters.served(cap(kind)).await?;
    let commands = lock_commands(&before, &server.commandstats());
    let max_inside = LOCAL.max_inside.load(Ordering::SeqCst);
    figures(&mut metrics, ONE, &served, released, commands, max_inside)?;
    // Over child processes.
    let key = format!("{key}:p");
    let occupancy = std::env::temp_dir().join(format!(
        "distlock-bench-herd-{}-{}",
        std::process::id(),
        key.replace(':', "-")
    ));
    std::fs::write(&occupancy, [0u8; std::mem::size_of::<Occupancy>()])
        .map_err(|e| format!("{}: {e}", occupancy.display()))?;
    let spread = processes(kind, server, &key, &occupancy).await;
    let max_inside = read_max_inside(&occupancy);
    let _ = std::fs::remove_file(&occupancy);
    let (served, released, commands) = spread?;
    figures(
        &mut metrics,
        SPREAD,
        &served,
        released,
        commands,
        max_inside?,
    )?;
    Ok(metrics)
}

/// The herd over child processes: served timestamps, the release's, and the commands.
async fn processes(
    kind: Kind,
    server: &RedisServer,
    key: &str,
    occupancy: &std::path::Path,
) -> Result<(Vec<u64>, u64, u64), String> {
    let mut holder = Holder::start(kind, server, key).await?;
    let mut children = Vec::with_capacity(HERD_PROCESSES);
    for _ in 0..HERD_PROCESSES {
        let child = Child::spawn(&[
            WAITERS_FLAG,
            kind.name(),
            &server.url(),
            key,
            &(HERD_WAITERS / HERD_PROCESSES).to_string(),
            &occupancy.display().to_string(),
        ])?;
        children.push(child);
    }
    for child in &mut children {
        child.expect("waiting").await?;
    }
    let before = server.commandstats();
    let released = holder.release().await?;
    for child in &mut children {
        child.say("released")?;
    }
    let mut served = Vec::with_capacity(HERD_WAITERS);
    for child in &mut children {
        let line = child.line().await?;
        let theirs: Vec<u64> =
            serde_json::from_str(&line).map_err(|e| format!("waiters said `{line}`: {e}"))?;
        served.extend(theirs);
    }
    let commands = lock_commands(&before, &server.commandstats());
    Ok((served, released, commands))
}

/// The most waiters inside at once across the child processes, from their shared file.
fn read_max_inside(path: &std::path::Path) -> Result<usize, String> {
    let counters = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let word = std::mem::size_of::<usize>();
    counters
        .get(word..2 * word)
        .and_then(|b| b.try_into().ok())
        .map(usize::from_ne_bytes)
        .ok_or_else(|| "occupancy file too short".to_owned())
}

/// A herd's figures under `names`, from the served timestamps and the release's.
fn figures(
    metrics: &mut Metrics,
    names: [&'static str; 7],
    served: &[u64],
    released: u64,
    commands: u64,
    max_inside: usize,
) -> Result<(), String> {
    if served.is_empty() {
        return Err("no waiter was served".to_owned());
    }
    let mut after_ms: Vec<f64> = served
        .iter()
        .map(|&at| at.saturating_sub(released) as f64 / 1e6)
        .collect();
    after_ms.sort_by(f64::total_cmp);
    let last_ms = after_ms[after_ms.len() - 1];
    let values = [
        served.len() as f64,
        after_ms[0],
        after_ms[after_ms.len() / 2],
        last_ms,
        served.len() as f64 / (last_ms / 1e3),
        commands as f64 / served.len() as f64,
        max_inside as f64,
    ];
    metrics.extend(names.into_iter().zip(values));
    Ok(())
}

/// The process holding the lock the herd waits for.
struct Holder(Child);

impl Holder {
    async fn start(kind: Kind, server: &RedisServer, key: &str) -> Result<Holder, String> {
        let mut child = Child::spawn(&[CHILD_FLAG, kind.name(), &server.url(), key])?;
        child.expect("held").await?;
        Ok(Holder(child))
    }

    /// Releases; the holder's CLOCK_MONOTONIC just before its release call.
    async fn release(&mut self) -> Result<u64, String> {
        self.0.say("release")?;
        let line = self.0.line().await?;
        line.strip_prefix("released ")
            .and_then(|ns| ns.parse().ok())
            .ok_or_else(|| format!("holder said `{line}`"))
    }
}

/// The waiting tasks of one process.
struct Waiters {
    tasks: Vec<tokio::task::JoinHandle<Result<Option<u64>, String>>>,
    stop: StopOnDrop,
}

impl Waiters {
    /// `count` tasks waiting for `key`; returns once each has made its first attempt.
    async fn start(
        column: &Arc<dyn Column>,
        key: &str,
        count: usize,
        occupancy: &'static Occupancy,
    ) -> Waiters {
        let started = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let tasks = (0..count)
            .map(|_| {
                let (column, key) = (Arc::clone(column), key.to_owned());
                let (started, mut stopped) = (Arc::clone(&started), stopped.clone());
                tokio::spawn(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let held = tokio::select! {
                        held = column.acquire(&key, Duration::from_secs(600)) => held?,
                        _ = stopped.wait_for(|stop| *stop) => return Ok(None),
                    };
                    let served = monotonic_ns();
                    occupancy.enter();
                    // Inside for a moment: a second holder now would be seen.
                    tokio::task::yield_now().await;
                    occupancy.leave();
                    held.release().await?;
                    Ok(Some(served))
                })
            })
            .collect();
        while started.load(Ordering::SeqCst) < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(SETTLE).await;
        Waiters {
            tasks,
            // Whatever fails from here on, no waiter outlives the run.
            stop: StopOnDrop(stop),
        }
    }

    /// When each waiter was served, waiting at most `cap` (from now, the release): then the
    /// ones still waiting give up.
    async fn served(self, cap: Duration) -> Result<Vec<u64>, String> {
        let Waiters { tasks, stop } = self;
        let count = tasks.len();
        let all_done = async move {
            let mut served = Vec::with_capacity(count);
            for task in tasks {
                if let Some(at) = task.await.map_err(|e| e.to_string())?? {
                    served.push(at);
                }
            }
            Ok::<_, String>(served)
        };
        tokio::pin!(all_done);
        tokio::select! {
            served = &mut all_done => served,
            () = tokio::time::sleep(cap) => {
                let _ = stop.0.send(true);
                all_done.await
            }
        }
    }
}

/// Tells the waiters still waiting to give up when dropped.
struct StopOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// The herd in the bench process, then over 4 processes ("4 procs").
pub const ROWS: &[RowSpec] = &[
    row("S10", "1 process: served (of 10,000)", "served", Fmt::Count),
    row(
        "S10",
        "1 process: release → first, ms",
        "first_ms",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "1 process: release → half, ms",
        "median_ms",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "1 process: release → last, ms",
        "last_ms",
        Fmt::Ratio,
    ),
    row("S10", "1 process: served / s", "served_per_s", Fmt::Rate),
    row(
        "S10",
        "1 process: commands / acq",
        "cmds_per_acq",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "1 process: max occupancy",
        "max_occupancy",
        Fmt::Count,
    ),
    row("S10", "4 procs × 2,500: served", "p_served", Fmt::Count),
    row(
        "S10",
        "4 procs: release → first, ms",
        "p_first_ms",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "4 procs: release → half, ms",
        "p_median_ms",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "4 procs: release → last, ms",
        "p_last_ms",
        Fmt::Ratio,
    ),
    row("S10", "4 procs: served / s", "p_served_per_s", Fmt::Rate),
    row(
        "S10",
        "4 procs: commands / acq",
        "p_cmds_per_acq",
        Fmt::Ratio,
    ),
    row(
        "S10",
        "4 procs: max occupancy",
        "p_max_occupancy",
        Fmt::Count,
    ),
];

pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S10",
        metric: "served",
        goal: "= 10,000 (every waiter served)",
        source: Source::Correctness,
        every_column: false,
        judge: |r, k| absolute(r, k, "S10", "served", |v| v == HERD_WAITERS as f64),
        ahead: None,
    },
    TargetSpec {
        scenario: "S10",
        metric: "max_occupancy",
        goal: "= 1",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S10", "max_occupancy", |v| v == 1.0),
        ahead: None,
    },
    TargetSpec {
        scenario: "S10",
        metric: "p_served",
        goal: "= 10,000 (every waiter served)",
        source: Source::Correctness,
        every_column: false,
        judge: |r, k| absolute(r, k, "S10", "p_served", |v| v == HERD_WAITERS as f64),
        ahead: None,
    },
    TargetSpec {
        scenario: "S10",
        metric: "p_max_occupancy",
        goal: "= 1",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S10", "p_max_occupancy", |v| v == 1.0),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S10: on the single node, for distlock and rslock, in two halves per round. First, all in the bench process: a child process of the bench binary connects the column on its own and takes the lock (ttl 10 s); 10,000 tasks of the bench process call `acquire` on it through the column's shared client (wait 600 s); 500 ms after the last task started, the bench tells the holder to release. Then spread over processes: a new holder likewise, and 4 child processes with 2,500 waiting tasks each (each its own column client, warmed up by one cycle on a key of its own), the holder told to release 500 ms after every process's last task started. The holder reads CLOCK_MONOTONIC just before its release call, each waiter just after its acquire returns, and releases at once (it yields once to the scheduler inside). release → first/half/last: from the release to those waiters served (the median waiter for half); served: how many were served (rslock: within 10 s of the release); commands / acq: `INFO commandstats` delta from just before the release to the last waiter served, over the waiters served (Lua calls count, as in S3). distlock's waiters wait until the last is served (at most 60 s); rslock's poll, so 10 s after the release those still waiting give up and the figure is how many were served by then. max occupancy: waiters inside at once (an in-process counter; across the 4 processes, one in a file they all map, as in S3x). redlock, distributed-lock-redis and limit are n/a (see the row's reason).",
];
