//! Every mode on a real Redis Cluster (3 masters, 3 replicas), formed once for this binary:
//! contention across processes over locks spread across the masters, wake-ups through
//! sharded pub/sub, the watchdog, the attributes, and a slot migration under waiters.

use crate::common;

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use common::{channel, fence_key, lock_key, run_contenders};
use distlock::{distributed_lock, read_lock, write_lock, Client, Error};
use distlock_testkit::{wait_until_async, Keeper, Observer, RedisCluster, RedisServer};

static CLUSTER: LazyLock<Keeper<RedisCluster>> = LazyLock::new(|| Keeper::new(RedisCluster::start));

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(10);

async fn client() -> Client {
    let seeds = CLUSTER.with(|c| c.urls());
    Client::cluster(seeds)
        .await
        .expect("connect to the cluster")
}

/// The server (index in the cluster) whose master serves the lock `name`.
fn master_of(name: &str) -> usize {
    let slot = RedisCluster::slot_of(lock_key(name).as_bytes());
    CLUSTER.with(move |c| c.master_of_slot(slot))
}

fn raw(i: usize) -> redis::Connection {
    CLUSTER.with(move |c| c.server(i).connection())
}

/// Waits until some client listens on `channel` by sharded pub/sub on server `i`. On a
/// Cluster without sharded pub/sub (Redis 6.2) the waiters poll instead: a short pause.
async fn shard_subscribed(i: usize, channel: &str) -> bool {
    if !CLUSTER.with(move |c| common::has_sharded_pub_sub(c.server(i))) {
        return common::polling_started().await;
    }
    wait_until_async(EVENT_LIMIT, || async move {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut raw(i))
            .expect("PUBSUB SHARDNUMSUB");
        counts.first().is_some_and(|(_, n)| *n > 0)
    })
    .await
}

/// Two contender processes x four tasks, each section on one of 24 locks picked at random,
/// for every mode: no overlap, no lost update, no fencing token that failed to grow, on any
/// lock; and the locks live on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_excludes_across_processes_on_locks_spread_over_the_masters() {
    let _serial = CLUSTER.serial().await;
    let observer_server = RedisServer::start();
    let url = format!("cluster:{}", CLUSTER.with(|c| c.urls()).join(","));
    const LOCKS: usize = 24;
    // The plain setnx acquire, and the fencing scripts (whose tokens the observers check).
    for kind in ["setnx", "setnx+fenced", "reentrant+fenced", "write+fenced"] {
        let prefix = format!("spread-{kind}");
        let masters: BTreeSet<usize> = (0..LOCKS)
            .map(|i| master_of(&format!("{prefix}-{i}")))
            .collect();
        assert_eq!(masters.len(), 3, "the locks are spread over all masters");
        let sections = run_contenders(
            2,
            &[
                "spread",
                kind,
                &url,
                &observer_server.url(),
                &prefix,
                &LOCKS.to_string(),
                "4",
                "3",
            ],
        );
        assert!(sections.iter().all(|&n| n > 0), "{kind}: {sections:?}");
        let mut total = 0;
        for i in 0..LOCKS {
            let observer =
                Observer::connect(&observer_server.url(), &format!("{prefix}-{i}")).await;
            common::assert_safe(&observer).await;
            total += observer.acked().await;
        }
        println!("{kind}: {total} sections over {LOCKS} locks, per process {sections:?}");
        assert!(total >= 100, "{kind}: only {total} sections ran");
    }
}

