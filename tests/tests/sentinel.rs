//! Locks through Sentinel (1 master, 2 replicas, 3 sentinels), formed once for this binary:
//! contention across processes, and a failover (the master killed) that clients follow.

use distlock_testkit::common;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use common::{lock_key, run_contenders};
use distlock::{Client, Error};
use distlock_testkit::{Keeper, Observer, RedisSentinel, RedisServer};

static SENTINEL: LazyLock<Keeper<RedisSentinel>> =
    LazyLock::new(|| Keeper::new(RedisSentinel::start));

/// How long after the master is killed operations must work again: `down-after-milliseconds`
/// (1 s), the sentinels' vote and the promotion, the client asking the sentinels again, with
/// room for a loaded machine.
const RESUME_LIMIT: Duration = Duration::from_secs(30);

fn sentinels() -> (Vec<String>, &'static str) {
    SENTINEL.with(|s| (s.sentinel_urls(), s.master_name()))
}

async fn client() -> Client {
    let (urls, master) = sentinels();
    Client::sentinel(urls, master)
        .await
        .expect("connect through the sentinels")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_excludes_across_processes_through_sentinel() {
    let _serial = SENTINEL.serial().await;
    let observer_server = RedisServer::start();
    let (urls, master) = sentinels();
    let url = format!("sentinel:{master}@{}", urls.join(","));
    // The plain setnx acquire, and the fencing scripts (whose tokens the observers check).
    for kind in ["setnx", "setnx+fenced", "reentrant+fenced", "write+fenced"] {
        let prefix = format!("s-{kind}");
        let sections = run_contenders(
            2,
            &[
                "spread",
                kind,
                &url,
                &observer_server.url(),
                &prefix,
                "4",
                "4",
                "2",
            ],
        );
        assert!(sections.iter().all(|&n| n > 0), "{kind}: {sections:?}");
        for i in 0..4 {
            let observer =
                Observer::connect(&observer_server.url(), &format!("{prefix}-{i}")).await;
            common::assert_safe(&observer).await;
        }
    }
}

/// The master is killed while a lock is held. The clients follow the promoted replica; the
/// holder keeps its (acknowledged) lease, or is told it lost it; no second owner gets in
/// while the holder is told it holds the lock; tokens keep growing; nothing is written to
/// the old master when it comes back as a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_a_failover_and_keep_exclusion() {
    let _serial = SENTINEL.serial().await;
    let (urls, master_name) = sentinels();
    let holder = Client::sentinel_builder(urls.clone(), master_name)
        .replicas(1, Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let other = client().await;
    let name = "s-failover";
    let guard = holder
        .lock(name)
        .ttl(Duration::from_secs(15))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let before = guard.fencing_token().expect("fencing(true)");
    let old = SENTINEL.with(|s| s.master().expect("a master"));
    let killed = Instant::now();
    SENTINEL.with(move |s| s.server_mut(old).kill());
    let mut busy_on_new_master = false;
    while killed.elapsed() < RESUME_LIMIT {
        match other.lock(name).try_acquire().await {
            Ok(_second) => {
                assert!(
                    !guard.is_held(),
                    "a second owner got in while the first is told it holds the lock"
                );
                break;
            }
            Err(Error::Busy { .. }) if SENTINEL.with(move |s| s.master() != Some(old)) => {
                busy_on_new_master = true;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    println!(
        "operations resumed {:?} after the kill (lock kept: {busy_on_new_master})",
        killed.elapsed()
    );
    assert!(
        killed.elapsed() < RESUME_LIMIT,
        "operations resumed in time"
    );
    assert!(
        busy_on_new_master,
        "the acknowledged lock survived the failover"
    );
    assert!(guard.is_held());
    guard
        .release()
        .await
        .expect("the holder releases on the new master");
    let next = other
        .lock(name)
        .wait(RESUME_LIMIT)
        .fencing(true)
        .acquire()
        .await
        .expect("the next owner gets it");
    let after = next.fencing_token().expect("fencing(true)");
    assert!(after > before, "tokens never go backwards");
    next.release().await.expect("release");
    // The old master returns as a replica: the clients keep writing to the new master only.
    SENTINEL.with(move |s| {
        s.server_mut(old).restart();
        s.wait_settled();
    });
    let guard = holder.lock(name).try_acquire().await.expect("free");
    let new_master = SENTINEL.with(|s| s.master().expect("a master"));
    assert_ne!(new_master, old);
    let on_new: bool = SENTINEL.with(move |s| {
        redis::cmd("EXISTS")
            .arg(lock_key(name))
            .query(&mut s.server(new_master).connection())
            .expect("EXISTS")
    });
    assert!(on_new, "the lock is on the new master");
    guard.release().await.expect("release");
}

/// The README's least-privilege rules through Sentinel: the data servers' user also needs
/// `ROLE` (the client checks that the server the sentinels name is a master), the sentinels'
/// user only `SENTINEL GET-MASTER-ADDR-BY-NAME`. Every mode works with just that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privileged_user_runs_every_mode() {
    let _serial = SENTINEL.serial().await;
    let data_rules = format!("{} +role", common::ACL_RULES);
    let sentinel_rules = "+@connection +sentinel|get-master-addr-by-name";
    let urls = SENTINEL.with(move |s| {
        // ACLs are per server: every data server (any may be promoted) and every sentinel.
        for i in 0..s.len() {
            common::add_locker(s.server(i), &data_rules);
        }
        (0..s.sentinel_urls().len())
            .map(|i| common::add_locker(s.sentinel(i), sentinel_rules))
            .collect::<Vec<_>>()
    });
    let master = SENTINEL.with(|s| s.master_name());
    let locks = Client::sentinel(urls, master)
        .await
        .expect("connect as the locking user");
    common::every_mode_works(&locks, "acl").await;
}
