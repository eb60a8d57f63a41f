//! Losing the lease while the body runs; fixed leases and `max_hold`; a dropped call.

use super::*;

#[distributed_lock(key = "lost:<id>", client = locks, ttl = "600ms")]
async fn long_job(
    locks: &Client,
    id: u32,
    started: &Notify,
    dropped: Arc<AtomicBool>,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    let _flag = DropFlag(dropped);
    started.notify_one();
    tokio::time::sleep(Duration::from_secs(10)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn lost_lease_cancels_the_body_and_returns_lease_lost() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, dropped, finished) = (
        Notify::new(),
        Arc::new(AtomicBool::new(false)),
        AtomicBool::new(false),
    );
    let call = long_job(&locks, 1, &started, dropped.clone(), &finished);
    let deleter = async {
        started.notified().await;
        delete(&conn, "lost:1").await;
        Instant::now()
    };
    let (result, deleted_at) = tokio::join!(call, deleter);
    let noticed_after = deleted_at.elapsed();
    let lost = result.unwrap_err().lock();
    assert!(
        matches!(lost, Error::LeaseLost { ref name, .. } if name == "lost:1"),
        "{lost}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the body was not dropped");
    assert!(!finished.load(Ordering::SeqCst));
    // The watchdog renews every ttl/3 = 200 ms; its refused renewal is the signal.
    assert!(
        noticed_after < Duration::from_secs(3),
        "noticed after {noticed_after:?}"
    );
}

#[distributed_lock(key = "cont:<id>", client = locks, ttl = "600ms", on_lost = "continue")]
async fn cooperative(
    locks: &Client,
    id: u32,
    started: &Notify,
    finished: &AtomicBool,
) -> Result<u32, AppError> {
    let lease = distlock::lease().expect("inside a locked fn");
    assert!(lease.is_held());
    started.notify_one();
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the body saw the loss");
    assert!(!lease.is_held());
    assert!(!distlock::lease().expect("still inside").is_held());
    finished.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn lost_lease_with_continue_lets_the_body_finish_and_observe_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, finished) = (Notify::new(), AtomicBool::new(false));
    let deleter = async {
        started.notified().await;
        delete(&conn, "cont:1").await;
    };
    let (result, ()) = tokio::join!(cooperative(&locks, 1, &started, &finished), deleter);
    assert!(finished.load(Ordering::SeqCst), "the body was cut short");
    // The body returned Ok, but not under the lock: the caller is told.
    let lost = result.unwrap_err().lock();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
}

#[distributed_lock(key = "fixed:<id>", client = locks, ttl = "300ms", watchdog = false)]
async fn fixed_lease(locks: &Client, id: u32) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[distributed_lock(key = "capped:<id>", client = locks, ttl = "300ms", max_hold = "700ms")]
async fn capped(locks: &Client, id: u32) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[tokio::test]
async fn fixed_lease_and_max_hold_end_the_hold_on_time() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let started = Instant::now();
    let lost = fixed_lease(&locks, 1).await.unwrap_err().lock();
    let took = started.elapsed();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(
        took < Duration::from_secs(2),
        "a fixed 300 ms lease ended after {took:?}"
    );

    let started = Instant::now();
    let lost = capped(&locks, 1).await.unwrap_err().lock();
    let took = started.elapsed();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    // Renewed past the 300 ms ttl, then let run out after the 700 ms cap.
    assert!(
        took > Duration::from_millis(600),
        "renewal stopped early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the cap was not applied: {took:?}"
    );
}

#[tokio::test]
async fn a_dropped_call_releases_its_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, dropped, finished) = (
        Notify::new(),
        Arc::new(AtomicBool::new(false)),
        AtomicBool::new(false),
    );
    let call = long_job(&locks, 2, &started, dropped.clone(), &finished);
    // Dropped once its body runs (the lock is held then), however long getting there takes
    // on a loaded machine.
    let cut = async {
        tokio::select! {
            _ = call => false,
            _ = started.notified() => true,
        }
    };
    assert!(cut.await, "the call ended before it was dropped");
    assert!(dropped.load(Ordering::SeqCst));
    let freed = wait_until_async(Duration::from_secs(2), || async {
        !exists(&conn, "lost:2").await
    })
    .await;
    assert!(freed, "the lock of a dropped call was not released");
}
