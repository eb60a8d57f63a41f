//! The read/write lock's wake-ups: a waiting writer is woken when the last reader leaves, and
//! waiting readers when the writer leaves. Every test here runs with the test hook
//! `wake_ups_only` on (process-wide, so this binary holds only such tests): a waiter's sleep
//! ends by a wake-up or with its whole wait, never at its cap (for a writer, its next renewal
//! of its intent), so a missed wake-up fails (a timeout, or an acquisition served only by its
//! last attempt at the end of its whole wait: `served`) instead of costing a pause.

use distlock_testkit::common;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{as_other_owner, client};
use distlock::{Client, Error};
use distlock_testkit::{wait_until_async, RedisServer};
use rand::Rng;

/// A waiter's whole wait: with the hook on, only a missed wake-up reaches it.
const WAIT: Duration = Duration::from_secs(20);
/// Leases far longer than any test: no lease ends while a waiter waits for a release.
const TTL: Duration = Duration::from_secs(120);

/// A server and a client with the hook on.
async fn start() -> (RedisServer, Client) {
    distlock::__test_hooks::wake_ups_only(true);
    let server = RedisServer::start();
    let locks = client(&server).await;
    (server, locks)
}

/// Holds the thread for `d`: a short critical section, or a delay that moves a release
/// around the waiter's steps (a different moment each round, not a synchronisation).
fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Awaits an acquisition that waits up to `WAIT`. Under the hook a waiter that missed its
/// wake-up sleeps out its whole wait and then makes one last attempt, which gets in once the
/// lock is free: an acquisition served only then missed its wake-up all the same.
async fn served(
    acquire: impl std::future::Future<Output = Result<distlock::Guard, Error>>,
) -> Result<distlock::Guard, String> {
    let started = Instant::now();
    let guard = acquire.await.map_err(|e| e.to_string())?;
    let waited = started.elapsed();
    if waited >= WAIT {
        return Err(format!(
            "served only by its last attempt, after its whole wait ({waited:?})"
        ));
    }
    Ok(guard)
}

/// A task that waits for the write lock of `name` (as its own owner) and gives it back once it
/// has it.
fn spawn_writer(locks: &Client, name: &'static str) -> tokio::task::JoinHandle<Result<(), String>> {
    let locks = locks.clone();
    tokio::spawn(async move {
        let g = served(locks.write(name).ttl(TTL).wait(WAIT).acquire()).await?;
        g.release().await.expect("release");
        Ok(())
    })
}

/// Round after round, a reader holds, a writer of the same client comes to wait (busy:
/// it registers its intent, subscribes, tries again, sleeps), and the reader leaves at a
/// different moment each round. The last reader's release must wake the writer wherever it
/// lands among those steps: it used to be missed when it came between the writer's busy
/// answer and its sleep, and the writer slept until it renewed its intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_is_woken_by_the_last_readers_release() {
    let (_server, locks) = start().await;
    for round in 0..400u32 {
        let reader = locks
            .read("w-after-r")
            .ttl(TTL)
            .try_acquire()
            .await
            .expect("free");
        let writer = spawn_writer(&locks, "w-after-r");
        spin(Duration::from_micros(rand::rng().random_range(0..1500)));
        reader.release().await.expect("release");
        match writer.await.expect("writer task") {
            Ok(()) => {}
            Err(e) => panic!("round {round}: the writer missed the last reader's release: {e}"),
        }
    }
}