/// Readers and writers of one read/write lock in two processes on the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_excludes_across_processes() {
    let _serial = CLUSTER.serial().await;
    let observer_server = RedisServer::start();
    let url = format!("cluster:{}", CLUSTER.with(|c| c.urls()).join(","));
    let sections = run_contenders(
        2,
        &["rw", &url, &observer_server.url(), "crw", "4", "1", "3"],
    );
    let writers = Observer::connect(&observer_server.url(), "crw-w").await;
    let readers = Observer::connect(&observer_server.url(), "crw-r").await;
    assert_eq!(writers.violations().await, 0, "two writers at once");
    assert_eq!(
        writers.overlaps().await,
        0,
        "a writer found a reader inside"
    );
    assert_eq!(
        readers.overlaps().await,
        0,
        "a reader found a writer inside"
    );
    assert_eq!(
        writers.counter().await,
        writers.acked().await,
        "lost updates"
    );
    assert_eq!(writers.stale_tokens().await, 0, "write tokens must grow");
    assert!(writers.acked().await > 0 && readers.max_occupancy().await >= 2);
    println!("sections per process {sections:?}");
}

/// A waiter sleeps on the lock's shard channel (SSUBSCRIBE on the slot's master, not a
/// broadcast channel) and is woken by the release long before the holder's ttl. On Redis 6.2
/// (no sharded pub/sub) it polls, and gets the lock as soon (`tests/tests/suite/servers.rs` checks
/// what that polling costs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_through_sharded_pub_sub() {
    let locks = client().await;
    let name = "c-wake";
    let master = master_of(name);
    let guard = locks
        .lock(name)
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let started = Instant::now();
            let guard = locks
                .lock(name)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("acquired after the release");
            let waited = started.elapsed();
            guard.release().await.expect("release");
            waited
        }
    });
    let channel = channel(name);
    let subscribed = shard_subscribed(master, &channel).await;
    assert!(
        subscribed,
        "the waiter subscribed to the shard channel on the slot's master"
    );
    let plain: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channel)
        .query(&mut raw(master))
        .expect("PUBSUB NUMSUB");
    assert_eq!(plain[0].1, 0, "no broadcast subscription");
    guard.release().await.expect("release");
    let waited = waiter.await.expect("waiter");
    assert!(
        waited < Duration::from_secs(10),
        "woken by the release, not by the 30 s ttl: {waited:?}"
    );
}

/// The fencing counter and the lock live in one slot, and tokens grow per lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_and_share_the_locks_slot() {
    let locks = client().await;
    let mut last = distlock::FencingToken::new(0);
    for _ in 0..5 {
        let guard = locks.lock("c-fence").fencing(true).try_acquire().await;
        let guard = guard.expect("free");
        let token = guard.fencing_token().expect("fencing(true)");
        assert!(token > last);
        last = token;
        guard.release().await.expect("release");
    }
    let master = master_of("c-fence");
    let fence: u64 = redis::cmd("GET")
        .arg(fence_key("c-fence"))
        .query(&mut raw(master))
        .expect("the counter is on the lock's master");
    assert_eq!(fence, last.get());
}

/// The watchdog renews locks on every master (one pipeline per master) while they are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_locks_on_every_master() {
    let locks = client().await;
    let mut guards = Vec::new();
    for i in 0..12 {
        let name = format!("c-dog-{i}");
        let guard = locks
            .reentrant(&name)
            .ttl(Duration::from_millis(600))
            .try_acquire()
            .await
            .expect("free");
        guards.push(guard);
    }
    // Several ttls: without renewals every lease would have run out.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    for guard in &guards {
        assert!(guard.is_held(), "{} renewed", guard.name());
    }
    assert!(locks.renewal_round_trips() >= 3);
    for guard in guards {
        guard.release().await.expect("still ours");
    }
}

/// Scripts run on all the cluster's servers so far.
fn script_calls() -> u64 {
    CLUSTER.with(|c| {
        (0..c.len())
            .map(|i| {
                let stats = c.server(i).commandstats();
                stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0)
            })
            .sum()
    })
}

