//! The network gone silent, and the subscriptions that waiters count on: connections frozen
//! (no byte passes, nothing closes) are found silent and opened again; subscribe confirmations
//! dropped; a Sentinel master killed. Split from wire.rs, which keeps what answers on the port.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Client, Error};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer};

/// Fails the test, naming `what`, if `f` does not finish within 20 s: a call that hangs.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

/// The lock `name`, taken by a client of its own straight on the server for 60 s.
async fn held_elsewhere(server: &RedisServer, name: &str) -> distlock::Guard {
    common::client(server)
        .await
        .lock(name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("the other client takes it")
}

/// The subscriptions of every connection of `server` to the channels that match `pattern`
/// (a glob): the client's waiters are parked once the lock's channel has one.
async fn subscriptions(server: &RedisServer, pattern: &str) -> i64 {
    let mut conn = server.async_connection().await;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .expect("PUBSUB CHANNELS");
    if channels.is_empty() {
        return 0;
    }
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channels)
        .query_async(&mut conn)
        .await
        .expect("PUBSUB NUMSUB");
    counts.iter().map(|(_, n)| n).sum()
}

/// The network goes silent (every open connection through the proxy frozen: no byte passes,
/// nothing closes): a free lock can be taken again within a few seconds, on new connections.
/// (Requests timed out one by one for ever and no connection was opened again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_reopened() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let guard = client.lock("warm").try_acquire().await.expect("free");
    guard.release().await.expect("release");
    proxy.freeze();
    let frozen = Instant::now();
    let taken = wait_until_async(Duration::from_secs(15), || async {
        match client.lock("after").try_acquire().await {
            Ok(guard) => {
                drop(guard);
                true
            }
            Err(_) => false,
        }
    })
    .await;
    println!("a free lock taken {:?} after the freeze", frozen.elapsed());
    assert!(taken, "no lock taken within 15 s of the freeze");
}

/// A waiter subscribed through the proxy; the proxy freezes, and the holder (another client,
/// straight on the server) releases: the waiter hears of it within a few seconds, long before
/// the holder's lease or its own wait would end. (The subscriptions' connection was never
/// found silent: the waiter slept until its fallback.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_a_release_made_after_a_freeze() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let holder = held_elsewhere(&server, "awaited").await;
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let waiter = spawn_waiter(&client, "awaited");
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscriptions(&server, "*").await > 0
    })
    .await;
    assert!(parked, "the waiter never subscribed");
    proxy.freeze();
    woken_by_the_release(holder, waiter, "frozen").await;
}

/// Renewals go on the first connection: frozen, it is found silent and opened again, and the
/// lease is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_the_lease_across_a_freeze() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let ttl = Duration::from_secs(6);
    let guard = client
        .lock("renewed")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    proxy.freeze();
    let frozen = Instant::now();
    while frozen.elapsed() < 2 * ttl {
        assert!(
            guard.is_held(),
            "the lease was lost {:?} after the freeze",
            frozen.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        common::pttl(&server, "renewed").await > 0,
        "the lock is gone from the server"
    );
    guard.release().await.expect("release");
}

/// The proxy drops a `SUBSCRIBE` confirmation (and resets that connection), round after
/// round, each round a waiter on a lock of its own: each time the waiter's channel is
/// subscribed again on the live connection (the server counts one subscriber), and the release
/// wakes the waiter. (A dropped confirmation made redis-rs reconnect twice, the channel was
/// confirmed on the connection it then discarded, and the client believed it was subscribed
/// while the server had no subscriber: waiters slept until their fallback.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_subscribe_confirmation_leaves_the_channel_subscribed() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let client = Client::connect(&proxy.url()).await.expect("connect");
    for round in 0..6 {
        let name = format!("awaited-{round}");
        let holder = held_elsewhere(&server, &name).await;
        proxy.drop_next_reply_containing(b"$9\r\nsubscribe\r\n");
        let waiter = spawn_waiter(&client, &name);
        let pattern = format!("*{name}*");
        let subscribed = wait_until_async(Duration::from_secs(15), || async {
            proxy.replies_dropped() == round + 1 && subscriptions(&server, &pattern).await == 1
        })
        .await;
        assert!(
            subscribed,
            "round {round}: {} confirmations dropped, {} subscribers",
            proxy.replies_dropped(),
            subscriptions(&server, &pattern).await
        );
        woken_by_the_release(holder, waiter, &format!("round {round}")).await;
    }
}

/// The subscriptions' connection alone is frozen (the acquisitions' connection goes on): it is
/// found silent, the channel is subscribed on a new connection (the server counts the frozen
/// one's subscription and the new one), and the release wakes the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_subscriptions_connection_is_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    proxy.note_sending(b"SUBSCRIBE");
    let holder = held_elsewhere(&server, "awaited").await;
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let waiter = spawn_waiter(&client, "awaited");
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscriptions(&server, "*").await > 0
    })
    .await;
    assert!(parked, "the waiter never subscribed");
    proxy.freeze_noted();
    assert_eq!(proxy.frozen(), 1);
    let again = wait_until_async(Duration::from_secs(15), || async {
        subscriptions(&server, "*").await == 2
    })
    .await;
    assert!(again, "not subscribed again");
    woken_by_the_release(holder, waiter, "frozen").await;
}

/// A task of `client` that waits up to 40 s for the lock `name`, and when it got it.
fn spawn_waiter(client: &Client, name: &str) -> tokio::task::JoinHandle<Result<Instant, Error>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = client
            .lock(&name)
            .wait(Duration::from_secs(40))
            .acquire()
            .await?;
        let at = Instant::now();
        guard.release().await.map(|()| at)
    })
}

