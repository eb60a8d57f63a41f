//! S11: memory per held lock, on the client and on the server, at `COUNTS` locks held.
//!
//! Each count runs in a fresh child process of this binary (the hidden `--memory-child`
//! argument), so nothing an earlier scenario left in the bench process is counted. The child
//! connects a distlock `Client`, warms up, says `ready`; the parent reads the server's
//! `used_memory` and says `go`; the child takes the locks (ttl `S6_TTL`, watchdog on), lets
//! the watchdog renew them once, and reports the growth of its live heap (counted by the
//! binary's global allocator, [`Counting`]) and of its resident set (`VmRSS`) since `go`; the
//! parent reads `used_memory` again and says `release`, on which the child releases every
//! lock and exits.
//!
//! The heap figure is exact (bytes allocated and not freed, the guards the caller keeps
//! included); the RSS figure is what the OS sees (the allocator's arenas and free lists
//! included), so it moves in steps.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};

use distlock_testkit::RedisServer;

use crate::child::{in_runtime, read_stdin_line, say, Child};
use crate::columns::Kind;
use crate::held::TASKS;
use crate::results::{absolute, row, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::{Metrics, S6_TTL};

/// The hidden first argument that turns the binary into S11's child.
pub const CHILD_FLAG: &str = "--memory-child";

/// The counts measured, and the names of their figures (client heap, client RSS, server,
/// all in bytes per lock).
const COUNTS: [(usize, [&str; 3]); 2] = [
    (
        10_000,
        [
            "heap_b_per_lock_10k",
            "rss_b_per_lock_10k",
            "server_b_per_lock_10k",
        ],
    ),
    (
        100_000,
        [
            "heap_b_per_lock_100k",
            "rss_b_per_lock_100k",
            "server_b_per_lock_100k",
        ],
    ),
];

/// The system allocator, counting live bytes once [`COUNTING`] is on (only in S11's child:
/// elsewhere it costs one relaxed load per call), and always the calls that allocate
/// ([`allocations`], for S1's and S2's cost rows).
pub struct Counting;

/// Allocation calls, one counter per thread slot: a single counter's cache line would bounce
/// between the runtime's threads on every allocation, and S2's figures would carry that.
static CALLS: [Slot; SLOTS] = [const { Slot(AtomicU64::new(0)) }; SLOTS];
const SLOTS: usize = 16;
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

#[repr(align(128))]
struct Slot(AtomicU64);

thread_local! {
    // Const-initialised and without a destructor: usable inside the allocator, which must
    // not allocate.
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn count_call() {
    let slot = MY_SLOT
        .try_with(|slot| {
            if slot.get() == usize::MAX {
                slot.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS);
            }
            slot.get()
        })
        .unwrap_or(0);
    CALLS[slot].0.fetch_add(1, Ordering::Relaxed);
}

/// Calls that allocated (`alloc`, `alloc_zeroed`, `realloc`) in this process so far.
pub fn allocations() -> u64 {
    CALLS.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
}

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_call();
        let ptr = System.alloc(layout);
        if !ptr.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_call();
        let ptr = System.alloc_zeroed(layout);
        if !ptr.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_call();
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        new
    }
}

/// The process's resident set, bytes (`VmRSS` of /proc/self/status).
fn rss_bytes() -> Result<i64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<i64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS in /proc/self/status".to_owned())
}

/// What the child measured, bytes since `go`.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChildReport {
    heap: i64,
    rss: i64,
    held: usize,
}

/// The child: `--memory-child <redis url> <key> <locks>`.
pub fn child(args: &[String]) -> ExitCode {
    COUNTING.store(true, Ordering::SeqCst);
    in_runtime(|| take_and_report(args))
}

async fn take_and_report(args: &[String]) -> Result<(), String> {
    let [url, key, locks] = args else {
        return Err(format!(
            "usage: bench {CHILD_FLAG} <redis url> <key> <locks>"
        ));
    };
    let locks: usize = locks.parse().map_err(|e| format!("locks `{locks}`: {e}"))?;
    let client = distlock::Client::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    // Scripts loaded, the watchdog's task and the connections' buffers in place.
    for i in 0..TASKS {
        let guard = client
            .lock(format!("{key}:warmup:{i}"))
            .ttl(S6_TTL)
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        guard.release().await.map_err(|e| e.to_string())?;
    }
    say("ready")?;
    read_stdin_line().await?;
    let (heap_before, rss_before) = (LIVE.load(Ordering::SeqCst), rss_bytes()?);

    let guards = crate::held::take_locks(&client, key, locks).await?;
    // A renewal period and a half: every lease renewed once, the watchdog at rest.
    tokio::time::sleep(S6_TTL / 2).await;
    let report = ChildReport {
        heap: LIVE.load(Ordering::SeqCst) as i64 - heap_before as i64,
        rss: rss_bytes()? - rss_before,
        held: guards.iter().filter(|g| g.is_held()).count(),
    };
    say(&serde_json::to_string(&report).map_err(|e| e.to_string())?)?;
    // The parent has read the server.
    read_stdin_line().await?;
    // Released one by one, which takes a while at 100k: a lease lost meanwhile is not this
    // scenario's figure (S6b's is), so it is only counted on stderr.
    let mut refused = 0;
    for guard in guards {
        if guard.release().await.is_err() {
            refused += 1;
        }
    }
    if refused > 0 {
        eprintln!("S11: {refused} of {locks} releases refused after the measurement");
    }
    Ok(())
}

