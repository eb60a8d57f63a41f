//! Inspection on a quorum reads every node at once, each within the node timeout, and reports
//! the lock as a majority of the nodes reads it: a node gone silent costs an operator's
//! `inspect`, `force_unlock` or `list` the node timeout, not the connection's response timeout
//! nor the whole call, and a hold that a minority of nodes keeps (an attempt that lost, a
//! leftover) is not reported as the holder nor listed.

use crate::common;

use std::time::Duration;

use distlock::testing::lock_state;
use distlock::{Client, Error};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};

/// Fails the test, naming `what`, if `f` does not finish within 20 s: a call that hangs.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

/// A quorum client's node timeout by default, with a response timeout above it.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// A quorum client over `urls` whose connections wait two minutes for an answer (so only the
/// node timeout can end a read of a silent node early), every node voting at once.
async fn quorum(urls: Vec<String>) -> Client {
    Client::quorum_builder(urls)
        .response_timeout(Duration::from_secs(120))
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect")
}

/// Writes the lock `name` on `server` as another owner's setnx hold for a minute.
async fn held_by_another(server: &RedisServer, name: &str, owner: &str) {
    let mut conn = server.async_connection().await;
    let _: () = redis::cmd("SET")
        .arg(common::lock_key(name))
        .arg(owner)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("SET");
}

/// The first node blackholed (connections open, nothing answers): `inspect` reads the other
/// two and reports the holder, and `force_unlock` removes the lock from them, each within
/// about the node timeout. (The nodes were read one after another without the node timeout:
/// both waited on the silent node for the connection's two minutes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_costs_inspection_the_node_timeout_only() {
    let servers = RedisServers::start(3);
    let proxy = FaultProxy::start(&servers[0].addr()).expect("fault proxy");
    let mut urls = servers.urls();
    urls[0] = proxy.url();
    let locks = quorum(urls).await;
    let guard = locks.lock("silent").try_acquire().await.expect("free");

    proxy.blackhole(true);
    let state = within("inspect", lock_state(&locks, "silent"))
        .await
        .expect("a majority answers");
    assert!(state.is_held_by(&guard), "{:?}", state.info());

    let removed = within("force_unlock", locks.force_unlock("silent", "a test"))
        .await
        .expect("a majority answers");
    assert!(removed);
    for server in servers.iter().skip(1) {
        assert_eq!(common::pttl(server, "silent").await, -2, "still on a node");
    }
    proxy.blackhole(false);
    drop(guard);
}

/// The first node holds the lock for another owner, the other two for this client's guard:
/// inspection reports the guard's hold, which a majority keeps. (The first node that found it
/// held was reported: the owner without a majority.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_reports_the_holder_a_majority_keeps() {
    let servers = RedisServers::start(3);
    held_by_another(&servers[0], "split", "intruder").await;
    let locks = quorum(servers.urls()).await;
    let guard = locks
        .lock("split")
        .try_acquire()
        .await
        .expect("a majority is free");

    let state = lock_state(&locks, "split").await.expect("inspect");
    assert!(state.is_held_by(&guard), "{:?}", state.info());
    guard.release().await.expect("release");
}

/// A hold left on one node of three, the other two free: the lock is free as the quorum sees
/// it (anyone can take a majority), and inspection says so. (It reported the leftover.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_on_a_minority_is_not_reported() {
    let servers = RedisServers::start(3);
    held_by_another(&servers[0], "leftover", "left-behind").await;
    let locks = quorum(servers.urls()).await;

    let info = locks.inspect("leftover").await.expect("inspect");
    assert!(!info.is_held(), "{info:?}");
    let guard = locks.lock("leftover").try_acquire().await.expect("free");
    guard.release().await.expect("release");
}

/// The first node blackholed: `list` scans the other two at once and answers within about the
/// node timeout with the locks a majority holds: the guard's lock, not a leftover that one
/// node keeps. (A node that did not answer failed the whole listing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_leaves_the_listing_to_the_majority() {
    let servers = RedisServers::start(3);
    let proxy = FaultProxy::start(&servers[0].addr()).expect("fault proxy");
    let mut urls = servers.urls();
    urls[0] = proxy.url();
    let locks = quorum(urls).await;
    let guard = locks.lock("listed").try_acquire().await.expect("free");
    // The guard's lock on both nodes that stay: a majority's answers grant it, and on a loaded
    // machine one of those two may answer after the grant (its SET still lands); listed by a
    // majority of what answers below only once it is there.
    for server in [&servers[1], &servers[2]] {
        let direct = Client::connect(&server.url()).await.expect("connect");
        let on_node = wait_until_async(Duration::from_secs(10), || async {
            direct
                .inspect("listed")
                .await
                .is_ok_and(|info| info.is_held())
        })
        .await;
        assert!(on_node, "the guard's lock never reached {}", server.addr());
    }
    held_by_another(&servers[1], "leftover", "left-behind").await;

    proxy.blackhole(true);
    let started = std::time::Instant::now();
    let names = within("list", locks.list())
        .await
        .expect("a majority answers");
    let took = started.elapsed();
    assert_eq!(names, ["listed"]);
    // The node timeout and two round trips, with room for a loaded machine.
    assert!(took < NODE_TIMEOUT * 10, "took {took:?}");
    proxy.blackhole(false);
    guard.release().await.expect("release");
}

/// Two nodes of three blackholed: `list` cannot say what a majority holds, and says so
/// (`QuorumNotReached`, naming the silent nodes) within about the node timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_majority_fails_the_listing_quickly() {
    let servers = RedisServers::start(3);
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .take(2)
        .map(|s| FaultProxy::start(&s.addr()).expect("fault proxy"))
        .collect();
    let mut urls = servers.urls();
    for (url, proxy) in urls.iter_mut().zip(&proxies) {
        *url = proxy.url();
    }
    let locks = quorum(urls).await;
    let guard = locks.lock("listed").try_acquire().await.expect("free");

    proxies.iter().for_each(|p| p.blackhole(true));
    let started = std::time::Instant::now();
    let listed = within("list", locks.list()).await;
    let took = started.elapsed();
    match listed {
        Err(Error::QuorumNotReached {
            acked: 1,
            needed: 2,
            errors,
            ..
        }) => assert_eq!(errors.len(), 2, "{errors:?}"),
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    assert!(took < NODE_TIMEOUT * 10, "took {took:?}");
    proxies.iter().for_each(|p| p.blackhole(false));
    drop(guard);
}