/// Releases `holder`'s lock: `waiter` must get it within 10 s (its holder's lease and its own
/// wait are far longer: only the release's message wakes it this soon).
async fn woken_by_the_release(
    holder: distlock::Guard,
    waiter: tokio::task::JoinHandle<Result<Instant, Error>>,
    what: &str,
) {
    let released = Instant::now();
    holder.release().await.expect("release");
    let got = within("the waiter", waiter).await.expect("task");
    let heard = got.map(|at| at - released);
    println!("{what}: the waiter got the lock {heard:?} after the release");
    assert!(
        heard.as_ref().is_ok_and(|d| *d < Duration::from_secs(10)),
        "{what}: {heard:?}"
    );
}

/// 8 tasks of two clients (through the proxy) take turns at 2 locks (hand-off between local
/// tasks off, so every turn is a release heard by a waiter), while the proxy drops half the
/// `SUBSCRIBE` confirmations (resetting the connection each time): no acquisition waits as
/// long as a holder's lease (only a missed wake-up costs that: sections last a millisecond),
/// and the rate stays at least half the fault-free one. (With redis-rs's subscriptions a
/// dropped confirmation could leave a channel the client believed subscribed without a
/// subscriber on the server: waiters slept until the holder's lease or their own wait ran out,
/// 12 s, and the rate fell to a seventh.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_subscribe_confirmations_keep_waiters_woken() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = Client::builder(&proxy.url())
            .local_handoff(0, Duration::ZERO)
            .connect()
            .await
            .expect("connect");
        clients.push(client);
    }
    let ttl = Duration::from_secs(3);
    // Sections per second, and the longest wait for one acquisition.
    let run = |prefix: &'static str| {
        let clients = clients.clone();
        async move {
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..8 {
                let client = clients[i % 2].clone();
                let name = format!("{prefix}-{}", i % 2);
                tasks.spawn(async move {
                    let (mut sections, mut longest) = (0u64, Duration::ZERO);
                    while started.elapsed() < Duration::from_secs(3) {
                        let asked = Instant::now();
                        let acquired = client
                            .lock(&name)
                            .ttl(ttl)
                            .wait(Duration::from_secs(15))
                            .acquire()
                            .await;
                        longest = longest.max(asked.elapsed());
                        if let Ok(guard) = acquired {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            if guard.release().await.is_ok() {
                                sections += 1;
                            }
                        }
                    }
                    (sections, longest)
                });
            }
            let (mut sections, mut longest) = (0, Duration::ZERO);
            while let Some(task) = tasks.join_next().await {
                let (n, wait) = task.expect("task");
                sections += n;
                longest = longest.max(wait);
            }
            (sections as f64 / started.elapsed().as_secs_f64(), longest)
        }
    };
    let (clean, _) = run("clean").await;
    proxy.seed(3);
    proxy.drop_replies_containing(b"$9\r\nsubscribe\r\n", 0.5);
    let (lossy, longest) = run("lossy").await;
    let dropped = proxy.replies_dropped();
    proxy.clear();
    println!(
        "{clean:.0}/s without faults, {lossy:.0}/s with {dropped} confirmations dropped; \
         longest wait {longest:?}"
    );
    assert!(dropped > 0, "no confirmation was dropped");
    assert!(longest < ttl, "an acquisition waited {longest:?}");
    assert!(
        lossy >= clean / 2.0,
        "{lossy:.0}/s with lost confirmations against {clean:.0}/s without"
    );
}

/// Through Sentinel, the master killed: while it is down every `try_acquire` ends within the
/// timeouts it is given (1 s to connect, 1 s per reply; a refused connection is an answer at
/// once), and locking works again soon after the sentinels name the new master. (redis-rs's
/// manager retried the dead address inside a request: calls took up to 1.9 s, and a request
/// queued before the failover finished its retries before the client looked again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_calls_stay_bounded_while_the_master_is_down() {
    let mut deployment = distlock_testkit::RedisSentinel::start_with(1, 3);
    let timeout = Duration::from_secs(1);
    let client = Client::sentinel_builder(deployment.sentinel_urls(), deployment.master_name())
        .connect_timeout(timeout)
        .response_timeout(timeout)
        .connect()
        .await
        .expect("connect through the sentinels");
    drop(client.lock("warm").try_acquire().await.expect("free"));
    let old = deployment.master().expect("a master");
    deployment.server_mut(old).kill();
    let killed = Instant::now();
    let deployment = Arc::new(deployment);
    let watching = deployment.clone();
    let named = tokio::task::spawn_blocking(move || {
        watching.wait_failover(old);
        Instant::now()
    });
    let (mut longest, mut calls) = (Duration::ZERO, 0);
    let resumed = loop {
        let asked = Instant::now();
        let taken = client.lock(format!("k{calls}")).try_acquire().await;
        longest = longest.max(asked.elapsed());
        calls += 1;
        if taken.is_ok() {
            break Instant::now();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no lock within 60 s of the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let named = named.await.expect("the failover");
    println!(
        "{calls} calls while the master was down, the longest {longest:?}; the new master \
         named {:?} after the kill, a lock taken {:?} after that",
        named - killed,
        resumed.saturating_duration_since(named)
    );
    assert!(
        longest < timeout + Duration::from_millis(400),
        "a call took {longest:?} with timeouts of {timeout:?}"
    );
    assert!(
        resumed.saturating_duration_since(named) < Duration::from_secs(5),
        "locking resumed {:?} after the sentinels named the new master",
        resumed.saturating_duration_since(named)
    );
}
