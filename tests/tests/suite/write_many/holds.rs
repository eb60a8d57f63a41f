//! Re-entry, upgrade, lease and quorum; a lost reply; one fencing token for the set; a Redis
//! Cluster takes the set a slot at a time.

use super::*;

/// The owner is the task, as for `write`: a name it writes is re-entered (and stays held
/// after the set's release); a name it only reads is refused at once (`Upgrade`), nothing
/// taken; the guard is held only while every name is; a quorum refuses write sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_upgrade_lease_and_quorum() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let outer = locks.write("e-a").try_acquire().await.expect("free");
    let set = locks
        .write_many(["e-a", "e-b"])
        .try_acquire()
        .await
        .expect("re-enters e-a");
    set.release().await.expect("release");
    assert!(
        writer(&server, "e-a").await.is_some(),
        "the outer hold stays"
    );
    assert_eq!(writer(&server, "e-b").await, None);
    outer.release().await.expect("release");

    let read = locks.read("e-b").try_acquire().await.expect("free");
    let started = Instant::now();
    let err = locks
        .write_many(["e-a", "e-b"])
        .wait(LONG)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Upgrade { ref name } if name == "e-b"),
        "{err}"
    );
    assert!(started.elapsed() < EVENT_LIMIT, "refused at once");
    assert_eq!(writer(&server, "e-a").await, None, "nothing taken");
    read.release().await.expect("release");

    let set = locks
        .write_many(["e-a", "e-b", "e-c"])
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "the watchdog renews every name");
    let mut conn = server.async_connection().await;
    let _: () = conn.hdel(lock_key("e-b"), "writer").await.expect("HDEL");
    let lost = tokio::time::timeout(EVENT_LIMIT, set.lost())
        .await
        .expect("lost");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");

    let nodes = RedisServers::start(3);
    let quorum = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let err = quorum
        .write_many(["q-a", "q-b"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

/// A lost reply leaves no name held: a single try's error gives the set back, a waiter's
/// retry finds its own hold, and many cycles with a third of the replies lost leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_leaves_no_name_held() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    let names = ["l-a", "l-b", "l-c"];
    // One call site for every request: its process record is written with the first, so
    // the replies dropped below are the scripts'.
    let request = |names: &[&'static str]| locks.write_many(names.to_vec()).ttl(LONG);
    let warm = request(&names).try_acquire().await.expect("free");
    warm.release().await.expect("release");

    proxy.drop_next_reply();
    let err = request(&names).try_acquire().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    let none = || nothing_left(&server, &names);
    assert!(wait_until_async(EVENT_LIMIT, none).await, "given back");

    proxy.drop_next_reply();
    let set = request(&names)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("taken by the retry");
    for name in names {
        assert!(writer(&server, name).await.is_some(), "{name}");
    }
    set.release().await.expect("release");
    assert!(none().await);

    proxy.drop_replies(0.3);
    let mut taken = 0;
    for i in 0..45 {
        let pair = [names[i % 3], names[(i + 1) % 3]];
        let attempt = request(&pair).wait(Duration::from_millis(200)).acquire();
        if let Ok(Ok(set)) = tokio::time::timeout(Duration::from_millis(300), attempt).await {
            taken += 1;
            let _ = set.release().await;
        }
    }
    proxy.drop_replies(0.0);
    assert!(taken > 0, "no cycle went through");
    assert!(
        wait_until_async(EVENT_LIMIT, none).await,
        "names left behind"
    );
}

/// One token for the set, above each name's earlier write tokens (a counter far ahead
/// included); the next write of each name and a fenced read see it or above.
#[tokio::test]
async fn a_fenced_write_set_has_one_token_above_each_names() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut conn = server.async_connection().await;
    let token = fenced_set_token(
        &mut conn,
        ["f-a", "f-b"],
        |name| locks.write(name),
        |names| locks.write_many(names),
    )
    .await;
    assert_eq!(
        fenced_token(locks.read("f-a")).await,
        token,
        "a read after the set sees its token"
    );
    let mut last = token;
    for name in ["f-a", "f-b", "f-a"] {
        let t = fenced_token(locks.write(name)).await;
        assert!(t > last, "{name}: {t} after {last}");
        last = t;
        let t = fenced_token(locks.write_many(["f-a", "f-b"])).await;
        assert!(t > last, "the set after {name}");
        last = t;
    }
}

/// On a Redis Cluster a set spanning two masters is taken a slot at a time, excludes each
/// name's writers and readers, and a busy later slot leaves the earlier one free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_takes_a_write_set_a_slot_at_a_time() {
    let _serial = CLUSTER.serial().await;
    let seeds = CLUSTER.with(|c| c.urls());
    let locks = Client::cluster(seeds.clone()).await.expect("connect");
    let mut raw = redis::cluster::ClusterClient::new(seeds)
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect");
    let (first, last) = two_slots("wc");
    let (first, last) = (first.as_str(), last.as_str());
    let hold = as_other_owner(locks.write(last).ttl(LONG).try_acquire())
        .await
        .expect("free");
    let busy = locks
        .write_many([first, last])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let exists: bool = raw.exists(lock_key(first)).await.expect("EXISTS");
    assert!(!exists, "{first} given back");
    hold.release().await.expect("release");
    let set = locks
        .write_many([last, first])
        .ttl(Duration::from_secs(1))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(set.fencing_token().is_some());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "renewed on both slots");
    for name in [first, last] {
        let err = as_other_owner(locks.read(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{err}");
        let err = as_other_owner(locks.write(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{err}");
    }
    set.release().await.expect("release");
    for name in [first, last] {
        let exists: bool = raw.exists(lock_key(name)).await.expect("EXISTS");
        assert!(!exists, "{name} released");
    }
}
