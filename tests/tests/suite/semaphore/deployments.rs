//! A semaphore on a Redis Cluster.

use super::*;

/// On a Redis Cluster (3 masters): the semaphore and its fencing counter share one slot, a
/// waiter is woken by sharded pub/sub, and the limit holds across two processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_cluster() {
    let cluster = RedisCluster::start_with(3, 0, 1500);
    let seeds = cluster.urls();
    let locks = Client::cluster(seeds.clone())
        .await
        .expect("connect to the cluster");
    let slot = RedisCluster::slot_of(lock_key("c-sem").as_bytes());
    assert_eq!(RedisCluster::slot_of(fence_key("c-sem").as_bytes()), slot);
    let master = cluster.master_of_slot(slot);
    let a = locks
        .semaphore("c-sem", 2)
        .ttl(Duration::from_secs(30))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let b = locks
        .semaphore("c-sem", 2)
        .ttl(Duration::from_secs(30))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(b.fencing_token() > a.fencing_token());
    let card: usize = redis::cmd("ZCARD")
        .arg(lock_key("c-sem"))
        .query(&mut cluster.server(master).connection())
        .expect("the semaphore is on its slot's master");
    assert_eq!(card, 3);
    // Another client waits; the release wakes it long before the 30 s leases end.
    let other = Client::cluster(seeds.clone())
        .await
        .expect("connect to the cluster");
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = other
            .semaphore("c-sem", 2)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("a permit after the release");
        let waited = started.elapsed();
        guard.release().await.expect("release");
        waited
    });
    // Without sharded pub/sub (Redis 6.2) the waiter polls instead.
    let subscribed = !common::has_sharded_pub_sub(cluster.server(master))
        && common::polling_started().await
        || wait_until_async(EVENT_LIMIT, || async {
            let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(lock_key("c-sem"))
                .query(&mut cluster.server(master).connection())
                .expect("PUBSUB SHARDNUMSUB");
            counts.first().is_some_and(|(_, n)| *n > 0)
        })
        .await;
    assert!(subscribed, "the waiter listens on the slot's shard channel");
    a.release().await.expect("release");
    let waited = waiter.await.expect("waiter");
    assert!(waited < Duration::from_secs(20), "woken after {waited:?}");
    b.release().await.expect("release");

    let observer_server = RedisServer::start();
    let url = format!("cluster:{}", seeds.join(","));
    let per_process = run_contenders(
        2,
        &[
            "permits",
            "semaphore:2",
            &url,
            &observer_server.url(),
            "c-sem-mx",
            "4",
            "200",
        ],
    );
    assert!(per_process.iter().all(|&n| n > 0), "{per_process:?}");
    let observer = Observer::connect(&observer_server.url(), "c-sem-mx").await;
    assert_eq!(observer.max_occupancy().await, 2);
}