/// Read events the cluster's servers processed so far (`total_reads_processed`): a pipeline
/// arrives as about one read, so this counts round trips as the servers saw them.
fn server_reads() -> u64 {
    CLUSTER.with(|c| {
        (0..c.len())
            .map(|i| {
                c.server(i)
                    .info("stats")
                    .lines()
                    .find_map(|l| l.strip_prefix("total_reads_processed:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    })
}

/// 300 locks on about as many slots, over three masters: the watchdog sends one pipeline per
/// master per tick, not one per slot (which would be a round trip per renewal). Counted by the
/// servers (read events, which also include replication and the replicas' acknowledgements,
/// a few per second), not by the library. What it cannot tell apart: one pipeline per slot
/// sent concurrently, which redis-rs merges on its one connection per node, so the servers
/// saw few reads with that too; it does catch renewals resent one by one (700 reads for
/// 2,100 renewals, a first version's NOSCRIPT fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_batched_per_master() {
    let _serial = CLUSTER.serial().await;
    let locks = client().await;
    let ttl = Duration::from_millis(900);
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(
            locks
                .lock(format!("c-batch-{i}"))
                .ttl(ttl)
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let slots: BTreeSet<u16> = guards
        .iter()
        .map(|g| RedisCluster::slot_of(lock_key(g.name()).as_bytes()))
        .collect();
    assert!(slots.len() > 250, "the locks sit on many slots");
    let (trips_before, calls_before, reads_before) =
        (locks.renewal_round_trips(), script_calls(), server_reads());
    tokio::time::sleep(2 * ttl).await; // two ttls: every lease renewed several times
    let trips = locks.renewal_round_trips() - trips_before;
    let renewals = script_calls() - calls_before;
    let reads = server_reads() - reads_before;
    assert!(
        guards.iter().all(|g| g.is_held()),
        "every lease stayed alive"
    );
    assert!(
        renewals >= 2 * 300,
        "each lease renewed at least twice: {renewals}"
    );
    assert!(
        reads * 5 <= renewals,
        "{reads} reads by the servers for {renewals} renewals: not batched per master"
    );
    assert!(
        trips * 20 <= renewals,
        "{trips} pipelines for {renewals} renewals: not batched per master"
    );
    println!("{renewals} renewals in {trips} pipelines; {reads} reads by the servers");
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[distributed_lock(key = "c-attr:<id>", client = locks, wait = "5s", fencing = true)]
async fn pay(locks: &Client, id: u32) -> Result<distlock::FencingToken, Error> {
    let _ = id;
    let lease = distlock::lease().expect("locked");
    Ok(lease.fencing_token().expect("fencing = true"))
}

#[distributed_lock(key = "c-attr-re:<id>", client = locks, mode = "reentrant", fencing = true)]
async fn nested(locks: &Client, id: u32) -> Result<distlock::FencingToken, Error> {
    pay(locks, id).await
}

#[read_lock(key = "c-doc:<id>", client = locks)]
async fn show(locks: &Client, id: u32) -> Result<u32, Error> {
    Ok(id)
}

#[write_lock(key = "c-doc:<id>", client = locks)]
async fn edit(locks: &Client, id: u32) -> Result<u32, Error> {
    show(locks, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attributes_work_on_a_cluster() {
    let locks = client().await;
    let first = pay(&locks, 1).await.expect("locked call");
    let second = nested(&locks, 1).await.expect("nested locked call");
    assert!(second > first, "tokens grow");
    assert_eq!(edit(&locks, 7).await.expect("write then read"), 7);
}

/// A Redis Cluster slot migration of a lock's slot (`CLUSTER SETSLOT IMPORTING/MIGRATING`,
/// `MIGRATE`, `SETSLOT NODE`) while waiters wait: each waiter still gets the lock, and the
/// holder releases it on its new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_gets_the_lock_across_a_slot_migration() {
    let _serial = CLUSTER.serial().await;
    let locks = client().await;
    let name = "c-migrate";
    let key = lock_key(name);
    let slot = RedisCluster::slot_of(key.as_bytes());
    let source = master_of(name);
    let guard = locks
        .lock(name)
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    const WAITERS: usize = 6;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks
                    .lock(name)
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .fencing(true)
                    .acquire()
                    .await
                    .expect("every waiter gets the lock");
                let token = guard.fencing_token().expect("fencing(true)");
                guard.release().await.expect("release on the new master");
                token
            })
        })
        .collect();
    // The waiters are parked on the shard channel before the slot moves.
    let channel = channel(name);
    let parked = shard_subscribed(source, &channel).await;
    assert!(parked);
    let target = CLUSTER.with(move |c| {
        let target = (0..c.len())
            .find(|&i| {
                i != source && c.replicas_of_slot(slot).iter().all(|&r| r != i) && {
                    let info = c.server(i).info("replication");
                    info.contains("role:master")
                }
            })
            .expect("another master");
        migrate_slot(c, slot, source, target);
        target
    });
    assert_eq!(master_of(name), target, "the slot moved");
    guard
        .release()
        .await
        .expect("the holder releases on the new master");
    let started = Instant::now();
    let mut tokens = Vec::new();
    for w in waiters {
        tokens.push(w.await.expect("waiter"));
    }
    println!(
        "{WAITERS} waiters served {:?} after the release",
        started.elapsed()
    );
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), WAITERS, "each waiter its own token");
    // Move it back, so other tests find the layout they expect.
    CLUSTER.with(move |c| migrate_slot(c, slot, target, source));
}

/// Moves `slot` (with its keys) from master `from` to master `to`, the way `redis-cli
/// --cluster reshard` does, and waits until every node agrees.
fn migrate_slot(c: &mut RedisCluster, slot: u16, from: usize, to: usize) {
    let (from_id, to_id) = (c.node_id(from), c.node_id(to));
    let mut src = c.server(from).connection();
    let mut dst = c.server(to).connection();
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&from_id)
        .exec(&mut dst)
        .expect("SETSLOT IMPORTING");
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&to_id)
        .exec(&mut src)
        .expect("SETSLOT MIGRATING");
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut src)
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            break;
        }
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(c.server(to).port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .exec(&mut src)
            .expect("MIGRATE");
    }
    for i in [to, from] {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to_id)
            .exec(&mut c.server(i).connection())
            .expect("SETSLOT NODE");
    }
    c.wait_settled();
}

