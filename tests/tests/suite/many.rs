//! `Client::lock_many`: several names at once, all or none, against real redis-server
//! processes: one node, a quorum and a Redis Cluster whose slots split a set. A set excludes
//! each name's lock and the other way round; a waiter holds none of its names while it waits
//! and is woken by the release of the name it found busy; callers asking in opposite orders
//! never deadlock; a dropped or failed acquisition leaves no name taken; the guard is held
//! only while every name is; the transfer attribute keeps a bank's total across tasks and
//! processes.

use crate::common;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use common::{
    as_other_owner, channel, client, fence_key, lock_key, run_contenders, subscribers, waited_key,
};
use distlock::{Client, Error, Guard};
use distlock_testkit::{
    wait_until_async, Bank, FaultProxy, Keeper, RedisCluster, RedisSentinel, RedisServer,
    RedisServers,
};
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine);
/// the defects these tests catch mean "never", or a whole 30 s lease.
const EVENT_LIMIT: Duration = Duration::from_secs(5);
/// The lease of the holders a waiter waits for: what a missed wake-up would cost.
const LONG: Duration = Duration::from_secs(30);

pub(crate) static CLUSTER: LazyLock<Keeper<RedisCluster>> =
    LazyLock::new(|| Keeper::new(RedisCluster::start));

async fn value(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    conn.get(lock_key(name)).await.expect("GET")
}

/// The names' lock values on `server` (`None`: free).
async fn values(server: &RedisServer, names: &[&str]) -> Vec<Option<String>> {
    let mut conn = server.async_connection().await;
    let mut all = Vec::new();
    for name in names {
        all.push(value(&mut conn, name).await);
    }
    all
}

/// `names` in a set's fixed order: by Redis Cluster slot, then by lock key.
fn in_order<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut sorted = names.to_vec();
    sorted.sort_by_key(|n| (RedisCluster::slot_of(lock_key(n).as_bytes()), lock_key(n)));
    sorted
}

/// A task of another owner waiting for the set `names` (up to a minute).
fn spawn_set_waiter(
    locks: &Client,
    names: &[&'static str],
) -> tokio::task::JoinHandle<Result<Guard, Error>> {
    let (locks, names) = (locks.clone(), names.to_vec());
    tokio::spawn(as_other_owner(async move {
        locks
            .lock_many(names)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    }))
}

/// Waits until some connection listens on the release channel of `name`.
async fn listened(server: &RedisServer, name: &str) -> bool {
    wait_until_async(EVENT_LIMIT, || async move {
        subscribers(server, &channel(name)).await > 0
    })
    .await
}

#[tokio::test]
async fn a_set_excludes_each_name_and_each_name_excludes_the_set() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let both = locks
        .lock_many(["a", "b"])
        .try_acquire()
        .await
        .expect("free");
    assert!(both.is_held());
    let held = values(&server, &["a", "b"]).await;
    assert!(
        held[0].is_some() && held[0] == held[1],
        "one token: {held:?}"
    );
    for name in ["a", "b"] {
        let busy = as_other_owner(locks.lock(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    }
    both.release().await.expect("release");
    assert_eq!(values(&server, &["a", "b"]).await, [None, None]);

    let b = locks.lock("b").try_acquire().await.expect("free");
    let busy = as_other_owner(locks.lock_many(["c", "b"]).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    assert_eq!(
        values(&server, &["c"]).await,
        [None],
        "nothing taken in part"
    );
    b.release().await.expect("release");

    // The same name twice is one name.
    let twice = locks
        .lock_many(["d", "d"])
        .try_acquire()
        .await
        .expect("free");
    twice.release().await.expect("release");
}

#[tokio::test]
async fn the_same_task_holding_a_name_is_refused_at_once() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let a = locks.lock("a").try_acquire().await.expect("free");
    let started = Instant::now();
    let err = locks
        .lock_many(["b", "a"])
        .wait(LONG)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Reentrant { .. }), "{err}");
    assert!(started.elapsed() < EVENT_LIMIT, "it waited on itself");
    a.release().await.expect("release");
    let set = locks
        .lock_many(["a", "b"])
        .try_acquire()
        .await
        .expect("free");
    let err = locks.lock("b").wait(LONG).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Reentrant { .. }), "{err}");
    set.release().await.expect("release");
}

