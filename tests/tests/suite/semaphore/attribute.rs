//! The `#[semaphore]` attribute admits its permits.

use super::*;

static INSIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// At most 2 exports per tenant run at once.
#[semaphore(key = "export:<tenant>", permits = 2, ttl = "5s", wait = "30s", client = locks)]
async fn export(locks: &Client, tenant: &str) -> Result<usize, Error> {
    use std::sync::atomic::Ordering;
    let here = INSIDE.fetch_add(1, Ordering::AcqRel) + 1;
    MOST.fetch_max(here, Ordering::AcqRel);
    tokio::time::sleep(Duration::from_millis(20)).await;
    INSIDE.fetch_sub(1, Ordering::AcqRel);
    Ok(tenant.len())
}

/// The attribute asks for its own number of permits (a holder that recorded another makes
/// the call fail, without running the body), and six calls at once run two at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_admits_its_permits() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let three = locks
        .semaphore("export:acme", 3)
        .try_acquire()
        .await
        .expect("free");
    let err = as_other_owner(export(&locks, "acme")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                permits: 2,
                recorded: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        MOST.load(std::sync::atomic::Ordering::Acquire),
        0,
        "the body never ran"
    );
    three.release().await.expect("release");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let locks = locks.clone();
        calls.spawn(async move { export(&locks, "acme").await });
    }
    while let Some(call) = calls.join_next().await {
        assert_eq!(call.expect("task").expect("every call runs"), 4);
    }
    assert_eq!(MOST.load(std::sync::atomic::Ordering::Acquire), 2);
    assert_eq!(common::pttl(&server, "export:acme").await, -2);
}