/// The README's least-privilege rules plus what a Cluster client needs (`CLUSTER SLOTS` to
/// read the topology): every mode works, and the user still cannot write outside the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privileged_user_runs_every_mode() {
    let _serial = CLUSTER.serial().await;
    let rules = format!("{} +cluster|slots", common::ACL_RULES);
    // ACLs are per server, not replicated: every node, replicas too (they may be promoted).
    let seeds = CLUSTER.with(move |c| {
        (0..c.len())
            .map(|i| common::add_locker(c.server(i), &rules))
            .collect::<Vec<_>>()
    });
    let locks = Client::cluster(seeds.clone())
        .await
        .expect("connect as the locking user");
    common::every_mode_works(&locks, "acl").await;
    let mut conn = redis::cluster::ClusterClient::new(seeds)
        .expect("seeds")
        .get_async_connection()
        .await
        .expect("connect");
    let denied: Result<(), _> = redis::cmd("SET")
        .arg("app:data")
        .arg("x")
        .query_async(&mut conn)
        .await;
    assert!(denied.is_err(), "the user may write outside the lock keys");
}

/// A fenced write on a Cluster: the key's mark lives in its slot (one script reaches both), for
/// keys with and without a hash tag.
#[tokio::test]
async fn fenced_writes_reach_the_key_and_its_mark_in_one_slot() {
    let seeds = CLUSTER.with(|c| c.urls());
    let conn = redis::cluster::ClusterClient::new(seeds)
        .expect("seeds")
        .get_async_connection()
        .await
        .expect("connect");
    let mut store = distlock::fenced::FencedRedis::new(conn);
    for key in ["fenced:plain", "fenced:{tagged}:x", "{}odd}"] {
        store
            .set(key, "v", distlock::FencingToken::new(2))
            .await
            .expect("written");
        let refused = store
            .set(key, "stale", distlock::FencingToken::new(1))
            .await;
        assert!(
            matches!(refused, Err(distlock::Error::StaleToken { .. })),
            "{key}: {refused:?}"
        );
    }
}
