//! S10: a herd. A holder in a child process of this binary (the hidden `--herd-holder`
//! argument) takes one lock and keeps it; `HERD_WAITERS` tasks of the bench process then wait
//! for it on the column's own client. When every waiter has made its first attempt, the parent
//! tells the holder to release, and each waiter, once served, releases at once. The figures:
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
//! `released <CLOCK_MONOTONIC ns just before its release call>`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_testkit::RedisServer;

use crate::columns::{Column, Kind, FENCED_ONLY};
use crate::report::{absolute, row, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::{Metrics, Occupancy};

/// The hidden first argument that turns the binary into the herd's holder.
pub const CHILD_FLAG: &str = "--herd-holder";

/// Tasks waiting for the one lock.
pub const HERD_WAITERS: usize = 10_000;
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
    match run_child(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run_child(args: &[String]) -> Result<(), String> {
    let [kind, url, key] = args else {
        return Err(format!(
            "usage: bench {CHILD_FLAG} <column> <redis url> <key>"
        ));
    };
    let kind = Kind::from_name(kind).ok_or_else(|| format!("unknown column `{kind}`"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async {
        let column = kind.connect(std::slice::from_ref(url)).await?;
        let held = column.acquire(key, Duration::from_secs(10)).await?;
        say("held")?;
        let mut line = String::new();
        let read = tokio::task::spawn_blocking(move || {
            std::io::stdin().read_line(&mut line).map(|n| (n, line))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("stdin: {e}"))?;
        if read.0 == 0 {
            return Err("the parent closed stdin before `release`".to_owned());
        }
        let at = monotonic_ns();
        held.release().await?;
        say(&format!("released {at}"))
    })
}

fn say(line: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// One S10 run of `column` (of `kind`) on `server`: holder started, waiters waiting, release,
/// the waiters served (or the cap reached).
pub async fn run(
    kind: Kind,
    column: &Arc<dyn Column>,
    server: &RedisServer,
    key: &str,
) -> Result<Metrics, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut holder = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(kind.name())
        .arg(server.url())
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning the holder: {e}"))?;
    let result = herd(kind, column, server, key, &mut holder).await;
    // Done already unless something failed first; reaped in every case.
    let _ = holder.kill();
    let _ = tokio::task::spawn_blocking(move || holder.wait()).await;
    result
}

async fn herd(
    kind: Kind,
    column: &Arc<dyn Column>,
    server: &RedisServer,
    key: &str,
    holder: &mut std::process::Child,
) -> Result<Metrics, String> {
    let mut lines = BufReader::new(holder.stdout.take().ok_or("holder stdout")?);
    let (held, lines_back) = read_line(lines).await?;
    lines = lines_back;
    if held != "held" {
        return Err(format!("holder said `{held}`"));
    }

    let started = Arc::new(AtomicUsize::new(0));
    let occupancy = Arc::new(Occupancy::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Whatever fails from here on, no waiter outlives the run.
    let stop = StopOnDrop(stop);
    let waiters: Vec<_> = (0..HERD_WAITERS)
        .map(|_| {
            let (column, key) = (Arc::clone(column), key.to_owned());
            let (started, occupancy, mut stopped) = (
                Arc::clone(&started),
                Arc::clone(&occupancy),
                stopped.clone(),
            );
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
                Ok::<_, String>(Some(served))
            })
        })
        .collect();
    while started.load(Ordering::SeqCst) < HERD_WAITERS {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(SETTLE).await;

    let before = server.commandstats();
    let stdin = holder.stdin.as_mut().ok_or("holder stdin")?;
    stdin
        .write_all(b"release\n")
        .and_then(|()| stdin.flush())
        .map_err(|e| format!("holder stdin: {e}"))?;
    let (released, _) = read_line(lines).await?;
    let released: u64 = released
        .strip_prefix("released ")
        .and_then(|ns| ns.parse().ok())
        .ok_or_else(|| format!("holder said `{released}`"))?;

    // The cap counts from the release; then the waiters still waiting give up.
    let all_done = async {
        let mut served = Vec::with_capacity(HERD_WAITERS);
        for waiter in waiters {
            if let Some(at) = waiter.await.map_err(|e| e.to_string())?? {
                served.push(at);
            }
        }
        Ok::<_, String>(served)
    };
    tokio::pin!(all_done);
    let served = tokio::select! {
        served = &mut all_done => served?,
        () = tokio::time::sleep(cap(kind)) => {
            let _ = stop.0.send(true);
            all_done.await?
        }
    };
    let commands = crate::scenarios::lock_commands(&before, &server.commandstats());
    if served.is_empty() {
        return Err("no waiter was served".to_owned());
    }
    let mut after_ms: Vec<f64> = served
        .iter()
        .map(|&at| at.saturating_sub(released) as f64 / 1e6)
        .collect();
    after_ms.sort_by(f64::total_cmp);
    let last_ms = after_ms[after_ms.len() - 1];
    Ok(Metrics::from([
        ("served", served.len() as f64),
        ("first_ms", after_ms[0]),
        ("median_ms", after_ms[after_ms.len() / 2]),
        ("last_ms", last_ms),
        ("served_per_s", served.len() as f64 / (last_ms / 1e3)),
        ("cmds_per_acq", commands as f64 / served.len() as f64),
        (
            "max_occupancy",
            occupancy.max_inside.load(Ordering::SeqCst) as f64,
        ),
    ]))
}

/// Tells the waiters still waiting to give up when dropped.
struct StopOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// The next line from the holder, read on a blocking thread.
async fn read_line<R: BufRead + Send + 'static>(mut reader: R) -> Result<(String, R), String> {
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => Err("the holder exited".to_owned()),
            Ok(_) => Ok((line.trim().to_owned(), reader)),
            Err(e) => Err(format!("holder stdout: {e}")),
        }
    })
    .await
    .map_err(|e| e.to_string())?
}

pub const ROWS: &[RowSpec] = &[
    row(
        "S10",
        "waiters served (of 10,000; rslock: within 10 s of the release)",
        "served",
        Fmt::Count,
    ),
    row("S10", "release → first served, ms", "first_ms", Fmt::Ratio),
    row("S10", "release → half served, ms", "median_ms", Fmt::Ratio),
    row("S10", "release → last served, ms", "last_ms", Fmt::Ratio),
    row(
        "S10",
        "served / s (served ÷ release → last)",
        "served_per_s",
        Fmt::Rate,
    ),
    row(
        "S10",
        "commands/acq (commandstats, incl. Lua calls, release → last)",
        "cmds_per_acq",
        Fmt::Ratio,
    ),
    row("S10", "max occupancy", "max_occupancy", Fmt::Count),
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
        every_column: false,
        judge: |r, k| absolute(r, k, "S10", "max_occupancy", |v| v == 1.0),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S10: on the single node, for distlock and rslock: a child process of the bench binary connects the column on its own and takes the lock (ttl 10 s); 10,000 tasks of the bench process then call `acquire` on it through the column's shared client (wait 600 s). 500 ms after the last task started, the bench tells the holder to release; the holder reads CLOCK_MONOTONIC just before its release call, each waiter just after its acquire returns, and releases at once (no hold). release → first/half/last served: those timestamps' differences (the median waiter for half); commands/acq: `INFO commandstats` delta from just before the release to the last waiter served, over the waiters served (Lua calls count, as in S3). distlock's waiters wait until the last is served (at most 60 s); rslock's waiters poll, so at 10 s after the release those still waiting give up and the figure is how many were served by then. max occupancy: waiters inside at once (an in-process counter). redlock, distributed-lock-redis and limit are n/a (see the row's reason).",
];
