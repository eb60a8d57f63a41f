//! Huge durations, one name in two modes, and fencing tokens across a restart without
//! persistence.

use super::*;

// ---------------------------------------------------------------------------------------------
// Item 7: huge durations, one name in two modes, permanent errors on a quorum.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_wait_and_hold_are_accepted_without_panicking() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let holder = locks
        .lock("forever")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    let waited = tokio::time::timeout(
        EVENT_LIMIT,
        as_other_owner(locks.lock("forever").wait(Duration::MAX).acquire()),
    )
    .await
    .expect("the waiter gets the lock once the short lease ends")
    .expect("acquired");
    drop(holder);
    waited.release().await.expect("release");
    let capped = locks
        .lock("forever")
        .max_hold(Duration::MAX)
        .try_acquire()
        .await
        .expect("a cap too large to matter is no cap");
    assert!(capped.is_held());
    capped.release().await.expect("release");
    // Client settings without limit: accepted, or refused with an error, never a panic.
    let nodes = RedisServers::start(3);
    let unlimited = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::MAX)
        .node_timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .response_timeout(Duration::MAX)
        .connect()
        .await
        .expect("connect");
    // Fresh servers, an endless restart delay: no node votes, and the lock says so.
    let err = unlimited.lock("forever").try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached { .. }), "{err}");
}

#[tokio::test]
async fn one_name_in_two_modes_is_one_clear_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let modes = ["setnx", "reentrant", "write", "read"];
    for held in modes {
        let name = format!("mixed-{held}");
        let g = request(&locks, held, &name)
            .try_acquire()
            .await
            .expect("free");
        for asked in modes.iter().filter(|m| {
            // read and write are the two sides of one lock.
            **m != held && !(matches!(held, "read" | "write") && matches!(**m, "read" | "write"))
        }) {
            let err = as_other_owner(
                request(&locks, asked, &name)
                    .wait(Duration::from_secs(30))
                    .acquire(),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(err, Error::ModeConflict { .. }),
                "{asked} on a {held} lock: {err}"
            );
            assert!(!err.is_retryable(), "{err}");
        }
        g.release().await.expect("release");
    }
}

// ---------------------------------------------------------------------------------------------
// Fencing tokens across a restart without persistence.

#[tokio::test]
async fn tokens_keep_increasing_across_a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    for mode in ["setnx", "reentrant", "write"] {
        let name = format!("fence-{mode}");
        let mut last = distlock::FencingToken::new(0);
        for round in 0..2 {
            let g = request(&locks, mode, &name).fencing(true).acquire().await;
            let g = g.expect("free");
            let token = g.fencing_token().expect("fencing(true)");
            assert!(
                token > last,
                "{mode} round {round}: token {token} after {last}"
            );
            last = token;
            g.release().await.expect("release");
        }
        server.kill();
        server.restart();
        let g = request(&locks, mode, &name)
            .wait(EVENT_LIMIT)
            .fencing(true)
            .acquire()
            .await
            .expect("the client reconnects");
        let token = g.fencing_token().expect("fencing(true)");
        assert!(
            token > last,
            "{mode}: token {token} after the restart, {last} before"
        );
        g.release().await.expect("release");
    }
}
