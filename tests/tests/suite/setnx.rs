//! The `setnx` lock against real redis-server processes.

use std::time::{Duration, Instant};

use crate::common;

use common::{as_other_owner, client, contend_across_processes, fence_key, lock_key, spawn_holder};
use distlock::Error;
use distlock_testkit::{wait_until_async, Observer, RedisServer};
use redis::AsyncCommands;

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    conn.pttl(key).await.expect("PTTL")
}

/// Polls until the key is gone: expiry is the event, and Redis has no notification for it
/// without enabling keyspace events on the server.
async fn until_expired(conn: &redis::aio::MultiplexedConnection, key: &str) {
    let gone = wait_until_async(Duration::from_secs(10), || {
        let mut c = conn.clone();
        async move { pttl(&mut c, key).await == -2 }
    })
    .await;
    assert!(gone, "{key} did not expire");
}

#[tokio::test]
async fn second_owner_is_refused_until_release() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let a = locks.lock("res").try_acquire().await.expect("free lock");
    assert!(a.is_held());
    let busy = as_other_owner(locks.lock("res").try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(busy, Error::Busy { ref name } if name == "res"),
        "{busy}"
    );
    assert!(busy.is_retryable());
    let timeout = as_other_owner(locks.lock("res").wait(Duration::from_millis(100)).acquire())
        .await
        .unwrap_err();
    match timeout {
        Error::Timeout { attempts, .. } => assert!(attempts > 1, "waited with retries"),
        other => panic!("expected a timeout, got {other}"),
    }
    a.release().await.expect("release");
    let b = as_other_owner(locks.lock("res").try_acquire())
        .await
        .expect("free after release");
    b.release().await.expect("release");
}

#[tokio::test]
async fn the_same_task_asking_again_fails_at_once_instead_of_deadlocking() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks.lock("self").try_acquire().await.expect("free");
    let started = Instant::now();
    let err = locks
        .lock("self")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Reentrant { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it did not wait on itself"
    );
    held.release().await.expect("release");
    // Released: the same task may take it again.
    locks
        .lock("self")
        .try_acquire()
        .await
        .expect("free again")
        .release()
        .await
        .expect("release");
}

#[tokio::test]
async fn fencing_tokens_increase_with_every_acquisition() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut last = distlock::FencingToken::new(0);
    for i in 0..6 {
        // Acquisitions without a token in between leave the order of the tokens alone.
        if i % 2 == 1 {
            let plain = locks.lock("fenced").try_acquire().await.expect("free");
            assert_eq!(plain.fencing_token(), None);
            plain.release().await.expect("release");
        }
        let g = locks
            .lock("fenced")
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let token = g.fencing_token().expect("fencing(true)");
        assert!(token > last, "{token} after {last}");
        last = token;
        g.release().await.expect("release");
    }
}

/// Without fencing (the default) a setnx lock is one plain `SET .. NX PX .. GET`: no token,
/// no fencing counter written, and no script run to take it.
#[tokio::test]
async fn no_fencing_by_default_no_counter_no_script() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    // Loads the release script, so that the counts below see no `NOSCRIPT` round.
    let warm = locks.lock("warm").try_acquire().await.expect("free");
    warm.release().await.expect("release");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("CONFIG RESETSTAT");
    for _ in 0..3 {
        let g = locks.lock("plain").try_acquire().await.expect("free");
        assert_eq!(g.fencing_token(), None);
        g.release().await.expect("release");
    }
    let counter: bool = raw.exists(fence_key("plain")).await.expect("EXISTS");
    assert!(!counter, "a fencing counter was written without fencing");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let calls = |cmd: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(calls("set"), 3, "{stats}");
    assert_eq!(calls("incr"), 0, "{stats}");
    // Only the three releases ran a script, beside the process record's write (one script
    // call with one HSET, `nodes/record.lua`). A server without `SET .. NX .. GET` (Redis
    // 6.2) has the acquire script take the lock for a caller that does not wait
    // (docs/deployments.md, "Server versions"): its `SET` is counted above, and the script too.
    let acquire_scripts = if common::has_set_nx_get(&server) {
        0
    } else {
        3
    };
    assert_eq!(
        calls("evalsha") + calls("eval") - calls("hset"),
        3 + acquire_scripts,
        "{stats}"
    );
}

#[tokio::test]
async fn an_expired_lock_is_free_and_its_old_holder_cannot_release_the_new_one() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let old = locks
        .lock("lease")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    until_expired(&raw, &lock_key("lease")).await;
    assert!(
        !old.is_held(),
        "the guard's own clock also says the lease ran out"
    );
    let new = as_other_owner(locks.lock("lease").try_acquire())
        .await
        .expect("an expired lock is free");
    let before = dump(&raw, &lock_key("lease")).await;
    let release = old.release().await.unwrap_err();
    assert!(matches!(release, Error::NotOwner { .. }), "{release}");
    assert_eq!(
        dump(&raw, &lock_key("lease")).await,
        before,
        "the new holder's lock is intact"
    );
    new.release().await.expect("the new holder releases");
}

