//! The lost-reply tier: every mode behind a proxy that drops 2 % of the server's replies and
//! resets the connection each time (the request reached the server and changed it; the
//! answer never came back). Each mode runs the same workload without faults, then with them:
//! 0 exclusion violations, 0 lost updates, 0 lock keys left 300 ms after the last release,
//! and at least half the sections per second of the fault-free run. A second half loses only
//! the subscriptions' confirmations, which once left waiters asleep on a connection the server
//! had no subscription on. The figures are printed.

use distlock_testkit::common;

use std::time::{Duration, Instant};

use common::assert_safe;
use distlock::{Client, Guard, LockRequest};
use distlock_testkit::{wait_until_async, FaultProxy, Observer, RedisServer};

/// Tasks per run, spread over `KEYS` locks and two clients (two connections through the
/// proxy, as two processes would have).
const TASKS: usize = 8;
const KEYS: usize = 2;
/// How long each run lasts, and how many clean and lossy runs alternate per mode.
const RUN: Duration = Duration::from_secs(1);
const ROUNDS: usize = 3;
const DROP: f64 = 0.02;
/// A RESP3 `SUBSCRIBE` confirmation (a push frame), which the second half of the tier loses.
const SUBSCRIBED: &[u8] = b"$9\r\nsubscribe\r\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Without fencing: the plain `SET .. NX PX .. GET`, whose lost replies the next attempt
    /// recognises by its own value.
    Setnx,
    /// With fencing: the acquire script.
    SetnxFenced,
    /// Takes the lock and re-enters it once inside (with fencing).
    Reentrant,
    /// With fencing.
    Write,
    /// Half the tasks read, half write (without fencing).
    ReadWrite,
    /// Two tasks read for one that writes (without fencing): readers and writers wait on each
    /// other's wake-ups, which lost subscription replies used to cut off for good.
    ReadMostly,
}

impl Mode {
    fn shared(self) -> bool {
        matches!(self, Mode::ReadWrite | Mode::ReadMostly)
    }

    /// Whether task `i` of a run takes the exclusive side.
    fn writes(self, i: usize) -> bool {
        match self {
            Mode::ReadWrite => i % 4 >= 2,
            Mode::ReadMostly => i % 3 == 2,
            _ => true,
        }
    }
}

#[derive(Debug, Default)]
struct Figures {
    sections: u64,
    errors: u64,
    elapsed: Duration,
}

impl Figures {
    fn add(&mut self, other: Figures) {
        self.sections += other.sections;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
    }

    fn per_second(&self) -> f64 {
        self.sections as f64 / self.elapsed.as_secs_f64()
    }
}

fn request<'c>(locks: &'c Client, mode: Mode, writer: bool, name: &str) -> LockRequest<'c> {
    let request = match mode {
        Mode::Setnx => locks.lock(name),
        Mode::SetnxFenced => locks.lock(name).fencing(true),
        Mode::Reentrant => locks.reentrant(name).fencing(true),
        Mode::Write => locks.write(name).fencing(true),
        Mode::ReadWrite | Mode::ReadMostly if writer => locks.write(name),
        Mode::ReadWrite | Mode::ReadMostly => locks.read(name),
    };
    request
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(20))
}

/// One critical section, checked by the observers of its lock.
async fn section(mode: Mode, writer: bool, guard: &Guard, mine: &Observer, other: &Observer) {
    if mode.shared() {
        mine.enter_excluding(other.name()).await;
    } else {
        mine.enter().await;
    }
    if writer {
        if let Some(token) = guard.fencing_token() {
            mine.fence(token).await;
        }
        mine.bump(Duration::ZERO).await;
    }
    mine.exit().await;
}

/// The observers of lock `k`: the exclusive side's probe and the readers' probe.
fn probes(prefix: &str, k: usize) -> (String, String) {
    (format!("{prefix}-{k}-w"), format!("{prefix}-{k}-r"))
}

async fn run(clients: &[Client], observer_url: &str, mode: Mode, prefix: &str) -> Figures {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..TASKS {
        let locks = clients[i % clients.len()].clone();
        let k = i % KEYS;
        let name = format!("{prefix}-{k}");
        let writer = mode.writes(i);
        let (w, r) = probes(prefix, k);
        let (mine, other) = if writer { (w, r) } else { (r, w) };
        let mine = Observer::connect(observer_url, &mine).await;
        let other = Observer::connect(observer_url, &other).await;
        tasks.spawn(async move {
            let mut figures = Figures::default();
            while started.elapsed() < RUN {
                let guard = match request(&locks, mode, writer, &name).acquire().await {
                    Ok(guard) => guard,
                    Err(e) => {
                        assert!(e.is_retryable(), "{mode:?}: {e}");
                        figures.errors += 1;
                        continue;
                    }
                };
                let inner = if mode == Mode::Reentrant {
                    match request(&locks, mode, writer, &name).acquire().await {
                        Ok(inner) => {
                            assert_eq!(inner.fencing_token(), guard.fencing_token());
                            Some(inner)
                        }
                        Err(e) => {
                            assert!(e.is_retryable(), "{mode:?}: {e}");
                            figures.errors += 1;
                            None
                        }
                    }
                } else {
                    None
                };
                section(mode, writer, &guard, &mine, &other).await;
                if let Some(inner) = inner {
                    if inner.release().await.is_err() {
                        figures.errors += 1;
                    }
                }
                match guard.release().await {
                    Ok(()) => figures.sections += 1,
                    Err(e) => {
                        assert!(e.is_retryable(), "{mode:?}: {e}");
                        figures.errors += 1;
                    }
                }
            }
            figures
        });
    }
    let mut total = Figures::default();
    while let Some(figures) = tasks.join_next().await {
        let figures = figures.expect("task");
        total.sections += figures.sections;
        total.errors += figures.errors;
    }
    total.elapsed = started.elapsed();
    total
}