#[tokio::test]
async fn bad_names_other_modes_and_application_data_are_refused() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let empty: [&str; 0] = [];
    let err = locks.lock_many(empty).try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    let err = locks.lock_many(["a", ""]).try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");

    let reentrant = as_other_owner(locks.reentrant("r").try_acquire())
        .await
        .expect("free");
    let err = locks.lock_many(["a", "r"]).try_acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::ModeConflict { ref name, .. } if name == "r"),
        "{err}"
    );
    reentrant.release().await.expect("release");

    let mut conn = server.async_connection().await;
    let _: () = conn
        .set(lock_key("data"), "the application's")
        .await
        .expect("SET");
    let err = locks
        .lock_many(["a", "data"])
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::WrongType { ref name, .. } if name == "data"),
        "{err}"
    );
    assert_eq!(values(&server, &["a"]).await, [None], "nothing taken");
    let data: String = conn.get(lock_key("data")).await.expect("GET");
    assert_eq!(data, "the application's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_asking_in_opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let other = client(&server).await;
    const ROUNDS: usize = 200;
    let started = Instant::now();
    let run = |locks: Client, names: [&'static str; 2]| {
        tokio::spawn(as_other_owner(async move {
            for _ in 0..ROUNDS {
                let both = locks
                    .lock_many(names)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                tokio::task::yield_now().await;
                both.release().await?;
            }
            Ok::<_, Error>(())
        }))
    };
    let forward = run(locks.clone(), ["x", "y"]);
    let backward = run(other.clone(), ["y", "x"]);
    let forward_again = run(locks, ["x", "y"]);
    let backward_again = run(other, ["y", "x"]);
    for task in [forward, backward, forward_again, backward_again] {
        task.await
            .expect("task")
            .expect("every round took both names");
    }
    eprintln!(
        "4 x {ROUNDS} rounds of [x, y] against [y, x] in {:?}",
        started.elapsed()
    );
    assert_eq!(values(&server, &["x", "y"]).await, [None, None]);
}

#[tokio::test]
async fn a_waiter_holds_no_name_while_it_waits_and_wakes_at_the_busy_ones_release() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let names = ["w-a", "w-b", "w-c"];
    let order = in_order(&names);
    let (first, last) = (order[0], order[2]);
    let holder_of_first = locks
        .lock(first)
        .ttl(LONG)
        .try_acquire()
        .await
        .expect("free");
    let holder_of_last = as_other_owner(locks.lock(last).ttl(LONG).try_acquire())
        .await
        .expect("free");
    let waiter = spawn_set_waiter(&locks, &names);
    assert!(
        listened(&server, first).await,
        "the waiter waits for {first}"
    );
    let mut conn = server.async_connection().await;
    for name in [order[1], last] {
        assert_ne!(
            value(&mut conn, name).await,
            value(&mut conn, first).await,
            "{name} is not the waiter's while it waits"
        );
    }
    assert_eq!(value(&mut conn, order[1]).await, None, "no name taken");
    let marked: bool = conn.exists(waited_key(first)).await.expect("EXISTS");
    assert!(marked, "the busy name is marked as waited for");

    // Its release lets the waiter try again: the last name is still busy, so it waits for
    // that one now, holding nothing.
    holder_of_first.release().await.expect("release");
    assert!(listened(&server, last).await, "the waiter waits for {last}");
    assert_eq!(values(&server, &[first, order[1]]).await, [None, None]);

    let released = Instant::now();
    holder_of_last.release().await.expect("release");
    let set = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("woken by the release, not by its 30 s lease")
        .expect("task")
        .expect("the set");
    eprintln!(
        "the waiter got the set {:?} after the release",
        released.elapsed()
    );
    let held = values(&server, &names).await;
    assert!(
        held.iter().all(|v| v.is_some() && *v == held[0]),
        "{held:?}"
    );
    set.release().await.expect("release");
}

#[tokio::test]
async fn the_guard_is_held_only_while_every_name_is() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let names = ["l-a", "l-b", "l-c"];
    let set = locks
        .lock_many(names)
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    // Renewed past its ttl while every name is ours.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "the watchdog renews every name");
    assert!(values(&server, &names).await.iter().all(Option::is_some));
    let mut conn = server.async_connection().await;
    let _: () = conn.del(lock_key("l-b")).await.expect("DEL");
    let lost = tokio::time::timeout(EVENT_LIMIT, set.lost())
        .await
        .expect("the loss of one name is the loss of the set");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!set.is_held());
    let err = set.release().await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    assert_eq!(values(&server, &names).await, [None, None, None]);
}

