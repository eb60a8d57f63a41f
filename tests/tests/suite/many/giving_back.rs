//! A dropped or failed acquisition leaves no name taken.

use super::*;

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
