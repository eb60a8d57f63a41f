//! Faults on demand: a lease ended now, replies lost, a proxy gone silent.

use super::*;

#[tokio::test]
async fn end_lease_is_seen_by_the_guard_at_once() {
    let server = TestServer::start().await.unwrap();
    // A long lease: without end_lease's renewal now, the loss would take 20 s to show.
    let locks = server.client().await.unwrap();
    let guard = locks
        .lock("e")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert!(lock_state(&locks, "e").await.unwrap().is_held_by(&guard));
    let started = Instant::now();
    assert!(end_lease(&locks, "e").await.unwrap());
    let lost = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("lost in time");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!guard.is_held());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!exists(&server, "distlock:{e}").await);
    assert!(!lock_state(&locks, "e").await.unwrap().is_held());
    // Nothing held: nothing ended.
    assert!(!end_lease(&locks, "free").await.unwrap());
}

#[tokio::test]
async fn end_lease_ends_write_and_read_holds() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let writer = locks
        .write("w")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    end_lease(&locks, "w").await.unwrap();
    tokio::time::timeout(PATIENCE, writer.lost())
        .await
        .expect("writer lost");
    let reader = locks
        .read("w")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert_eq!(lock_state(&locks, "w").await.unwrap().holders(), 1);
    end_lease(&locks, "w").await.unwrap();
    tokio::time::timeout(PATIENCE, reader.lost())
        .await
        .expect("reader lost");
}

#[distributed_lock(key = "body:<id>", ttl = "60s")]
async fn long_body(id: u64, reached: tokio::sync::mpsc::Sender<&'static str>) -> Result<(), Error> {
    reached.send("started").await.ok();
    // Waits for ever: only the lease's loss ends it.
    std::future::pending::<()>().await;
    reached.send("finished").await.ok();
    Ok(())
}

#[tokio::test]
async fn end_lease_cancels_a_locked_body() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let call = tokio::spawn(distlock::scope_default(locks.clone(), long_body(1, tx)));
    assert_eq!(rx.recv().await, Some("started"));
    end_lease(&locks, "body:1").await.unwrap();
    let result = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("cancelled in time")
        .unwrap();
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    // The body was dropped where it waited: it never reached its end.
    assert_eq!(rx.recv().await, None);
}

#[tokio::test]
async fn lost_replies_are_sent_again_and_counted_once() {
    let server = TestServer::start().await.unwrap();
    let proxy = FaultProxy::in_front_of(&server).unwrap();
    let locks = Client::connect(&proxy.url()).await.unwrap();
    proxy.drop_next_replies(2);
    let guard = locks
        .lock("d")
        .fencing(true)
        .acquire()
        .await
        .expect("retried");
    assert_eq!(proxy.replies_dropped(), 2);
    let state = lock_state(&locks, "d").await.unwrap();
    assert!(state.is_held_by(&guard));
    assert_eq!(state.fencing_token(), guard.fencing_token());
    // The next reply passes.
    guard.release().await.unwrap();
    assert_eq!(proxy.replies_dropped(), 2);
}

#[tokio::test]
async fn a_blackholed_proxy_is_silent_and_comes_back() {
    let server = TestServer::start().await.unwrap();
    let proxy = FaultProxy::in_front_of(&server).unwrap();
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    proxy.blackhole(true);
    let e = locks
        .lock("b")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    proxy.blackhole(false);
    let guard = locks.lock("b").acquire().await.expect("answers again");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn end_lease_lets_a_sleeping_waiter_in_now() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let other = server.client().await.unwrap();
    let guard = locks
        .lock("w8")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .lock("w8")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    assert!(wait_for_waiters(&other, "w8", 1, PATIENCE).await.unwrap());
    let started = Instant::now();
    end_lease(&locks, "w8").await.unwrap();
    // Not at the holder's lease's end, 60 s away: now.
    let next = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("woken now")
        .unwrap()
        .expect("the waiter holds it");
    assert!(started.elapsed() < PATIENCE);
    assert!(lock_state(&other, "w8").await.unwrap().is_held_by(&next));
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the old holder knows");
}
