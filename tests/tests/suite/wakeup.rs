//! Wake-up on release: waiters are woken by the release, not by polling or the ttl.

use crate::common;

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use common::{
    as_other_owner, assert_safe, channel, client, run_contenders, spawn_waiter, subscribers,
    waited_key,
};
use distlock::Client;
use distlock_testkit::{wait_until_async, FaultProxy, Observer, RedisServer};

/// Every command the lock server executed, less the INFO calls that read them. This counts
/// the commands our scripts run inside Redis too (SET, PTTL, PUBLISH, ...), not only the
/// requests clients sent: it is the work the server did.
fn commands(server: &RedisServer) -> u64 {
    let mut stats = server.commandstats();
    stats.remove("info");
    stats.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_long_before_the_holders_ttl() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ttl = Duration::from_secs(30);
    let held = locks
        .lock("wake")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let waiter = spawn_waiter(&locks, "wake", Duration::from_secs(20));
    // The waiter is parked once it has subscribed to the lock's channel.
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscribers(&server, &channel("wake")).await > 0
    })
    .await;
    assert!(parked);
    let released = Instant::now();
    held.release().await.expect("release");
    let acquired = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    // Its fallback sleep is capped by the holder's remaining ttl (~30 s); only the release
    // message can wake it this soon.
    let handoff = acquired - released;
    assert!(handoff < Duration::from_secs(10), "woken after {handoff:?}");
    println!("hand-off {handoff:?}");
}

/// A release tells waiters only when one may be listening: a lock nobody waited for is given
/// back without a `PUBLISH` (one call of three in the release script, the Redis work a wake-up
/// costs on every uncontended release). Fails on the code that published on every release.
#[tokio::test]
async fn an_uncontended_release_publishes_nothing() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    for _ in 0..20 {
        let g = locks.lock("alone").try_acquire().await.expect("free");
        g.release().await.expect("release");
    }
    let stats = server.commandstats();
    let published = stats.get("publish").copied().unwrap_or(0);
    assert_eq!(published, 0, "{stats:?}");
    assert_eq!(stats.get("del").copied(), Some(20), "{stats:?}");
    assert!(!exists(&server, &waited_key("alone")).await);
}

/// A waiter marks the lock as waited for (a key that lasts as long as the holder's lease then
/// had to run). The holder's watchdog renews the lease past that mark: the waiter, woken by its
/// fallback when the mark ran out, finds the lock still held and marks it again, so the
/// release that comes later is still published and heard, and the mark is gone with the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_lease_was_renewed_past_the_waiters_mark_still_wakes_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let marker = &waited_key("renewed");
    let held = locks
        .lock("renewed")
        .ttl(Duration::from_millis(900))
        .try_acquire()
        .await
        .expect("free");
    let waiter = spawn_waiter(&locks, "renewed", Duration::from_secs(60));
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscribers(&server, &channel("renewed")).await > 0 && pttl_of(&server, marker).await > 0
    })
    .await;
    assert!(parked, "the waiter subscribed and marked the lock");
    // The mark only runs down unless the waiter sets it again: a longer remaining time than
    // the last one seen means it did, after the holder's lease outlived the first mark.
    let server = &server;
    let last = std::cell::Cell::new(pttl_of(server, marker).await);
    let remarked = wait_until_async(Duration::from_secs(20), || {
        let last = &last;
        async move {
            let now = pttl_of(server, marker).await;
            now > last.replace(now) + 50
        }
    })
    .await;
    assert!(
        remarked,
        "the waiter marked the lock again once its mark ran out"
    );
    let mut listener = redis::Client::open(server.url())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pub/sub connection");
    listener
        .subscribe(channel("renewed"))
        .await
        .expect("SUBSCRIBE");
    held.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.on_message().next()).await;
    assert!(
        matches!(heard, Ok(Some(_))),
        "the release was published: {heard:?}"
    );
    assert!(!exists(server, marker).await, "the mark went with the lock");
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<bool>(&mut server.async_connection().await)
        .await
        .expect("EXISTS")
}

async fn pttl_of(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async::<i64>(&mut server.async_connection().await)
        .await
        .expect("PTTL")
}

