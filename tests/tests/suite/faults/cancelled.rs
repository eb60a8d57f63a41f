//! A cancelled acquire or release leaves no orphan; a lost acquire reply is recognised.

use super::*;

// ---------------------------------------------------------------------------------------------
// Item 4: a cancelled acquire or release leaves no orphan.

#[tokio::test]
async fn a_cancelled_acquire_is_given_back_once_the_server_answers() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("cancel-{mode}");
        // Load the mode's scripts first: a cancelled call that met NOSCRIPT would never take
        // the lock, and the test would prove nothing.
        load_scripts(&locks, mode).await;
        let executed = evalsha_calls(&server);
        server.pause();
        let unread = server.unread_bytes();
        // Cancelled once its request reached the frozen server (an event, not a fixed time
        // that a loaded machine could spend before the request was written).
        let reached = wait_until_async(EVENT_LIMIT, || async { server.unread_bytes() > unread });
        let cancelled = tokio::select! {
            _ = request(&locks, mode, &name).ttl(Duration::from_secs(30)).acquire() => false,
            written = reached => written,
        };
        assert!(
            cancelled,
            "{mode}: a frozen server answered, or the request never reached it"
        );
        server.resume();
        // The request reaches the server, which grants it to nobody; the background release
        // must free it long before its 30 s lease ends.
        let ran =
            wait_until_async(EVENT_LIMIT, || async { evalsha_calls(&server) > executed }).await;
        assert!(
            ran,
            "{mode}: the cancelled request never reached the server"
        );
        let freed = wait_until_async(EVENT_LIMIT, || async { !exists(&raw, &name).await }).await;
        assert!(
            freed,
            "{mode}: the cancelled acquisition left the lock taken"
        );
        let again = as_other_owner(request(&locks, mode, &name).try_acquire())
            .await
            .expect("free for the next owner");
        again.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_release_cancelled_or_failed_while_the_connection_is_down_still_frees_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("cancel-release-{mode}");
        let g = request(&locks, mode, &name)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("free");
        // The connection breaks and cannot be made again for now: the release waits for the
        // reconnection, and the caller gives up on it (a handler whose client went away).
        proxy.refuse_new(true);
        proxy.reset_all();
        // Cancelled, or failed with the connection's error: either way the caller is done.
        let outcome = tokio::time::timeout(Duration::from_millis(50), g.release()).await;
        assert!(
            !matches!(outcome, Ok(Ok(()))),
            "{mode}: released through a refused connection"
        );
        assert!(
            exists(&raw, &name).await,
            "{mode}: freed before the network came back"
        );
        proxy.refuse_new(false);
        let freed = wait_until_async(EVENT_LIMIT, || async { !exists(&raw, &name).await }).await;
        assert!(freed, "{mode}: the cancelled release left the lock taken");
    }
}

/// Calls of `cmd` the server counted (`INFO commandstats`).
async fn command_calls(raw: &MultiplexedConnection, cmd: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw.clone())
        .await
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The reply of an acquisition's first attempt is lost (the proxy drops it and resets the
/// connection): the retry finds the lock holding its own value and takes it as its own,
/// instead of waiting on itself until its ttl ran out. Without fencing the attempt is the
/// plain `SET .. NX PX .. GET`, whose reply names the holder; the acquire script settles that
/// case (making the lease last at least the ttl). With fencing, the script's retry flag does.
#[tokio::test]
async fn a_lost_acquire_reply_is_recognised_by_the_retry_with_and_without_fencing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let raw = server.async_connection().await;
    let ttl = Duration::from_secs(30);
    // One call site for the warm-up and the test's acquisition (see below).
    let request = |name: &str, fencing: bool| {
        locks
            .lock(name)
            .ttl(ttl)
            .wait(Duration::from_secs(3600))
            .fencing(fencing)
    };
    for fencing in [false, true] {
        let name = format!("lost-reply-{fencing}");
        // The acquire script loaded beforehand, so its one call below is counted once, and
        // the process's record naming the call site written, so the reply dropped below is
        // the acquisition's.
        let warm = request("warm", true).try_acquire().await;
        warm.expect("free").release().await.expect("release");
        let scripts = command_calls(&raw, "evalsha").await;
        proxy.drop_next_reply();
        let g = tokio::time::timeout(EVENT_LIMIT, request(&name, fencing).acquire())
            .await
            .expect("the retry waited on its own hold")
            .expect("acquired by the retry");
        assert_eq!(proxy.replies_dropped(), 1 + u64::from(fencing));
        assert!(g.is_held());
        assert_eq!(g.fencing_token().is_some(), fencing);
        assert_eq!(
            command_calls(&raw, "evalsha").await - scripts,
            1 + u64::from(fencing),
            "plain: one script, the follow-up; fenced: the lost attempt and the retry"
        );
        assert!(
            pttl(&raw, &name).await > (ttl - Duration::from_secs(5)).as_millis() as i64,
            "the lease lasts the ttl"
        );
        // The hold is the caller's: released by its guard, and nobody else got in.
        let busy = as_other_owner(locks.lock(&name).try_acquire()).await;
        assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
        g.release().await.expect("release");
        assert!(!exists(&raw, &name).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_quorum_acquire_is_given_back_on_every_node() {
    let mut nodes = RedisServers::start(5);
    let locks = Client::quorum_builder(nodes.urls())
        // Fresh servers: this test is not about restarts.
        .restart_delay(Duration::ZERO)
        .node_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("quorum");
    let mut raws = Vec::new();
    for node in &nodes {
        raws.push(node.async_connection().await);
    }
    load_scripts(&locks, "setnx").await;
    let executed: Vec<u64> = nodes.iter().map(evalsha_calls).collect();
    for node in nodes.iter_mut() {
        node.pause();
    }
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        locks
            .lock("cancel-q")
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await;
    assert!(cancelled.is_err(), "frozen servers answered");
    for node in nodes.iter_mut() {
        node.resume();
    }
    for (i, node) in nodes.iter().enumerate() {
        let ran =
            wait_until_async(EVENT_LIMIT, || async { evalsha_calls(node) > executed[i] }).await;
        assert!(ran, "node {i}: the cancelled request never reached it");
    }
    for (i, raw) in raws.iter().enumerate() {
        let freed =
            wait_until_async(EVENT_LIMIT, || async { !exists(raw, "cancel-q").await }).await;
        assert!(freed, "node {i} kept the cancelled acquisition");
    }
}
