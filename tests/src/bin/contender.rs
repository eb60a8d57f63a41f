//! A lock user in its own OS process, for the multi-process tests.
//!
//! ```text
//! contender mutex KIND URL OBSERVER NAME TASKS TARGET  # contend until the observer counts TARGET sections
//! contender herd KIND URL OBSERVER NAME WAITERS HOLD_MS  # WAITERS tasks each take the lock once
//! contender hold KIND URL NAME TTL_MS                  # take the lock, print HELD <token>, wait to be killed
//! contender wait KIND URL NAME TTL_MS                  # wait for the lock (60 s), print HELD <token>, wait to be killed
//! contender spread KIND URL OBSERVER PREFIX LOCKS TASKS SECONDS  # TASKS tasks on locks PREFIX-0..LOCKS
//! contender rw URL OBSERVER NAME READERS WRITERS SECONDS  # readers and writers of one read/write lock
//! contender elect URL OBSERVER NAME TTL_MS             # a candidate of the election NAME (below)
//! contender permits KIND URL OBSERVER NAME TASKS TARGET  # semaphore holders until the observer counts TARGET sections
//! contender transfer URL BANK ACCOUNTS TASKS TRANSFERS  # TASKS tasks each make TRANSFERS transfers
//! ```
//! KIND is `setnx` or `reentrant`, with `+fenced` appended to take every lock with a fencing
//! token (`LockRequest::fencing`); URL may list several comma-separated URLs for a quorum,
//! `cluster:URL,URL,..` for a Redis Cluster, `sentinel:MASTER@URL,URL,..` for Sentinel. Every critical section enters the observer's occupancy
//! probe, bumps its non-atomic counter and presents its fencing token to its fence.
//!
//! KIND may also be `read` or `write` (the two sides of a read/write lock). In `rw` mode the
//! writers use the observer name `<NAME>-w` and the readers a probe of their own, `<NAME>-r`;
//! each side counts entries that find the other side inside (`Observer::enter_excluding`).
//!
//! In `elect` mode the process campaigns, prints `LEAD <term>` when it leads, then acts as
//! leader every few milliseconds while its lease lasts (`Observer::lead`, with the term and the
//! deadline its lease gives), until `lost()` resolves (`LOST <term>`, then it campaigns
//! again) or a `resign` line comes on stdin (`RESIGNED <term>`, then it waits for a
//! `campaign` line).
//! KIND may also be `semaphore:N` (a semaphore of N permits). In `permits` mode each section
//! also enters the process's own occupancy probe: the process exits with an error if it ever
//! counted more than N of its tasks inside, and the observer's `max_occupancy` counts the
//! holders of every process together.

use std::io::Write;
use std::time::{Duration, Instant};

use distlock::{Client, FencingToken, Guard, LockRequest};
use distlock_testkit::Observer;