/// Why `kind` has no S11 figure, if it has none.
pub fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock => None,
        _ => Some("measured for distlock only"),
    }
}

/// S11 on `server`: a child per count; per lock bytes, and the 100k/10k ratios.
pub async fn run(server: &RedisServer, key: &str) -> Result<Metrics, String> {
    let mut metrics = Metrics::new();
    for (locks, names) in COUNTS {
        let key = format!("{key}:{locks}");
        let mut child = Child::spawn(&[CHILD_FLAG, &server.url(), &key, &locks.to_string()])?;
        child.expect("ready").await?;
        let before = used_memory(server)?;
        child.say("go")?;
        let line = child.line().await?;
        let report: ChildReport =
            serde_json::from_str(&line).map_err(|e| format!("memory child said `{line}`: {e}"))?;
        let server_bytes = used_memory(server)? - before;
        child.say("release")?;
        child.wait()?;
        if report.held != locks {
            return Err(format!("{} of {locks} locks held", report.held));
        }
        let per_lock = |bytes: i64| bytes as f64 / locks as f64;
        metrics.insert(names[0], per_lock(report.heap));
        metrics.insert(names[1], per_lock(report.rss));
        metrics.insert(names[2], per_lock(server_bytes));
    }
    for (ratio, [small, big]) in [
        (
            "heap_ratio",
            ["heap_b_per_lock_10k", "heap_b_per_lock_100k"],
        ),
        ("rss_ratio", ["rss_b_per_lock_10k", "rss_b_per_lock_100k"]),
        (
            "server_ratio",
            ["server_b_per_lock_10k", "server_b_per_lock_100k"],
        ),
    ] {
        metrics.insert(ratio, metrics[big] / metrics[small]);
    }
    metrics.insert(
        "guard_size_b",
        std::mem::size_of::<distlock::Guard>() as f64,
    );
    Ok(metrics)
}

fn used_memory(server: &RedisServer) -> Result<i64, String> {
    let info = server.info("memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no used_memory in INFO memory".to_owned())
}

pub const ROWS: &[RowSpec] = &[
    row(
        "S11",
        "client heap B / lock, 10,000 held",
        "heap_b_per_lock_10k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "client heap B / lock, 100,000 held",
        "heap_b_per_lock_100k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "client heap per lock, 100k ÷ 10k",
        "heap_ratio",
        Fmt::Ratio,
    ),
    row(
        "S11",
        "client RSS B / lock, 10,000 held",
        "rss_b_per_lock_10k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "client RSS B / lock, 100,000 held",
        "rss_b_per_lock_100k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "client RSS per lock, 100k ÷ 10k",
        "rss_ratio",
        Fmt::Ratio,
    ),
    row(
        "S11",
        "server used_memory B / lock, 10,000 held",
        "server_b_per_lock_10k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "server used_memory B / lock, 100,000 held",
        "server_b_per_lock_100k",
        Fmt::Rate,
    ),
    row(
        "S11",
        "server per lock, 100k ÷ 10k",
        "server_ratio",
        Fmt::Ratio,
    ),
    row("S11", "size_of::<Guard>(), B", "guard_size_b", Fmt::Count),
];

/// Flat per lock: 100k locks cost at most 1.2× per lock what 10k cost.
pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S11",
        metric: "heap_ratio",
        goal: "≤ 1.2 (flat per lock)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S11", "heap_ratio", |v| v <= 1.2),
        ahead: None,
    },
    TargetSpec {
        scenario: "S11",
        metric: "server_ratio",
        goal: "≤ 1.2 (flat per lock)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S11", "server_ratio", |v| v <= 1.2),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S11: distlock only, on the single node; for 10,000 and then 100,000 locks, a fresh child process of the bench binary connects a `Client`, takes and releases 50 locks (warm-up), then on the parent's word takes the locks from 50 tasks (ttl 3 s, watchdog on; names `bench:S11:distlock:r<round>:<count>:<i>`, 30-35 bytes), keeps the guards in one `Vec`, waits 1.5 s (every lease renewed once) and checks every guard. Client heap: bytes allocated and not freed since the parent's word, counted by the bench binary's global allocator (the system allocator wrapped; it counts only in this child); client RSS: growth of `VmRSS` (/proc/self/status) over the same stretch; server: growth of `INFO memory` `used_memory` from the child's `ready` to its report. All over the locks held, and the 100k figure over the 10k one (flat per lock: 1.0).",
];