/// Two readers with leases of different lengths leave, in one order and then the other, while
/// a writer waits: only the last one's release wakes it. A reader leaving among others asks
/// the server for no latest lease when the hash's expiry tells another reader's is later
/// (`settle` in `rwlock/prelude.lua`); were that inferred wrongly, the last reader would leave
/// in silence and the writer wait out its whole wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_readers_with_different_leases_wakes_the_waiting_writer() {
    let (server, locks) = start().await;
    let raw = server.async_connection().await;
    for round in 0..40u32 {
        let (longer, shorter) = (TTL, TTL / 2);
        let mut readers = Vec::new();
        for ttl in [longer, shorter] {
            let read = locks.read("w-after-two").ttl(ttl).try_acquire();
            readers.push(as_other_owner(read).await.expect("readers share"));
        }
        let writer = spawn_writer(&locks, "w-after-two");
        let waiting =
            wait_until_async(WAIT, || async { intents(&raw, "w-after-two").await > 0 }).await;
        assert!(waiting, "round {round}: the writer registered no intent");
        if round % 2 == 1 {
            readers.reverse();
        }
        for reader in readers {
            reader.release().await.expect("release");
        }
        let last = if round % 2 == 1 { "longer" } else { "shorter" };
        if let Err(e) = writer.await.expect("writer task") {
            panic!(
                "round {round} (the {last} lease left last): the writer missed the last \
                 reader's release: {e}"
            );
        }
    }
}

/// The mirror image: a writer holds, readers of the same client come to wait, and the writer
/// leaves at a different moment each round. Its release lets every reader in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_readers_are_woken_by_the_writers_release() {
    let (_server, locks) = start().await;
    for round in 0..300u32 {
        let writer = locks
            .write("r-after-w")
            .ttl(TTL)
            .try_acquire()
            .await
            .expect("free");
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let g = served(locks.read("r-after-w").ttl(TTL).wait(WAIT).acquire()).await?;
                    g.release().await.expect("release");
                    Ok::<(), String>(())
                })
            })
            .collect();
        spin(Duration::from_micros(rand::rng().random_range(0..1500)));
        writer.release().await.expect("release");
        for reader in readers {
            if let Err(e) = reader.await.expect("reader task") {
                panic!("round {round}: a reader missed the writer's release: {e}");
            }
        }
    }
}

/// The mix of issue 29 (8 tasks on one name, 9 reads to 1 write, short holds), in two
/// processes so that waiters of both hear each release: every acquisition is served by
/// wake-ups alone, and no writer ever shares the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_mix_is_served_by_wake_ups_alone() {
    let (server, locks) = start().await;
    let processes = [locks, client(&server).await];
    // Readers inside count up; a writer inside sets a large negative value.
    let inside = Arc::new(AtomicI64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..8usize {
        let locks: Client = processes[t % 2].clone();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.spawn(async move {
            for n in 0..150usize {
                if (n + t) % 10 == 0 {
                    let g = served(locks.write("mix").ttl(TTL).wait(WAIT).acquire()).await?;
                    if inside.swap(-1_000_000, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    spin(Duration::from_micros(200));
                    inside.store(0, Ordering::SeqCst);
                    g.release().await.expect("release");
                } else {
                    let g = served(locks.read("mix").ttl(TTL).wait(WAIT).acquire()).await?;
                    if inside.fetch_add(1, Ordering::SeqCst) < 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    spin(Duration::from_micros(100));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }
            Ok::<(), String>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.expect("task") {
            panic!("an acquisition was not served by a wake-up: {e}");
        }
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a writer shared the lock"
    );
}

/// A crowd of writers of one client arrives while another client holds the write lock: they
/// queue behind the first one's attempt and sleep until the release, costing the server a few
/// commands, not one attempt each. (A waiter that queued on arrival counts the releases that
/// wake all, not the subscription the first one makes: counting that too sent the whole crowd
/// to attempt at once.) Then the release serves them all, each writer's release waking one
/// more (waking all of them made serving n writers cost about n * n / 2 attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_writers_queues_quietly_behind_one_attempt() {
    const CROWD: usize = 100;
    let (server, holder) = start().await;
    let locks = client(&server).await;
    let held = holder
        .write("herd")
        .ttl(TTL)
        .try_acquire()
        .await
        .expect("free");
    let commands = || -> u64 {
        let mut stats = server.commandstats();
        for reading in ["info", "hello", "client|setinfo"] {
            stats.remove(reading);
        }
        stats.values().sum()
    };
    let before = commands();
    let writers: Vec<_> = (0..CROWD)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let g = served(locks.write("herd").ttl(TTL).wait(WAIT).acquire()).await?;
                g.release().await.expect("release");
                Ok::<(), String>(())
            })
        })
        .collect();
    // Long enough for every writer to have arrived and gone to sleep (an exposure, not a
    // synchronisation: a burst would come within it).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = commands() - before;
    println!("{CROWD} writers: {used} server commands while the lock was held");
    assert!(
        used < CROWD as u64 / 4,
        "{used} server commands for {CROWD} writers that queued"
    );
    let before = commands();
    held.release().await.expect("release");
    for w in writers {
        w.await.expect("task").expect("every writer is served");
    }
    // Each writer's release wakes one waiting writer here, not all of them.
    let serving = commands() - before;
    println!("{CROWD} writers: {serving} server commands to serve them all");
    assert!(
        serving < (CROWD * 50) as u64,
        "{serving} server commands to serve {CROWD} writers"
    );
}