/// A process gives up after this long even if the target was not reached, so a broken lock
/// cannot hang the test suite; the test then fails on the count.
const MAX_RUN: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["mutex", kind, url, observer, name, tasks, target] => {
            let locks = connect(url).await;
            let observer = Observer::connect(observer, name).await;
            mutex(
                &locks,
                kind,
                &observer,
                number(tasks),
                number(target) as u64,
            )
            .await;
        }
        ["herd", kind, url, observer, name, waiters, hold_ms] => {
            let locks = connect(url).await;
            let observer = Observer::connect(observer, name).await;
            let hold = Duration::from_millis(number(hold_ms) as u64);
            herd(&locks, kind, &observer, number(waiters), hold).await;
        }
        ["rw", url, observer, name, readers, writers, seconds] => {
            let locks = connect(url).await;
            let run_for = Duration::from_secs(number(seconds) as u64);
            let sections = rw(
                &locks,
                observer,
                name,
                number(readers),
                number(writers),
                run_for,
            )
            .await;
            println!("DONE {sections}");
        }
        ["permits", kind, url, observer, name, tasks, target] => {
            let locks = connect(url).await;
            let observer = Observer::connect(observer, name).await;
            permits(
                &locks,
                kind,
                &observer,
                number(tasks),
                number(target) as u64,
            )
            .await;
        }
        ["spread", kind, url, observer, prefix, locks, tasks, seconds] => {
            let locks_client = connect(url).await;
            let names: Vec<String> = (0..number(locks))
                .map(|i| format!("{prefix}-{i}"))
                .collect();
            let mut observers = Vec::new();
            for name in &names {
                observers.push(Observer::connect(observer, name).await);
            }
            let run_for = Duration::from_secs(number(seconds) as u64);
            let sections = spread(&locks_client, kind, observers, number(tasks), run_for).await;
            println!("DONE {sections}");
        }
        ["elect", url, observer, name, ttl_ms] => {
            let locks = connect(url).await;
            let observer = Observer::connect(observer, name).await;
            let ttl = Duration::from_millis(number(ttl_ms) as u64);
            elect(&locks, &observer, ttl).await;
        }
        ["transfer", url, bank, accounts, tasks, transfers] => {
            let locks = connect(url).await;
            let bank = distlock_testkit::Bank::open(bank, number(accounts), 1000).await;
            // A transfer that fails (its locks not had within the minute it waits: a
            // deadlock, say) fails the process.
            let done = bank
                .random_transfers(&locks, number(tasks), number(transfers))
                .await
                .unwrap_or_else(|e| panic!("a transfer failed: {e}"));
            println!("DONE {done}");
        }
        ["hold", kind, url, name, ttl_ms] => {
            let locks = connect(url).await;
            let ttl = Duration::from_millis(number(ttl_ms) as u64);
            hold(&locks, kind, name, ttl, None).await;
        }
        ["wait", kind, url, name, ttl_ms] => {
            let locks = connect(url).await;
            let ttl = Duration::from_millis(number(ttl_ms) as u64);
            hold(&locks, kind, name, ttl, Some(MAX_RUN)).await;
        }
        _ => {
            eprintln!("usage: see the doc comment of tests/src/bin/contender.rs");
            std::process::exit(2);
        }
    }
}

fn number(s: &str) -> usize {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a number"))
}

/// One URL: a single-node client; several, comma-separated: a quorum client. The quorum
/// client has no restart guard: the tests run contenders on servers they just started and
/// restart none of them, and the guard would keep such young servers out for its delay.
async fn connect(url: &str) -> Client {
    if let Some(seeds) = url.strip_prefix("cluster:") {
        return Client::cluster(seeds.split(','))
            .await
            .expect("connect to the cluster");
    }
    if let Some(rest) = url.strip_prefix("sentinel:") {
        let (master, sentinels) = rest.split_once('@').expect("sentinel:MASTER@URL,..");
        return Client::sentinel(sentinels.split(','), master)
            .await
            .expect("connect through the sentinels");
    }
    if url.contains(',') {
        Client::quorum_builder(url.split(','))
            .restart_delay(Duration::ZERO)
            .connect()
            .await
            .expect("connect to the quorum")
    } else {
        Client::connect(url)
            .await
            .expect("connect to the lock server")
    }
}

fn request<'c>(locks: &'c Client, kind: &str, name: &str) -> LockRequest<'c> {
    let (kind, fenced) = match kind.strip_suffix("+fenced") {
        Some(kind) => (kind, true),
        None => (kind, false),
    };
    let request = match kind {
        "setnx" => locks.lock(name),
        "reentrant" => locks.reentrant(name),
        "read" => locks.read(name),
        "write" => locks.write(name),
        other => match other.strip_prefix("semaphore:") {
            Some(permits) => locks.semaphore(name, number(permits) as u32),
            None => panic!("unknown lock kind {other:?}"),
        },
    };
    request.fencing(fenced)
}

/// One critical section, checked by the observer.
async fn section(observer: &Observer, guard: &Guard, pause: Duration) {
    observer.enter().await;
    if let Some(token) = guard.fencing_token() {
        observer.fence(token).await;
    }
    observer.bump(pause).await;
    observer.exit().await;
}