/// The connection a client's subscriptions live on goes down; while it is down, and after the
/// waiter's last attempt was answered busy, the holder releases: the `PUBLISH` reaches no one.
/// Once the connection is back (subscribed again), the waiter must try at once, not sleep
/// until the holder's lease would have ended. A single-node client attempts on other
/// connections than the subscriptions' one (see `ClientBuilder::connections`), so its attempts
/// do not wait for that connection to come back; the proxy cuts that one connection alone.
/// Fails on the code before the waiters were told of the connection's return: the check it
/// had covered outages of up to the node timeout (100 ms), and this one lasts 500 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_the_subscriptions_connection_is_down_is_caught_once_it_is_back() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    // Only the subscriptions' connection sends SUBSCRIBE.
    proxy.note_sending(b"SUBSCRIBE");
    let holder = client(&server).await;
    let waiting = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    for mode in ["lock", "write"] {
        let name = format!("rejoin-{mode}");
        let channel = channel(&name);
        let request = match mode {
            "write" => holder.write(&name),
            _ => holder.lock(&name),
        };
        let held = as_other_owner(request.ttl(Duration::from_secs(30)).try_acquire())
            .await
            .expect("free");
        let waiter = {
            let (waiting, name) = (waiting.clone(), name.clone());
            tokio::spawn(as_other_owner(async move {
                let request = match mode {
                    "write" => waiting.write(&name),
                    _ => waiting.lock(&name),
                };
                let g = request.wait(Duration::from_secs(20)).acquire().await?;
                let at = Instant::now();
                g.release().await.map(|()| at)
            }))
        };
        let parked = wait_until_async(Duration::from_secs(10), || async {
            subscribers(&server, &channel).await > 0
        })
        .await;
        assert!(parked, "{mode}: the waiter never subscribed");
        let attempts_before = attempts(&server, mode);
        // Down, and staying down: its reconnections are refused.
        proxy.refuse_new(true);
        proxy.reset_noted();
        let gone = wait_until_async(Duration::from_secs(10), || async {
            subscribers(&server, &channel).await == 0
        })
        .await;
        assert!(gone, "{mode}: the subscription outlived its connection");
        // Woken by the disconnection, the waiter attempts on its own connection: busy.
        let tried = wait_until_async(Duration::from_secs(10), || async {
            attempts(&server, mode) > attempts_before
        })
        .await;
        assert!(tried, "{mode}: no attempt after the disconnection");
        // The outage: longer than the node timeout, so the waiter's other checks are over.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = Instant::now();
        held.release().await.expect("release");
        proxy.refuse_new(false);
        let acquired = waiter
            .await
            .expect("task")
            .expect("the waiter gets the lock");
        // Without a wake-up it sleeps until its wait (20 s) or the holder's lease (30 s) ends.
        let handoff = acquired - released;
        assert!(
            handoff < Duration::from_secs(10),
            "{mode}: woken after {handoff:?}"
        );
        println!("{mode}: acquired {handoff:?} after the release");
    }
}

/// Attempts at a lock of `mode` the server has run: the setnx lock's plain `SET`s, or the
/// scripts of the read/write lock.
fn attempts(server: &RedisServer, mode: &str) -> u64 {
    let stats = server.commandstats();
    let count = |name: &str| stats.get(name).copied().unwrap_or(0);
    match mode {
        "write" => count("evalsha") + count("eval"),
        _ => count("set"),
    }
}

/// 200 waiters in 2 processes, each holding the lock for 20 ms: all are served, and the
/// server sees few commands per acquisition (wake-ups, not a spin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_waiters_in_two_processes_are_all_served_with_few_commands() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let before = commands(&server);
    let served = run_contenders(
        2,
        &[
            "herd",
            "setnx",
            &server.url(),
            &observer_server.url(),
            "herd",
            "100",
            "20",
        ],
    );
    let used = commands(&server) - before;
    let stats = server.commandstats();
    let requests: u64 = [
        "evalsha",
        "eval",
        "subscribe",
        "unsubscribe",
        "hello",
        "script|load",
        "client|setinfo",
    ]
    .iter()
    .map(|c| stats.get(*c).copied().unwrap_or(0))
    .sum();
    assert_eq!(served, vec![100, 100], "every waiter is served");
    let observer = Observer::connect(&observer_server.url(), "herd").await;
    assert_eq!(observer.acked().await, 200);
    assert_safe(&observer).await;
    let per_acquisition = used as f64 / 200.0;
    println!(
        "{used} server commands for 200 acquisitions: {per_acquisition:.2} each \
         ({:.2} requests from clients, the rest run inside our scripts)",
        requests as f64 / 200.0
    );
    // A spin would show in the client's requests: each waiter is woken about once.
    assert!(
        requests as f64 / 200.0 <= 4.0,
        "{:.2} client requests per acquisition",
        requests as f64 / 200.0
    );
    // Server commands: the plain SET .. GET (and a waiter's PTTL), the release script's
    // GET, DEL and PUBLISH, plus a busy attempt's few (a fenced lock adds INCR and TIME);
    // a spin would be many times this.
    assert!(
        per_acquisition <= 12.0,
        "{per_acquisition:.2} commands per acquisition"
    );
}
