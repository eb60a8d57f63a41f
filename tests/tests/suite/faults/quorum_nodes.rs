//! Permanent errors and a frozen node among a quorum's nodes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_on_a_majority_of_quorum_nodes_fail_at_once_with_their_cause() {
    let nodes = RedisServers::start(5);
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum");
    // The application's own value at the lock key on three nodes.
    for node in nodes.iter().take(3) {
        let _: () = node
            .async_connection()
            .await
            .set(lock_key("taken-by-app"), "user data")
            .await
            .expect("SET");
    }
    let err = locks
        .lock("taken-by-app")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached { .. }), "{err}");
    assert!(
        !err.is_retryable(),
        "a permanent cause reported as retryable: {err}"
    );
    assert!(
        err.to_string().contains("string"),
        "the cause is hidden: {err}"
    );
    // Out of memory on three nodes: every write is refused there.
    for node in nodes.iter().skip(2) {
        let mut c = node.async_connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("1")
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
    }
    let err = locks
        .lock("oom")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("OOM"),
        "the cause is hidden: {err}"
    );
    // One node with a permanent error is a minority: the lock still works.
    for node in nodes.iter().skip(2) {
        let mut c = node.async_connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("0")
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
    }
    for node in nodes.iter().skip(1).take(2) {
        let _: () = node
            .async_connection()
            .await
            .del(lock_key("taken-by-app"))
            .await
            .expect("DEL");
    }
    let g = locks
        .lock("taken-by-app")
        .acquire()
        .await
        .expect("a majority is free");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_does_not_swallow_the_release_a_quorum_waiter_listens_for() {
    let mut nodes = RedisServers::start(5);
    let connect = || {
        Client::quorum_builder(nodes.urls())
            .restart_delay(Duration::ZERO)
            .connect()
    };
    let holder_client = connect().await.expect("quorum");
    let waiter_client = connect().await.expect("quorum");
    let holder = holder_client
        .lock("wake-q")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("free");
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("wake-q")
            .wait(Duration::from_secs(120))
            .acquire()
            .await
            .map(|g| g.is_held())
    });
    // The waiter listens on node 0 (the node it preferred before this fix)...
    let first = nodes[0].async_connection().await;
    let listening = wait_until_async(EVENT_LIMIT, || subscribed(&first, "wake-q")).await;
    assert!(listening, "the waiter never subscribed");
    // ...which freezes before the holder releases.
    nodes[0].pause();
    holder.release().await.expect("a majority released");
    let held = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("the waiter heard the release from another node")
        .expect("task")
        .expect("acquired");
    assert!(held, "the waiter holds the lock");
    nodes[0].resume();
}