async fn mutex(locks: &Client, kind: &str, observer: &Observer, tasks: usize, target: u64) {
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locks, observer, kind) = (locks.clone(), observer.clone(), kind.to_owned());
        handles.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while observer.acked().await < target && started.elapsed() < MAX_RUN {
                let guard = request(&locks, &kind, observer.name())
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                section(&observer, &guard, Duration::from_micros(100)).await;
                guard.release().await.expect("release a held lock");
                sections += 1;
            }
            sections
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("contender task");
    }
    println!("DONE {total}");
}

/// Tasks that take permits of the semaphore `kind` (`semaphore:N`) until the observer counts
/// `target` sections, each section inside the observer's probe and the process's own.
async fn permits(locks: &Client, kind: &str, observer: &Observer, tasks: usize, target: u64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let limit = kind
        .split('+')
        .next()
        .and_then(|k| k.strip_prefix("semaphore:"))
        .map(number)
        .expect("KIND is semaphore:N");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locks, observer, kind) = (locks.clone(), observer.clone(), kind.to_owned());
        let (inside, most) = (inside.clone(), most.clone());
        handles.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while observer.acked().await < target && started.elapsed() < MAX_RUN {
                let guard = request(&locks, &kind, observer.name())
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                let here = inside.fetch_add(1, Ordering::AcqRel) + 1;
                most.fetch_max(here, Ordering::AcqRel);
                observer.enter().await;
                // Long enough that the holders of both processes overlap.
                tokio::time::sleep(Duration::from_millis(2)).await;
                observer.exit().await;
                inside.fetch_sub(1, Ordering::AcqRel);
                observer.bump(Duration::ZERO).await;
                guard.release().await.expect("release a held permit");
                sections += 1;
            }
            sections
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("permit task");
    }
    let most = most.load(Ordering::Acquire);
    if most > limit {
        eprintln!("{most} tasks of this process held one of {limit} permits at once");
        std::process::exit(1);
    }
    println!("DONE {total}");
}

/// Tasks that each take a random lock of `observers` (one per lock name) again and again for
/// `run_for`; returns the sections completed.
async fn spread(
    locks: &Client,
    kind: &str,
    observers: Vec<Observer>,
    tasks: usize,
    run_for: Duration,
) -> u64 {
    let started = Instant::now();
    let observers = std::sync::Arc::new(observers);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locks, observers, kind) = (locks.clone(), observers.clone(), kind.to_owned());
        handles.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while started.elapsed() < run_for {
                let observer = &observers[rand::random_range(0..observers.len())];
                let guard = request(&locks, &kind, observer.name())
                    .ttl(Duration::from_secs(5))
                    .wait(MAX_RUN)
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                section(observer, &guard, Duration::from_micros(100)).await;
                guard.release().await.expect("release a held lock");
                sections += 1;
            }
            sections
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("spread task");
    }
    total
}

async fn herd(locks: &Client, kind: &str, observer: &Observer, waiters: usize, hold: Duration) {
    let mut handles = Vec::new();
    for _ in 0..waiters {
        let (locks, observer, kind) = (locks.clone(), observer.clone(), kind.to_owned());
        handles.push(tokio::spawn(async move {
            let guard = request(&locks, &kind, observer.name())
                .wait(MAX_RUN)
                .acquire()
                .await
                .expect("every waiter is served within the wait");
            section(&observer, &guard, hold).await;
            guard.release().await.expect("release a held lock");
        }));
    }
    for h in handles {
        h.await.expect("herd task");
    }
    println!("DONE {waiters}");
}

/// How long a reader stays inside: long enough that readers of both processes overlap.
const READ_HOLD: Duration = Duration::from_millis(3);
/// A writer's pause between two writes. Writers are preferred, so writers that never paused
/// would keep the readers out for the whole run (the policy's documented price).
const WRITER_THINK: Duration = Duration::from_millis(15);

