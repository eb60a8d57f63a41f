//! What differs between the servers the matrix runs on (`tests/matrix.sh`: Redis 6.2, 7.0,
//! Valkey 8.1), asserted as `docs/deployments.md` documents it; and that the kit runs the
//! server the matrix names. In `tests/run.sh` these run on the Redis found there.

use crate::common;

use std::time::{Duration, Instant};

use distlock::Client;
use distlock_testkit::{RedisCluster, RedisServer};

/// The server the matrix names in `DISTLOCK_MATRIX_SERVER` (`redis-6.2`, `redis-7.0`,
/// `valkey-8.1`) is the one the kit starts, by `INFO server`: a leg that fell back to another
/// binary would pass for the wrong server. Without the variable (the suite), nothing to check.
#[test]
fn the_kit_runs_the_server_the_matrix_names() {
    let Ok(named) = std::env::var("DISTLOCK_MATRIX_SERVER") else {
        return;
    };
    let (product, version) = named.split_once('-').expect("<product>-<major.minor>");
    let info = RedisServer::start().info("server");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let (name, found) = match product {
        // Valkey names itself (`server_name:valkey`) and gives its own version beside the
        // Redis version it is compatible with.
        "valkey" => (field("server_name:"), field("valkey_version:")),
        _ => (
            Some(field("server_name:").unwrap_or_else(|| "redis".into())),
            field("redis_version:"),
        ),
    };
    assert_eq!(name.as_deref(), Some(product), "{info}");
    let found = found.unwrap_or_default();
    assert!(
        found.starts_with(&format!("{version}.")),
        "{named}: the kit ran {product} {found}"
    );
}

/// Commands the servers of `cluster` ran, but the kit's own probes (`INFO`, `CLUSTER ..`,
/// `CLIENT ..`) and replication's.
fn lock_commands(cluster: &RedisCluster) -> u64 {
    (0..cluster.len())
        .flat_map(|i| cluster.server(i).commandstats())
        .filter(|(name, _)| {
            ![
                "info", "cluster", "client", "ping", "replconf", "psync", "select", "hello",
            ]
            .iter()
            .any(|probe| name == probe || name.starts_with(&format!("{probe}|")))
        })
        .map(|(_, calls)| calls)
        .sum()
}

/// `errorstat_ERR` of `INFO errorstats` (Redis 6.2 and later): how many `ERR` replies the
/// server gave, among them each refused `SSUBSCRIBE`. Read on one connection kept open: a
/// new one costs Redis 6.2 two `ERR`s (it refuses redis-rs's `CLIENT SETINFO`).
fn err_replies(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(conn)
        .expect("INFO errorstats");
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_ERR:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A waiter on a Cluster, 2 s behind a holder with a 10 s lease. With sharded pub/sub (7.0+,
/// Valkey) it sleeps subscribed and is woken by the release: a handful of commands. Without
/// (Redis 6.2, which refuses `SSUBSCRIBE`), `docs/deployments.md` promises that every mode
/// still locks, the release frees the lock, and the waiter finds it free by polling with
/// backoff: it gets the lock soon after the release, at a bounded cost. Before the backoff grew
/// between answered attempts, the waiter attempted every 1-2 ms (565 attempts in 2 s, about
/// 5,000 commands) and sent a refused `SSUBSCRIBE` with each; now its pause grows to 64 ms
/// (about 50 attempts), and a refused `SSUBSCRIBE` is not sent again for 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_waiter_is_woken_or_polls_at_a_bounded_cost() {
    let cluster = RedisCluster::start_with(3, 0, 5000);
    let sharded = common::has_sharded_pub_sub(cluster.server(0));
    let locks = Client::cluster(cluster.urls()).await.expect("connect");
    let name = "w";
    let master = cluster.master_of_slot(RedisCluster::slot_of(common::lock_key(name).as_bytes()));
    let guard = locks
        .lock(name)
        .ttl(Duration::from_secs(10))
        .try_acquire()
        .await
        .expect("free");
    let mut probe = cluster.server(master).connection();
    let commands_before = lock_commands(&cluster);
    let errors_before = err_replies(&mut probe);
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock(name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("the waiter gets the lock");
            let got = Instant::now();
            guard.release().await.expect("release");
            got
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refusals = err_replies(&mut probe) - errors_before;
    let commands = lock_commands(&cluster) - commands_before;
    let released = Instant::now();
    guard.release().await.expect("release");
    let got = waiter.await.expect("waiter");
    let after = got.saturating_duration_since(released);
    println!(
        "sharded pub/sub: {sharded}; {commands} commands in 2 s of waiting, {refusals} ERR \
         replies; the lock {after:?} after the release"
    );
    assert!(
        after < Duration::from_secs(2),
        "the lock {after:?} after the release"
    );
    if sharded {
        assert!(
            commands <= 20,
            "a subscribed waiter costs a few commands: {commands}"
        );
        assert_eq!(refusals, 0);
    } else {
        // About 8 commands per polling attempt (the acquire script's and its replication's):
        // at most a few hundred, not thousands.
        assert!(
            commands <= 1_000,
            "a polling waiter cost {commands} commands in 2 s"
        );
        assert!(refusals <= 1, "SSUBSCRIBE sent {refusals} times in 2 s");
    }
}
