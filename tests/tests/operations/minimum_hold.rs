//! The minimum hold of scheduled jobs.

use super::*;

// ---------------------------------------------------------------------------------------------
// The minimum hold.

async fn until_gone(server: &RedisServer, name: &str) -> Duration {
    let start = Instant::now();
    while pttl(server, name).await != -2 {
        assert!(start.elapsed() < EVENT_LIMIT, "{name} never went away");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test]
async fn a_release_before_the_minimum_hold_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let locks = client(&server).await;

    // Longer than the lease: the lease is extended to the minimum hold.
    let g = locks
        .lock("min:long")
        .ttl(Duration::from_millis(500))
        .min_hold(Duration::from_secs(3))
        .acquire()
        .await
        .expect("free");
    let acquired = Instant::now();
    g.release().await.expect("release");
    let left = pttl(&server, "min:long").await;
    assert!(
        left > 1000,
        "the lock must outlive its 500 ms lease: {left} ms"
    );
    let busy = as_other_owner(locks.lock("min:long").try_acquire()).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    until_gone(&server, "min:long").await;
    assert!(acquired.elapsed() >= Duration::from_millis(2900));

    // Shorter than the lease: released when the minimum hold ends, not at the lease's end.
    let g = locks
        .reentrant("min:short")
        .ttl(Duration::from_secs(30))
        .min_hold(Duration::from_millis(800))
        .acquire()
        .await
        .expect("free");
    g.release().await.expect("release");
    assert!(pttl(&server, "min:short").await > 20_000);
    let busy = as_other_owner(locks.reentrant("min:short").try_acquire()).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    until_gone(&server, "min:short").await; // long before the 30 s lease
    let g = as_other_owner(locks.reentrant("min:short").try_acquire())
        .await
        .expect("free again");
    g.release().await.expect("release");

    // Past the minimum hold already: an ordinary release.
    let g = locks
        .lock("min:past")
        .min_hold(Duration::from_millis(10))
        .acquire()
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(20)).await;
    g.release().await.expect("release");
    assert_eq!(pttl(&server, "min:past").await, -2);
}

#[distlock::distributed_lock(
    key = "report",
    client = locks,
    ttl = "5s",
    wait = "0s",
    min_hold = "2s",
    on_busy = "skip",
    on_error = "log"
)]
async fn nightly(locks: &distlock::Client, ran: &Mutex<u32>) {
    let _ = locks;
    *ran.lock().unwrap() += 1;
}

#[distlock::distributed_lock(key = "report-value", client = locks, on_error = "log")]
async fn answer(locks: Option<&distlock::Client>) -> Option<u32> {
    let _ = locks;
    Some(42)
}

#[tokio::test]
async fn a_skipping_logged_job_runs_once_per_minimum_hold_and_returns_nothing() {
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = Mutex::new(0);
    nightly(&locks, &ran).await;
    // Another instance whose timer fires a moment later: skipped, though the first finished.
    LockContext::new().scope(nightly(&locks, &ran)).await;
    assert_eq!(*ran.lock().unwrap(), 1);
    assert_eq!(trace.events("locked call skipped").len(), 1);
    until_gone(&server, "report").await;
    nightly(&locks, &ran).await;
    assert_eq!(*ran.lock().unwrap(), 2);

    // No client: logged, the body is not run, the default is returned.
    assert_eq!(answer(None).await, None);
    assert_eq!(trace.events("locked call not run").len(), 1);
    assert_eq!(answer(Some(&locks)).await, Some(42));
}