/// A writer's single try that finds a reader inside records no intent, so a new reader still
/// comes straight in: the intent of a writer that does not come back kept new readers out for
/// up to min(ttl, 2 s), and nothing wakes a waiting reader when an intent lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_single_try_keeps_no_reader_out() {
    let (_server, locks) = start().await;
    let a = locks
        .read("try")
        .ttl(TTL)
        .try_acquire()
        .await
        .expect("free");
    let busy = as_other_owner(locks.write("try").ttl(TTL).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let b = as_other_owner(locks.read("try").ttl(TTL).try_acquire())
        .await
        .expect("a writer that tried once keeps no new reader out");
    b.release().await.expect("release");
    a.release().await.expect("release");
}

/// Intents of waiting writers on `name` (the sorted set beside the lock; its placeholder
/// member, scored 0, left out).
async fn intents(raw: &redis::aio::MultiplexedConnection, name: &str) -> i64 {
    redis::cmd("ZCOUNT")
        .arg(common::intents_key(name))
        .arg("(0")
        .arg("+inf")
        .query_async(&mut raw.clone())
        .await
        .expect("ZCOUNT")
}

/// A waiting writer keeps new readers out with its intent. When it gives up (its wait runs
/// out, or its future is dropped), it withdraws the intent and wakes them. Before, the intent
/// lapsed by itself (its ttl, at most 2 s, after the writer's last attempt) with nothing to
/// announce it: with the hook on, the reader kept out then sleeps its whole wait and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_withdraws_its_intent_and_wakes_the_readers() {
    let (server, locks) = start().await;
    let raw = server.async_connection().await;
    let inside = locks
        .read("quit")
        .ttl(TTL)
        .try_acquire()
        .await
        .expect("free");
    for dropped in [false, true] {
        let writer = {
            let locks = locks.clone();
            tokio::spawn(as_other_owner(async move {
                let waiting = locks
                    .write("quit")
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_millis(if dropped { 5_000 } else { 800 }))
                    .acquire();
                if dropped {
                    tokio::time::timeout(Duration::from_millis(800), waiting)
                        .await
                        .map_or_else(|_| "dropped".to_owned(), |r| format!("{r:?}"))
                } else {
                    format!("{:?}", waiting.await)
                }
            }))
        };
        let waits = wait_until_async(WAIT, || async { intents(&raw, "quit").await > 0 }).await;
        assert!(waits, "dropped: {dropped}: no writer intent appeared");
        // A new reader (another owner) is kept out by the intent.
        let reader = {
            let locks = locks.clone();
            tokio::spawn(as_other_owner(async move {
                served(locks.read("quit").wait(WAIT).acquire()).await
            }))
        };
        let outcome = writer.await.expect("writer task");
        assert!(
            outcome == "dropped" || outcome.contains("Timeout"),
            "the writer: {outcome}"
        );
        let g = reader
            .await
            .expect("reader task")
            .unwrap_or_else(|e| panic!("dropped: {dropped}: the reader was never woken: {e}"));
        assert_eq!(intents(&raw, "quit").await, 0, "dropped: {dropped}");
        g.release().await.expect("release");
    }
    inside.release().await.expect("release");
}