/// The stored token decides, not the guard's belief: a holder whose lock was replaced behind
/// its back (its local lease still running) has its extend and release refused by the scripts.
#[tokio::test]
async fn a_wrong_token_cannot_extend_or_release_and_leaves_the_key_intact() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let mut stale = locks
        .lock("swap")
        .ttl(Duration::from_secs(10))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    let _: () = raw.del(lock_key("swap")).await.expect("DEL");
    let new = as_other_owner(locks.lock("swap").try_acquire())
        .await
        .expect("free after the delete");
    assert!(stale.is_held(), "locally the stale lease still runs");
    let before = dump(&raw, &lock_key("swap")).await;
    let ttl_before = pttl(&mut raw, &lock_key("swap")).await;

    let extend = stale.extend(Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(extend, Error::LeaseLost { .. }), "{extend}");
    assert!(!stale.is_held(), "a refused extend marks the lease lost");
    let release = stale.release().await.unwrap_err();
    assert!(matches!(release, Error::NotOwner { .. }), "{release}");

    assert_eq!(dump(&raw, &lock_key("swap")).await, before);
    let ttl_after = pttl(&mut raw, &lock_key("swap")).await;
    assert!(
        ttl_after <= ttl_before && ttl_after > 0,
        "not extended by the stale holder"
    );
    new.release().await.expect("the new holder releases");
}

async fn dump(conn: &redis::aio::MultiplexedConnection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP")
        .arg(key)
        .query_async(&mut conn.clone())
        .await
        .expect("DUMP")
}

#[tokio::test]
async fn extend_renews_the_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let mut g = locks
        .lock("ext")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    g.extend(Duration::from_secs(60)).await.expect("still ours");
    assert!(pttl(&mut raw, &lock_key("ext")).await > 50_000);
    assert!(g.remaining() > Duration::from_secs(50));
    g.release().await.expect("release");
    assert_eq!(pttl(&mut raw, &lock_key("ext")).await, -2);
}

#[tokio::test]
async fn dropping_a_guard_releases_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    drop(locks.lock("dropped").try_acquire().await.expect("free"));
    // The release runs in a spawned task; waiting for the lock is waiting for that event.
    let again = locks
        .lock("dropped")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("released by drop, well before the 30 s ttl");
    again.release().await.expect("release");
}

/// At least 2 processes x 4 tasks contend on one key; every critical section is checked by an
/// occupancy probe and a non-atomic counter on a separate observer server. Without fencing
/// (the default): every acquisition is the plain `SET .. NX PX .. GET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_processes() {
    let server = RedisServer::start();
    contend_across_processes("setnx", &server.url(), 2_000).await;
}

/// The same with fencing tokens (the acquire script): the observer's fence also checks that
/// every token is larger than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_fencing_across_processes() {
    let server = RedisServer::start();
    contend_across_processes("setnx+fenced", &server.url(), 1_000).await;
}

/// The probe itself can fail: without a lock, overlapping sections are seen and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_the_probe_sees_unlocked_overlap() {
    let observer_server = RedisServer::start();
    let observer = Observer::connect(&observer_server.url(), "control").await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let o = observer.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    o.enter().await;
                    o.bump(Duration::from_micros(200)).await;
                    o.exit().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert!(observer.violations().await > 0);
    assert!(observer.counter().await < observer.acked().await);
}

/// A holder killed with SIGKILL never releases: the lock frees when its ttl runs out, not before.
#[tokio::test]
async fn killed_holder_frees_the_lock_after_its_ttl_not_before() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let (mut holder, _) = spawn_holder("setnx", &server.url(), "crash", 1500);
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap holder");

    let asked = Instant::now();
    let left = pttl(&mut raw, &lock_key("crash")).await;
    assert!(left > 0, "the lock outlives its dead holder until the ttl");
    let expires_no_earlier_than = asked + Duration::from_millis(left as u64);

    let busy = locks.lock("crash").try_acquire().await.unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");

    let g = locks
        .lock("crash")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("free after the ttl");
    // PTTL is whole milliseconds, rounded down: allow one.
    assert!(
        Instant::now() + Duration::from_millis(1) >= expires_no_earlier_than,
        "acquired before the dead holder's ttl ran out"
    );
    g.release().await.expect("release");
}

/// What the boxed rare paths and the hand-written futures buy: the futures every acquisition
/// and release moves stay within a budget, so a change that inflates them (a large state held
/// across an `.await`, an unboxed rare branch) fails here rather than in the benchmark.
#[tokio::test]
async fn the_acquire_and_release_futures_stay_within_their_budget() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let acquire = std::mem::size_of_val(&locks.lock("size").acquire());
    let try_acquire = std::mem::size_of_val(&locks.lock("size").try_acquire());
    let guard = locks.lock("size").try_acquire().await.expect("free");
    let release = std::mem::size_of_val(
        &locks
            .lock("other")
            .try_acquire()
            .await
            .expect("free")
            .release(),
    );
    let sizes = format!("acquire {acquire} B, try_acquire {try_acquire} B, release {release} B");
    assert!(acquire <= 4096 && try_acquire <= 4096, "{sizes}");
    assert!(release <= 1152, "{sizes}");
    drop(guard);
}