/// Lock keys (not fencing counters, records or other helper keys: see `distlock/src/key.rs`)
/// on the server.
async fn lock_keys(server: &RedisServer) -> Vec<String> {
    let mut conn = server.async_connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    keys.into_iter()
        .filter(|k| !k.starts_with("distlock:#"))
        .collect()
}

async fn check(observer_url: &str, mode: Mode, prefix: &str) {
    for k in 0..KEYS {
        let (w, r) = probes(prefix, k);
        let writers = Observer::connect(observer_url, &w).await;
        if mode.shared() {
            let readers = Observer::connect(observer_url, &r).await;
            assert_eq!(
                writers.overlaps().await,
                0,
                "{mode:?}: a writer found readers inside"
            );
            assert_eq!(
                readers.overlaps().await,
                0,
                "{mode:?}: a reader found a writer inside"
            );
        }
        assert_safe(&writers).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_reply_tier_keeps_every_mode_safe_and_fast_with_two_percent_of_replies_lost() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            Client::connect(&proxy.url())
                .await
                .expect("connect through the proxy"),
        );
    }
    let observer_url = observer_server.url();
    let mut report = Vec::new();
    for mode in [
        Mode::Setnx,
        Mode::SetnxFenced,
        Mode::Reentrant,
        Mode::Write,
        Mode::ReadWrite,
        Mode::ReadMostly,
    ] {
        // Clean and lossy runs alternate, so a change in the machine's load (other tests,
        // other processes) weighs on both alike.
        let (mut clean, mut faulty) = (Figures::default(), Figures::default());
        let mut dropped = 0;
        for round in 0..ROUNDS {
            proxy.clear();
            let prefix = format!("clean-{mode:?}-{round}");
            clean.add(run(&clients, &observer_url, mode, &prefix).await);
            check(&observer_url, mode, &prefix).await;
            proxy.drop_replies(DROP);
            let dropped_before = proxy.replies_dropped();
            let prefix = format!("lossy-{mode:?}-{round}");
            faulty.add(run(&clients, &observer_url, mode, &prefix).await);
            dropped += proxy.replies_dropped() - dropped_before;
            let last_release = Instant::now();
            proxy.clear();
            check(&observer_url, mode, &prefix).await;
            // Every hold was released (or is being released in the background): nothing may
            // be left 300 ms after the last release.
            let clean_up = wait_until_async(Duration::from_millis(300), || async {
                lock_keys(&server).await.is_empty()
            })
            .await;
            let left = lock_keys(&server).await;
            assert!(
                clean_up,
                "{mode:?}: keys left {:?} after the last release: {left:?}",
                last_release.elapsed()
            );
        }
        let ratio = faulty.per_second() / clean.per_second();
        report.push(format!(
            "{:<10} clean {:>7.0}/s   2 % replies lost {:>7.0}/s  ({ratio:.2}x; {} replies lost, {} calls failed)",
            format!("{mode:?}"),
            clean.per_second(),
            faulty.per_second(),
            dropped,
            faulty.errors
        ));
        assert!(dropped > 0, "{mode:?}: the proxy dropped nothing");
        assert!(
            ratio >= 0.5,
            "{mode:?}: {:.0}/s with lost replies against {:.0}/s without",
            faulty.per_second(),
            clean.per_second()
        );
    }
    // Only the subscriptions' confirmations lost (each with a reset of its connection): the
    // waiters must still hear the releases on the connection that came back.
    for mode in [Mode::Setnx, Mode::ReadMostly] {
        let (mut clean, mut faulty) = (Figures::default(), Figures::default());
        let mut dropped = 0;
        for round in 0..ROUNDS {
            proxy.clear();
            let prefix = format!("clean-sub-{mode:?}-{round}");
            clean.add(run(&clients, &observer_url, mode, &prefix).await);
            check(&observer_url, mode, &prefix).await;
            proxy.drop_replies_containing(SUBSCRIBED, 0.5);
            let dropped_before = proxy.replies_dropped();
            let prefix = format!("lossy-sub-{mode:?}-{round}");
            faulty.add(run(&clients, &observer_url, mode, &prefix).await);
            dropped += proxy.replies_dropped() - dropped_before;
            proxy.clear();
            check(&observer_url, mode, &prefix).await;
        }
        let ratio = faulty.per_second() / clean.per_second();
        report.push(format!(
            "{:<10} clean {:>7.0}/s   half the SUBSCRIBE confirmations lost {:>7.0}/s  ({ratio:.2}x; {} lost, {} calls failed)",
            format!("{mode:?}"),
            clean.per_second(),
            faulty.per_second(),
            dropped,
            faulty.errors
        ));
        assert!(
            ratio >= 0.5,
            "{mode:?}: {:.0}/s with lost subscription confirmations against {:.0}/s without",
            faulty.per_second(),
            clean.per_second()
        );
    }
    println!("lost-reply tier ({TASKS} tasks, {KEYS} keys, {ROUNDS} alternating rounds of {RUN:?} per condition):");
    for line in report {
        println!("  {line}");
    }
}