#[tokio::test]
async fn a_fenced_set_has_one_token_above_each_names_tokens_before_and_after() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    // One name's counter far ahead of the others' (the clock floor keeps them near the
    // server's microseconds).
    let mut conn = server.async_connection().await;
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = conn
        .set(fence_key("f-b"), ahead.to_string())
        .await
        .expect("SET");
    let a = locks
        .lock("f-a")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let before = a.fencing_token().expect("a token");
    a.release().await.expect("release");
    let set = locks
        .lock_many(["f-a", "f-b"])
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let token = set.fencing_token().expect("a token");
    assert!(token > before && token.get() > ahead, "{token}");
    set.release().await.expect("release");
    for name in ["f-a", "f-b"] {
        let next = locks
            .lock(name)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        assert!(next.fencing_token().expect("a token") > token, "{name}");
        next.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_dropped_or_failed_acquisition_leaves_no_name_taken() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    let names = ["d-a", "d-b", "d-c"];
    let none = || async { values(&server, &names).await.iter().all(Option::is_none) };

    // The scripts are on the server (a server lacking one is sent its source, after one
    // more round trip, which the dropped future below would not wait for).
    let warm = locks.lock_many(names).try_acquire().await.expect("free");
    warm.release().await.expect("release");

    // The future dropped while its answer is on its way: the names were taken (the fencing
    // counters show the script ran), and are given back in the background, long before
    // their 30 s lease. It is dropped once the script ran (an event, not a time: on a loaded
    // machine a fixed timeout could end it before its request was written).
    proxy.reply_latency(LONG);
    let ran = || async {
        let mut conn = server.async_connection().await;
        for name in names {
            let exists: bool = conn.exists(fence_key(name)).await.expect("EXISTS");
            if !exists {
                return false;
            }
        }
        true
    };
    tokio::select! {
        answer = locks.lock_many(names).ttl(LONG).fencing(true).try_acquire() => {
            panic!("the answer came through a {LONG:?} reply latency: {answer:?}")
        }
        reached = wait_until_async(EVENT_LIMIT, ran) => {
            assert!(reached, "the attempt reached the server and took every name");
        }
    }
    assert!(wait_until_async(EVENT_LIMIT, none).await, "given back");
    proxy.reply_latency(Duration::ZERO);

    // The reply lost to a single try: an error, and nothing left.
    proxy.drop_next_reply();
    let err = locks
        .lock_many(names)
        .ttl(LONG)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(wait_until_async(EVENT_LIMIT, none).await, "given back");

    // The reply lost to a caller that waits: the retry finds its own hold and takes it.
    proxy.drop_next_reply();
    let set = locks
        .lock_many(names)
        .ttl(LONG)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("taken by the retry");
    let held = values(&server, &names).await;
    assert!(
        held.iter().all(|v| v.is_some() && *v == held[0]),
        "{held:?}"
    );
    set.release().await.expect("release");
    assert!(none().await);

    // Many cycles with a third of the replies lost: whatever failed, nothing stays.
    proxy.drop_replies(0.3);
    let mut taken = 0;
    for i in 0..60 {
        let pair = [names[i % 3], names[(i + 1) % 3]];
        let attempt = locks
            .lock_many(pair)
            .ttl(LONG)
            .wait(Duration::from_millis(200))
            .acquire();
        if let Ok(Ok(set)) = tokio::time::timeout(Duration::from_millis(300), attempt).await {
            taken += 1;
            let _ = set.release().await;
        }
    }
    proxy.drop_replies(0.0);
    assert!(taken > 0, "no cycle went through");
    assert!(
        wait_until_async(EVENT_LIMIT, none).await,
        "names left: {:?}",
        values(&server, &names).await
    );
}

/// Names spread over the cluster's masters: two whose slots differ, in the set's order.
pub(crate) fn two_slots(prefix: &str) -> (String, String) {
    let masters = |n: &str| {
        let slot = RedisCluster::slot_of(lock_key(n).as_bytes());
        CLUSTER.with(move |c| c.master_of_slot(slot))
    };
    let first = format!("{prefix}-0");
    let other = (1..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| masters(n) != masters(&first))
        .expect("a name on another master");
    let order = in_order(&[&first, &other]);
    (order[0].to_owned(), order[1].to_owned())
}

