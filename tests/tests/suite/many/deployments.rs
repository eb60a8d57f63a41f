//! A Redis Cluster (a slot group at a time), a quorum and Sentinel.

use super::*;

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

    // A fenced set: one token, above each name's (the counter of the last slot far ahead).
    let token = fenced_set_token(
        &mut raw,
        [first, last],
        |name| locks.lock(name),
        |names| locks.lock_many(names),
    )
    .await;
    assert!(fenced_token(locks.lock(first)).await > token);

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
