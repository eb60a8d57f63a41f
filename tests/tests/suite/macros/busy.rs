//! A busy lock: `Busy` or a timeout, or (`on_busy = "skip"`) the default, and the body never runs.

use super::*;

#[distributed_lock(key = "busy:<id>", client = locks, wait = "0s")]
async fn once(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[distributed_lock(key = "busy:<id>", client = locks, wait = "300ms")]
async fn patient(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn busy_lock_returns_busy_or_timeout_and_never_runs_the_body() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let held = as_other_owner(locks.lock("busy:1").try_acquire())
        .await
        .expect("free");

    let busy = once(&locks, 1, &ran).await.unwrap_err().lock();
    assert!(
        matches!(busy, Error::Busy { ref name } if name == "busy:1"),
        "{busy}"
    );

    let started = Instant::now();
    let timeout = patient(&locks, 1, &ran).await.unwrap_err().lock();
    assert!(matches!(timeout, Error::Timeout { .. }), "{timeout}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!ran.load(Ordering::SeqCst), "a body ran without the lock");

    held.release().await.expect("release");
    assert_eq!(once(&locks, 1, &ran).await.expect("free again"), 1);
    assert!(ran.load(Ordering::SeqCst));
}

#[distributed_lock(key = "report:<day>", client = locks, wait = "0s", on_busy = "skip")]
async fn report(locks: &Client, day: u32, ran: &AtomicBool) -> Result<Option<u32>, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(Some(day))
}

#[distributed_lock(key = "report:<day>", client = locks, wait = "200ms", on_busy = "skip")]
async fn report_unit(locks: &Client, day: u32, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn busy_lock_with_skip_returns_the_default_without_running_the_body() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let held = as_other_owner(locks.lock("report:7").try_acquire())
        .await
        .expect("free");
    assert_eq!(report(&locks, 7, &ran).await.expect("skipped"), None);
    let started = Instant::now();
    report_unit(&locks, 7, &ran)
        .await
        .expect("skipped after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "waited first"
    );
    assert!(!ran.load(Ordering::SeqCst), "a skipped body ran");

    held.release().await.expect("release");
    assert_eq!(report(&locks, 7, &ran).await.expect("ran"), Some(7));
    assert!(ran.load(Ordering::SeqCst));
}