async fn cluster_values(
    conn: &mut redis::cluster_async::ClusterConnection,
    names: &[&str],
) -> Vec<Option<String>> {
    let mut all = Vec::new();
    for name in names {
        all.push(conn.get(lock_key(name)).await.expect("GET"));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_takes_a_set_a_slot_at_a_time_and_gives_back_what_it_took() {
    let _serial = CLUSTER.serial().await;
    let seeds = CLUSTER.with(|c| c.urls());
    let locks = Client::cluster(seeds.clone()).await.expect("connect");
    let mut raw = redis::cluster::ClusterClient::new(seeds)
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect");
    let (first, last) = two_slots("cs");
    let (first, last) = (first.as_str(), last.as_str());

    // The later slot busy: the waiter took the first slot's name, found the last busy, and
    // gave the first back before waiting.
    let holder = as_other_owner(locks.lock(last).ttl(LONG).try_acquire())
        .await
        .expect("free");
    let (l1, l2) = (first.to_owned(), last.to_owned());
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(as_other_owner(async move {
            locks
                .lock_many([l1, l2])
                .ttl(Duration::from_secs(1))
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }))
    };
    // It listens for the release of the name it found busy once it gave the first back.
    let master = {
        let slot = RedisCluster::slot_of(lock_key(last).as_bytes());
        CLUSTER.with(move |c| c.master_of_slot(slot))
    };
    // Without sharded pub/sub (Redis 6.2) the waiter polls instead.
    let sharded = CLUSTER.with(move |c| common::has_sharded_pub_sub(c.server(master)));
    let listening = !sharded && common::polling_started().await
        || wait_until_async(EVENT_LIMIT, || async move {
            let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(channel(last))
                .query(&mut CLUSTER.with(move |c| c.server(master).connection()))
                .expect("PUBSUB SHARDNUMSUB");
            counts.first().is_some_and(|(_, n)| *n > 0)
        })
        .await;
    assert!(listening, "the waiter waits for {last}");
    let marked: bool = raw.exists(waited_key(last)).await.expect("EXISTS");
    assert!(marked, "the waiter found {last} busy");
    // The attempt that subscribed re-checks once (it takes `first`, finds `last` busy and
    // gives `first` back): between its attempts the waiter holds nothing.
    let given_back = wait_until_async(EVENT_LIMIT, || {
        let mut raw = raw.clone();
        async move { cluster_values(&mut raw, &[first]).await == [None] }
    })
    .await;
    assert!(given_back, "{first} given back while waiting");
    let released = Instant::now();
    holder.release().await.expect("release");
    let set = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("the set");
    eprintln!(
        "cluster: the set {:?} after the release",
        released.elapsed()
    );

    // Held on both masters, renewed past its 1 s ttl on both, excluding each name.
    let held = cluster_values(&mut raw, &[first, last]).await;
    assert!(held[0].is_some() && held[0] == held[1], "{held:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "renewed on every slot");
    for name in [first, last] {
        let busy = as_other_owner(locks.lock(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    }
    set.release().await.expect("release");
    assert_eq!(cluster_values(&mut raw, &[first, last]).await, [None, None]);

    // A fenced set: one token, the counters of both slots raised to it.
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = raw
        .set(fence_key(last), ahead.to_string())
        .await
        .expect("SET");
    let fenced = locks
        .lock_many([first, last])
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let token = fenced.fencing_token().expect("a token");
    assert!(token.get() > ahead, "{token}");
    fenced.release().await.expect("release");
    let next = locks
        .lock(first)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(next.fencing_token().expect("a token") > token);
    next.release().await.expect("release");

    // One slot lost under the guard loses the set.
    let set = locks
        .lock_many([first, last])
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    let _: () = raw.del(lock_key(last)).await.expect("DEL");
    tokio::time::timeout(EVENT_LIMIT, set.lost())
        .await
        .expect("lost");
    assert!(set.release().await.is_err());
    assert_eq!(cluster_values(&mut raw, &[first, last]).await, [None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_takes_the_whole_set_on_each_node() {
    let mut nodes = RedisServers::start(3);
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let names = ["q-a", "q-b"];
    let set = locks
        .lock_many(names)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(set.fencing_token().is_some());
    // On a majority at least (the acquisition returns once a majority granted it).
    let mut holding = 0;
    for node in nodes.iter() {
        let held = values(node, &names).await;
        holding += usize::from(held.iter().all(|v| v.is_some() && *v == held[0]));
        assert!(held[0] == held[1], "the whole set or nothing: {held:?}");
    }
    assert!(holding >= 2, "on {holding} nodes");
    let busy = as_other_owner(locks.lock("q-b").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let waiter = spawn_set_waiter(&locks, &["q-b", "q-c"]);
    assert!(listened(&nodes[0], "q-b").await, "the waiter waits for q-b");
    let released = Instant::now();
    set.release().await.expect("release");
    let next = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("the set");
    eprintln!(
        "quorum: the waiter got its set {:?} after the release",
        released.elapsed()
    );
    next.release().await.expect("release");
    // The release returns at a majority; the last node's finishes in the background.
    for node in nodes.iter() {
        let free = wait_until_async(EVENT_LIMIT, || async {
            values(node, &["q-a", "q-b", "q-c"]).await == [None, None, None]
        })
        .await;
        assert!(free, "released on {}", node.addr());
    }
    // A minority down: still a majority for the set.
    nodes[2].kill();
    let set = locks
        .lock_many(names)
        .try_acquire()
        .await
        .expect("a majority");
    set.release().await.expect("release");
}

/// Through Sentinel the set is one script on the master, whatever the names' slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_the_set_is_taken_whole_on_the_master() {
    let sentinel = tokio::task::spawn_blocking(|| RedisSentinel::start_with(1, 1))
        .await
        .expect("sentinel");
    let locks = Client::sentinel(sentinel.sentinel_urls(), sentinel.master_name())
        .await
        .expect("connect through the sentinels");
    let master = sentinel.server(sentinel.master().expect("a master"));
    let names = ["s-a", "s-b", "order:{7}"];
    let set = locks.lock_many(names).try_acquire().await.expect("free");
    let held = values(master, &names).await;
    assert!(
        held.iter().all(|v| v.is_some() && *v == held[0]),
        "{held:?}"
    );
    let busy = as_other_owner(locks.lock_many(["s-c", "s-b"]).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    set.release().await.expect("release");
    assert_eq!(values(master, &names).await, [None, None, None]);
    tokio::task::spawn_blocking(move || drop(sentinel))
        .await
        .expect("stopped");
}

/// Accounts of the transfer tests, and the balance each starts with.
const ACCOUNTS: usize = 20;
const BALANCE: i64 = 1000;

/// The classic transfer (`key = ["account:<from>", "account:<to>"]`, see the kit's `Bank`):
/// 16 tasks moving money between random pairs of 20 accounts. A transfer waits up to a minute
/// for its two accounts, so a deadlock fails it; the bank's total and the overlaps it counted
/// show whether two transfers ever touched one account at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_attribute_keeps_the_total_across_16_tasks() {
    let server = RedisServer::start();
    let bank_server = RedisServer::start();
    let locks = client(&server).await;
    let bank = Bank::open(&bank_server.url(), ACCOUNTS, BALANCE).await;
    let started = Instant::now();
    let done = bank
        .random_transfers(&locks, 16, 40)
        .await
        .expect("every transfer");
    eprintln!("{done} transfers by 16 tasks in {:?}", started.elapsed());
    assert_eq!(bank.transfers().await, done);
    assert_eq!(
        bank.overlaps().await,
        0,
        "two transfers in one account at once"
    );
    assert_eq!(
        bank.total().await,
        ACCOUNTS as i64 * BALANCE,
        "money lost or made"
    );
}

/// The same from two processes of 8 tasks each, the transfers of both processes taking the
/// same accounts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_attribute_keeps_the_total_across_two_processes() {
    let server = RedisServer::start();
    let bank_server = RedisServer::start();
    let started = Instant::now();
    let done = run_contenders(
        2,
        &[
            "transfer",
            &server.url(),
            &bank_server.url(),
            &ACCOUNTS.to_string(),
            "8",
            "25",
        ],
    );
    eprintln!(
        "{done:?} transfers by 2 processes x 8 tasks in {:?}",
        started.elapsed()
    );
    let bank = Bank::open(&bank_server.url(), ACCOUNTS, BALANCE).await;
    assert_eq!(bank.transfers().await, done.iter().sum::<u64>());
    assert_eq!(
        bank.overlaps().await,
        0,
        "two transfers in one account at once"
    );
    assert_eq!(
        bank.total().await,
        ACCOUNTS as i64 * BALANCE,
        "money lost or made"
    );
}