/// Runs reader and writer tasks on one read/write lock for `run_for`; returns the sections
/// completed.
async fn rw(
    locks: &Client,
    observer_url: &str,
    name: &str,
    readers: usize,
    writers: usize,
    run_for: Duration,
) -> u64 {
    let (read_probe, write_probe) = (format!("{name}-r"), format!("{name}-w"));
    let started = Instant::now();
    let mut handles = Vec::new();
    for i in 0..readers + writers {
        let writer = i >= readers;
        let (mine, other) = if writer {
            (&write_probe, &read_probe)
        } else {
            (&read_probe, &write_probe)
        };
        let observer = Observer::connect(observer_url, mine).await;
        let (locks, name, other) = (locks.clone(), name.to_owned(), other.clone());
        handles.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while started.elapsed() < run_for {
                let request = if writer {
                    locks.write(&name)
                } else {
                    locks.read(&name)
                };
                let guard = request
                    .ttl(Duration::from_secs(5))
                    .wait(MAX_RUN)
                    .fencing(true)
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                observer.enter_excluding(&other).await;
                if writer {
                    let token = guard.fencing_token().expect("fencing(true)");
                    observer.fence(token).await;
                    observer.bump(Duration::from_micros(100)).await;
                } else {
                    tokio::time::sleep(READ_HOLD).await;
                }
                observer.exit().await;
                guard.release().await.expect("release a held lock");
                sections += 1;
                if writer {
                    tokio::time::sleep(WRITER_THINK).await;
                }
            }
            sections
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("rw task");
    }
    total
}

async fn hold(locks: &Client, kind: &str, name: &str, ttl: Duration, wait: Option<Duration>) {
    let request = request(locks, kind, name).ttl(ttl);
    let guard = match wait {
        // A waiting writer registers its intent: killed while it waits, it is a crashed
        // writer whose intent lapses in silence.
        Some(wait) => request
            .wait(wait)
            .acquire()
            .await
            .expect("the lock comes free"),
        None => request.try_acquire().await.expect("the lock is free"),
    };
    // 0: taken without a fencing token.
    println!(
        "HELD {}",
        guard.fencing_token().map_or(0, FencingToken::get)
    );
    std::io::stdout().flush().expect("flush stdout");
    // Hold until killed: the test kills this process with SIGKILL, so no release runs.
    std::future::pending::<()>().await;
}

/// How often a leader acts.
const LEADER_TICK: Duration = Duration::from_millis(5);

/// A candidate, then leader, of the election named after the observer (see the module doc).
async fn elect(locks: &Client, observer: &Observer, ttl: Duration) {
    use tokio::io::AsyncBufReadExt;

    let me = std::process::id().to_string();
    let election = locks.election(observer.name()).ttl(ttl);
    let mut commands = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let say = |line: String| {
        println!("{line}");
        std::io::stdout().flush().expect("flush stdout");
    };
    loop {
        let leadership = election.campaign().await.expect("campaign");
        let term = leadership.term();
        say(format!("LEAD {term}"));
        enum Event {
            Lost,
            Resign,
            Tick,
        }
        loop {
            let event = tokio::select! {
                _ = leadership.lost() => Event::Lost,
                line = commands.next_line() => match line.expect("read stdin").as_deref() {
                    Some("resign") => Event::Resign,
                    // The test ended (stdin closed) or said something else.
                    _ => std::process::exit(0),
                },
                () = tokio::time::sleep(LEADER_TICK) => Event::Tick,
            };
            match event {
                Event::Lost => {
                    say(format!("LOST {term}"));
                    break;
                }
                Event::Resign => {
                    leadership.resign().await.expect("resign");
                    say(format!("RESIGNED {term}"));
                    match commands.next_line().await.expect("read stdin").as_deref() {
                        Some("campaign") => break,
                        _ => std::process::exit(0),
                    }
                }
                Event::Tick => {
                    // The clock first: a stop between the two reads leaves a deadline before
                    // the stop (the lease read after it is zero), never one after it.
                    let now = std::time::SystemTime::now();
                    let left = leadership.remaining();
                    if !left.is_zero() {
                        observer.lead(term, &me, now + left).await;
                    }
                }
            }
        }
    }
}
