//! `Client::shutdown`: a service that stops gives back every lock it holds, ends the waits in
//! progress, lets the releases already on their way finish, and leaves no task behind.

use crate::common;

use std::time::Duration;

use common::{channel, client, lock_key, subscribers};
use distlock::{distributed_lock, Client, Error};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};
use redis::AsyncCommands;

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

async fn exists(server: &RedisServer, name: &str) -> bool {
    let mut raw = server.async_connection().await;
    raw.exists(lock_key(name)).await.expect("EXISTS")
}

/// Every mode's held lock is released, a waiter's wait ends with `ShutDown`, the guards say
/// the lease is lost, nothing new is taken, and once the client is dropped no task of it is
/// left.
#[tokio::test]
async fn shutdown_releases_held_locks_ends_waits_and_leaves_no_task() {
    let server = RedisServer::start();
    let before = alive_tasks();
    let locks = client(&server).await;
    let setnx = locks.lock("held").try_acquire().await.expect("free");
    let reentrant = locks.reentrant("re").try_acquire().await.expect("free");
    let read = locks.read("rw").try_acquire().await.expect("free");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("held")
                .wait(Duration::from_secs(600))
                .acquire()
                .await
        }
    });
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscribers(&server, &channel("held")).await >= 1
    })
    .await;
    assert!(parked, "the waiter never subscribed");
    drop(locks.lock("dropped").try_acquire().await.expect("free"));

    let report = locks.shutdown(Duration::from_secs(30)).await;
    assert_eq!(report.released, 3, "{report:?}");
    assert!(report.is_complete(), "{report:?}");
    for name in ["held", "re", "rw", "dropped"] {
        assert!(!exists(&server, name).await, "{name} is still held");
    }
    assert_eq!(locks.list().await.expect("list"), Vec::<String>::new());
    let waited = waiter.await.expect("the waiter's task");
    assert!(
        matches!(waited, Err(Error::ShutDown { ref name }) if name == "held"),
        "{waited:?}"
    );
    // Its subscription was given up before `shutdown` returned.
    assert_eq!(subscribers(&server, &channel("held")).await, 0);

    for guard in [&setnx, &reentrant, &read] {
        assert!(!guard.is_held(), "{guard:?}");
    }
    let lost = setnx.lost().await;
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    let released = setnx.release().await;
    assert!(
        matches!(released, Err(Error::LeaseLost { .. })),
        "{released:?}"
    );

    let again = locks.lock("new").try_acquire().await;
    assert!(matches!(again, Err(Error::ShutDown { .. })), "{again:?}");
    let waited = locks
        .clone()
        .lock("new")
        .wait(Duration::from_secs(1))
        .acquire()
        .await;
    assert!(matches!(waited, Err(Error::ShutDown { .. })), "{waited:?}");
    assert!(!exists(&server, "new").await);
    let twice = locks.shutdown(Duration::from_secs(1)).await;
    assert!(twice.is_complete() && twice.released == 0, "{twice:?}");

    drop((reentrant, read, locks));
    let gone = wait_until_async(Duration::from_secs(10), || async {
        alive_tasks() == before
    })
    .await;
    assert!(gone, "{} tasks left", alive_tasks().saturating_sub(before));
}

/// A release a dropped guard sent in the background, still on its way when `shutdown` is
/// called, has reached Redis when `shutdown` returns.
#[tokio::test]
async fn shutdown_waits_for_the_releases_on_their_way() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    let guard = locks.lock("slow").try_acquire().await.expect("free");
    // Every byte from now on takes a while each way.
    proxy.latency(Duration::from_millis(300), Duration::ZERO);
    drop(guard);
    let report = locks.shutdown(Duration::from_secs(30)).await;
    assert!(report.is_complete(), "{report:?}");
    assert!(
        !exists(&server, "slow").await,
        "shutdown returned before the background release arrived"
    );
}

/// Redis going silent bounds the wait, not the other way round: `shutdown` returns when its
/// time is up and says what it could not confirm.
#[tokio::test]
async fn a_silent_server_bounds_nothing_but_the_report() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let guard = locks.lock("silent").try_acquire().await.expect("free");
    proxy.blackhole(true);
    let report = locks.shutdown(Duration::from_millis(200)).await;
    assert_eq!(report.unconfirmed, 1, "{report:?}");
    assert!(!report.is_complete());
    assert!(!guard.is_held());
    proxy.blackhole(false);
}

/// A lock kept for its minimum hold is not released early, and its timer does not hold up
/// the shutdown.
#[tokio::test]
async fn a_minimum_hold_outlives_the_shutdown() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let guard = locks
        .lock("job")
        .ttl(Duration::from_secs(60))
        .min_hold(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    guard.release().await.expect("kept");
    let report = locks.shutdown(Duration::from_secs(20)).await;
    assert!(report.is_complete(), "{report:?}");
    assert!(
        exists(&server, "job").await,
        "released before its minimum hold"
    );
}

#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e)
    }
}

/// Set once `endless`'s body runs (under its lock).
static ENDLESS_RUNS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[distributed_lock(key = "job:<id>", client = locks, ttl = "5s")]
async fn endless(locks: &Client, id: u32) -> Result<(), AppError> {
    let _ = id;
    ENDLESS_RUNS.store(true, std::sync::atomic::Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

/// A locked fn whose body runs when the client shuts down is cancelled, and reports the
/// lease lost: its work stopped part-way.
#[tokio::test]
async fn a_locked_fn_running_at_shutdown_is_cancelled_with_its_lease_lost() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let call = tokio::spawn({
        let locks = locks.clone();
        async move { endless(&locks, 7).await }
    });
    // The body runs (the key on the server alone is not enough: the guard may still be on its
    // way to the client, and a shutdown then ends the acquisition instead).
    let running = wait_until_async(Duration::from_secs(10), || async {
        ENDLESS_RUNS.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    assert!(running, "the fn's body never ran");
    assert!(exists(&server, "job:7").await);
    let report = locks.shutdown(Duration::from_secs(30)).await;
    assert_eq!(report.released, 1, "{report:?}");
    let outcome = call.await.expect("the call's task");
    assert!(
        matches!(outcome, Err(AppError::Lock(Error::LeaseLost { .. }))),
        "{outcome:?}"
    );
    assert!(!exists(&server, "job:7").await);
}

/// On a quorum, the lock is released on every node.
#[tokio::test]
async fn a_quorum_client_releases_on_every_node() {
    let servers = RedisServers::start(3);
    let locks = Client::quorum_builder(servers.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let _guard = locks.lock("q").try_acquire().await.expect("free");
    let report = locks.shutdown(Duration::from_secs(30)).await;
    assert!(report.is_complete() && report.released == 1, "{report:?}");
    for server in servers.iter() {
        assert!(!exists(server, "q").await);
    }
}

/// An election's leader is taken back like any lock (its `lost()` resolves) and observers of
/// the client stop: their receivers see the sender gone.
#[tokio::test]
async fn a_leader_and_the_observers_end_with_the_client() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let election = locks.election("leader");
    let leadership = election.campaign().await.expect("nobody else runs");
    let mut observed = election.observe().await.expect("observe");
    let report = locks.shutdown(Duration::from_secs(30)).await;
    assert!(report.is_complete() && report.released == 1, "{report:?}");
    leadership.lost().await;
    assert!(!leadership.is_leader());
    assert!(
        observed.changed().await.is_err(),
        "the observer outlived the client"
    );
    assert!(!exists(&server, "leader").await);
    assert!(matches!(
        election.observe().await,
        Err(Error::ShutDown { .. })
    ));
}
