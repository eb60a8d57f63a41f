//! The limit: the permits bound the holders, in one process and across processes; a killed
//! holder frees only its own permit; holders that disagree on the limit get an error.

use super::*;

#[tokio::test]
async fn the_permits_bound_the_holders_and_a_release_frees_one() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    // One task may hold several permits: each acquisition is one.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            locks
                .semaphore("pool", 3)
                .try_acquire()
                .await
                .expect("a permit is free"),
        );
    }
    let busy = as_other_owner(locks.semaphore("pool", 3).try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(busy, Error::Busy { ref name } if name == "pool"),
        "{busy}"
    );
    let timeout = locks
        .semaphore("pool", 3)
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(timeout, Error::Timeout { .. }), "{timeout}");
    // The limit and one member per permit.
    let set = members(&server, "pool").await;
    assert_eq!(set.len(), 4, "{set:?}");
    assert_eq!(set[0], ("permits".to_owned(), -3.0));
    held.pop().expect("three").release().await.expect("release");
    assert_eq!(members(&server, "pool").await.len(), 3);
    let again = locks
        .semaphore("pool", 3)
        .try_acquire()
        .await
        .expect("the released permit is free");
    assert!(held.iter().all(|g| g.is_held()));
    again.release().await.expect("release");
    for guard in held {
        guard.release().await.expect("release");
    }
    assert_eq!(common::pttl(&server, "pool").await, -2, "nothing is left");
}

#[tokio::test]
async fn zero_permits_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let err = locks.semaphore("none", 0).try_acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { reason } if reason.contains("at least 1 permit")),
        "{err}"
    );
    assert_eq!(common::pttl(&server, "none").await, -2);
}

/// Two contender processes x four tasks take permits of one semaphore of 3 until the observer
/// counted 600 sections: each process's own probe never counts more than 3 of its tasks
/// inside (the contender fails otherwise), and the observer's probe, on a server of its own,
/// never more than 3 holders of both processes together; it does reach 3 (the probe sees
/// holders overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_never_exceeded_across_processes() {
    let server = RedisServer::start();
    permits_across_processes("semaphore:3", &server.url(), "sem-mx", 600).await;
}

/// The same with fencing: every permit taken mints a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_never_exceeded_across_processes_with_fencing() {
    let server = RedisServer::start();
    permits_across_processes("semaphore:3+fenced", &server.url(), "sem-mx-f", 300).await;
}

async fn permits_across_processes(kind: &str, url: &str, name: &str, target: u64) {
    let observer_server = RedisServer::start();
    let per_process = run_contenders(
        2,
        &[
            "permits",
            kind,
            url,
            &observer_server.url(),
            name,
            "4",
            &target.to_string(),
        ],
    );
    let total: u64 = per_process.iter().sum();
    assert!(total >= target, "only {total} sections ran");
    assert!(
        per_process.iter().all(|&n| n > 0),
        "every process got permits: {per_process:?}"
    );
    let observer = Observer::connect(&observer_server.url(), name).await;
    assert_eq!(
        observer.max_occupancy().await,
        3,
        "at most 3 holders, and 3 met"
    );
    assert_eq!(observer.occupancy().await, 0);
    assert_eq!(observer.acked().await, total);
}

/// A holder process killed with SIGKILL never releases: its one permit frees when its own
/// lease runs out, not before, while this process's two permits stay held, renewed by the
/// watchdog all along (the dead holder's permit is not kept alive by their renewals), and
/// exactly one permit is free then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_exactly_its_own_permit_at_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut mine = Vec::new();
    for _ in 0..2 {
        mine.push(
            locks
                .semaphore("crash", 3)
                .ttl(Duration::from_millis(600))
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let (mut holder, _) = spawn_holder("semaphore:3", &server.url(), "crash", 1500);
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap the holder");
    let asked = Instant::now();
    let now = server_ms(&server).await;
    let set = members(&server, "crash").await;
    assert_eq!(set.len(), 4, "the limit and three permits: {set:?}");
    // The dead holder's lease ends last: it was taken last, with the longest ttl.
    let (_, dead_ends) = set.last().expect("members").clone();
    let left = dead_ends as i64 - now;
    assert!(
        left > 0,
        "the dead holder's permit outlives it until its ttl"
    );
    let expires_no_earlier_than = asked + Duration::from_millis(left as u64);
    let renewals = locks.renewal_round_trips();

    let busy = as_other_owner(locks.semaphore("crash", 3).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let third = locks
        .semaphore("crash", 3)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("the dead holder's permit frees at its ttl");
    // TIME and ZSCORE are whole milliseconds: allow one.
    assert!(
        Instant::now() + Duration::from_millis(1) >= expires_no_earlier_than,
        "a permit freed before the dead holder's ttl ran out"
    );
    assert!(
        locks.renewal_round_trips() > renewals,
        "the other permits were renewed meanwhile"
    );
    assert!(mine.iter().all(|g| g.is_held()), "our permits stayed held");
    let busy = locks.semaphore("crash", 3).try_acquire().await.unwrap_err();
    assert!(
        matches!(busy, Error::Busy { .. }),
        "exactly one permit was freed: {busy}"
    );
    third.release().await.expect("release");
    for guard in mine {
        guard.release().await.expect("release");
    }
}

/// The limit is recorded by the holder that finds the name free; a request with another
/// number of permits is refused while a permit is held, and changes nothing.
#[tokio::test]
async fn holders_that_disagree_on_the_permits_get_an_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks
        .semaphore("limit", 3)
        .try_acquire()
        .await
        .expect("free");
    let before = members(&server, "limit").await;
    for permits in [2, 4] {
        let err = locks
            .semaphore("limit", permits)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap_err();
        match &err {
            Error::PermitsMismatch {
                name,
                permits: asked,
                recorded,
            } => {
                assert_eq!((name.as_str(), *asked, *recorded), ("limit", permits, 3));
            }
            other => panic!("expected PermitsMismatch, got {other}"),
        }
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("same number of permits"), "{err}");
    }
    assert_eq!(members(&server, "limit").await, before, "nothing changed");
    held.release().await.expect("release");
    // Free again: the next holder records its own number.
    let held = locks
        .semaphore("limit", 4)
        .try_acquire()
        .await
        .expect("free");
    assert_eq!(members(&server, "limit").await[0].1, -4.0);
    held.release().await.expect("release");
}
