//! A release wakes one waiter; a local waiter gets a released permit without a command.

use super::*;

/// A release wakes one waiter, with no polling: two waiters of another client sleep (each in
/// its hand-off slot, the event that says it sleeps); one permit released by the holder's
/// client is one `PUBLISH` and one acquire attempt, by one waiter, which gets it; the other
/// sleeps on until the next release. The holders' ttl (30 s) is far beyond the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter() {
    let server = RedisServer::start();
    let holders = client(&server).await;
    let waiters = client(&server).await;
    let ttl = Duration::from_secs(30);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            holders
                .semaphore("wake", 2)
                .ttl(ttl)
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (waiters, got_tx) = (waiters.clone(), got_tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .semaphore("wake", 2)
                .ttl(ttl)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a waiter gets a permit");
            got_tx.send(Instant::now()).expect("the test listens");
            guard
        }));
    }
    let asleep = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::handoff_waiters(&waiters, "wake") == 2
    })
    .await;
    assert!(asleep, "both waiters sleep");
    let before = server.commandstats();
    let calls = |stats: &std::collections::BTreeMap<String, u64>, cmd: &str| {
        stats.get(cmd).copied().unwrap_or(0)
    };
    let released = Instant::now();
    held.pop().expect("two").release().await.expect("release");
    let woken = tokio::time::timeout(EVENT_LIMIT, got.recv())
        .await
        .expect("a waiter got the permit long before the holders' ttl")
        .expect("sent");
    println!("released to acquired: {:?}", woken - released);
    let after = server.commandstats();
    assert_eq!(calls(&after, "publish") - calls(&before, "publish"), 1);
    // The release, and the one waiter's attempt.
    assert_eq!(
        calls(&after, "evalsha") - calls(&before, "evalsha"),
        2,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        distlock::__private::handoff_waiters(&waiters, "wake"),
        1,
        "the other waiter sleeps on"
    );
    held.pop().expect("one").release().await.expect("release");
    tokio::time::timeout(EVENT_LIMIT, got.recv())
        .await
        .expect("the second waiter is woken by the second release")
        .expect("sent");
    for task in tasks {
        task.await
            .expect("waiter task")
            .release()
            .await
            .expect("release");
    }
}

/// A permit released while a task of the same client waits for one passes to it with no
/// command to Redis (the local hand-off): the server sees one unbroken permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_permit_passes_to_a_local_waiter_without_a_command() {
    let server = RedisServer::start();
    let locks = Client::builder(&server.url())
        .local_handoff(8, Duration::from_secs(3600))
        .connect()
        .await
        .expect("connect");
    let held = locks
        .semaphore("passed", 1)
        .try_acquire()
        .await
        .expect("free");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .semaphore("passed", 1)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let ready = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::handoff_waiters(&locks, "passed") == 1
    })
    .await;
    assert!(ready, "the waiter sleeps in its hand-off slot");
    let before = members(&server, "passed").await;
    let scripts = server.commandstats().get("evalsha").copied();
    held.release().await.expect("release");
    let passed = waiter
        .await
        .expect("task")
        .expect("the waiter gets the permit");
    assert!(passed.is_held());
    assert_eq!(server.commandstats().get("evalsha").copied(), scripts);
    assert_eq!(members(&server, "passed").await, before, "the same permit");
    passed.release().await.expect("release");
    assert_eq!(common::pttl(&server, "passed").await, -2);
}
