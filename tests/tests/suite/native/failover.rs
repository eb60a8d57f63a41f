//! A real Sentinel failover from a server without `SET .. IFEQ` to one with it.

use std::time::{Duration, Instant};

use distlock::Client;
use distlock_testkit::RedisSentinel;

use super::{holder, native_binary, renewals, scripts_binary, wait_renewed};
use crate::common;

/// Long enough to outlast the failover (`down-after-milliseconds` 1 s, the vote, the
/// promotion, the client asking the sentinels again) on a loaded machine.
const TTL: Duration = Duration::from_secs(15);
const RENEW_EVERY: Duration = Duration::from_millis(200);

/// A Sentinel group whose master is Redis 7.0 and whose replica is Valkey 8.1 (Valkey loads
/// Redis 7.0's RDB; the reverse fails). A client following the master through the sentinels
/// holds a fenced setnx lock, renewed by script on Redis 7.0. The master is killed, the
/// sentinels promote Valkey; the client finds it, reads its commands again and renews there
/// natively (Valkey's `SET` calls grow, its script calls do not); the lock is held throughout,
/// and the next holder's fencing token is above the first's. About 10 s (the replica's
/// first sync, the failover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_to_valkey_renews_natively_on_the_promoted_master() {
    let Some(native) = native_binary() else {
        return;
    };
    let scripts = scripts_binary();
    let mut group = RedisSentinel::start_with_binaries(&[&scripts, &native], 3);
    assert!(
        !common::has_set_ifeq(group.server(0)) && common::has_set_ifeq(group.server(1)),
        "the master must lack SET .. IFEQ and the replica have it"
    );
    let locks = Client::sentinel_builder(group.sentinel_urls(), group.master_name())
        // An acquisition returns once the replica has the key and the fencing counter.
        .replicas(1, Duration::from_millis(500))
        .connect()
        .await
        .expect("connect through the sentinels");
    let name = "failover-native";
    let guard = locks
        .lock(name)
        .ttl(TTL)
        .renew_every(RENEW_EVERY)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let first = guard.fencing_token().expect("fencing(true)");
    let token = holder(group.server(0), name).expect("held on the master");
    wait_renewed(group.server(0), renewals(group.server(0)), false, 3).await;

    group.server_mut(0).kill();
    let killed = Instant::now();
    let (promoted, took) = tokio::task::block_in_place(|| group.wait_failover(0));
    assert_eq!(promoted, 1);
    println!("Valkey promoted {took:?} after the kill");
    let before = renewals(group.server(1));
    wait_renewed(group.server(1), before, true, 10).await;
    println!(
        "renewing natively on Valkey {:?} after the kill",
        killed.elapsed()
    );
    assert!(guard.is_held(), "the lease was lost over the failover");
    assert_eq!(
        holder(group.server(1), name).as_deref(),
        Some(token.as_str())
    );
    guard.release().await.expect("release on Valkey");

    // Another client, without the replica the first one waits for: none is left (Redis 7.0
    // cannot replicate from Valkey 8.1).
    let other = Client::sentinel(group.sentinel_urls(), group.master_name())
        .await
        .expect("connect through the sentinels");
    let next = other
        .lock(name)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free after the release");
    let second = next.fencing_token().expect("fencing(true)");
    assert!(
        second > first,
        "fencing went back: {first:?} then {second:?}"
    );
    next.release().await.expect("release");
}
