//! The guard never trusts a longer lease than the server holds.

use super::*;

// ---------------------------------------------------------------------------------------------
// Item 2: the guard never trusts a longer lease than the server holds.

/// The guard's remaining lease must not exceed the server's (read first, so the server's can
/// only have shrunk since).
async fn assert_guard_within_server(
    raw: &MultiplexedConnection,
    name: &str,
    guard: &distlock::Guard,
    what: &str,
) {
    let server_left = Duration::from_millis(u64::try_from(pttl(raw, name).await).unwrap_or(0));
    let guard_left = guard.remaining();
    assert!(
        guard_left <= server_left,
        "{what}: guard trusts {guard_left:?}, the server holds {server_left:?}"
    );
}

/// The lease the server holds for the only holder of `name` in `mode`, in ms: the key's PTTL,
/// or for a reader its own lease end (its score in the lock's readers) against the server
/// clock (the key may live longer, for other readers or a writer's intent; the set's
/// placeholder member left out).
async fn server_lease(raw: &MultiplexedConnection, name: &str, mode: &str) -> i64 {
    if mode != "read" {
        return pttl(raw, name).await;
    }
    let readers: Vec<(String, i64)> = raw
        .clone()
        .zrange_withscores(readers_key(name), 0, -1)
        .await
        .expect("ZRANGE");
    let readers: Vec<_> = readers.into_iter().filter(|(o, _)| !o.is_empty()).collect();
    let [(_, until)] = readers.as_slice() else {
        panic!("one reader with a lease expected: {readers:?}");
    };
    let until = *until;
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut raw.clone())
        .await
        .expect("TIME");
    until - (secs * 1000 + micros / 1000)
}

/// An attempt takes the lock but its answer comes after the response timeout, as do the
/// answers of the retries that follow, until the fault ends: each retry finds its own hold.
/// The guard measures its lease from the retry that was answered, so the server must have
/// renewed the lease then; a reader's retry did not (found by the spin model, spec/README.md
/// `OLD_READ_RETRY`, fixed in 9b4a670), and its guard trusted the fault's length more than
/// the server held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_finds_its_own_hold_renews_the_lease_the_guard_trusts() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect");
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        load_scripts(&locks, mode).await;
        let name = format!("own-{mode}");
        // Requests reach the server at once; answers come 400 ms late.
        proxy.reply_latency(Duration::from_millis(400));
        let acquiring = tokio::spawn({
            let (locks, name) = (locks.clone(), name.clone());
            async move {
                request(&locks, mode, &name)
                    .ttl(Duration::from_secs(3))
                    .watchdog(false)
                    .wait(EVENT_LIMIT)
                    .acquire()
                    .await
            }
        });
        wait_until_async(EVENT_LIMIT, || exists(&raw, &name)).await;
        // The fault lasts a while: the retry that is answered in time was sent this much
        // (and the answers queued behind the late ones) after the attempt that took the lock.
        tokio::time::sleep(Duration::from_millis(600)).await;
        proxy.reply_latency(Duration::ZERO);
        let guard = acquiring
            .await
            .expect("task")
            .expect("a retry finds its own hold");
        let server_left = server_lease(&raw, &name, mode).await;
        let guard_left = guard.remaining();
        println!("{mode}: guard {guard_left:?}, server {server_left} ms");
        assert!(
            guard_left <= Duration::from_millis(u64::try_from(server_left).unwrap_or(0)),
            "{mode}: guard trusts {guard_left:?}, the server holds {server_left} ms"
        );
        guard.release().await.expect("release");
        assert!(!exists(&raw, &name).await, "{mode}: released");
    }
}

#[tokio::test]
async fn extending_with_a_shorter_ttl_never_leaves_the_guard_trusting_more_than_the_server() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("ext-{mode}");
        let mut g = request(&locks, mode, &name)
            .ttl(Duration::from_secs(10))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("free");
        g.extend(Duration::from_millis(200)).await.expect("extend");
        assert!(g.is_held());
        assert_guard_within_server(&raw, &name, &g, mode).await;
        g.release().await.expect("release");
    }
}

#[tokio::test]
async fn an_inner_hold_with_a_short_ttl_never_shortens_the_outer_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["reentrant", "write", "read"] {
        let name = format!("nest-{mode}");
        let outer = request(&locks, mode, &name)
            .ttl(Duration::from_secs(10))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("free");
        let before = locks.renewal_round_trips();
        let inner = request(&locks, mode, &name)
            .ttl(Duration::from_millis(300))
            .renew_every(Duration::from_millis(50))
            .try_acquire()
            .await
            .expect("re-entry");
        // Let the inner hold's watchdog renew it a few times.
        let renewed = wait_until_async(EVENT_LIMIT, || async {
            locks.renewal_round_trips() >= before + 3
        })
        .await;
        assert!(renewed, "the inner hold was never renewed");
        assert_guard_within_server(&raw, &name, &outer, mode).await;
        assert!(
            pttl(&raw, &name).await > 5_000,
            "{mode}: the inner renewal shortened the outer lease"
        );
        inner.release().await.expect("release inner");
        outer.release().await.expect("release outer");
    }
}

// Two nested locked fns with different ttls: the inner watchdog must not cut the outer lease.
#[distributed_lock(key = "nested:<id>", client = locks, mode = "reentrant", ttl = "1500ms")]
async fn inner_step(locks: &Client, id: u32, raw: &MultiplexedConnection) -> Result<i64, Error> {
    let before = locks.renewal_round_trips();
    // Two renewals of the inner hold (every 500 ms).
    let renewed = wait_until_async(EVENT_LIMIT, || async {
        locks.renewal_round_trips() >= before + 2
    })
    .await;
    assert!(renewed, "the inner hold was never renewed");
    Ok(raw
        .clone()
        .pttl(lock_key(&format!("nested:{id}")))
        .await
        .expect("PTTL"))
}

#[distributed_lock(key = "nested:<id>", client = locks, mode = "reentrant", ttl = "30s")]
async fn outer_step(locks: &Client, id: u32, raw: &MultiplexedConnection) -> Result<i64, Error> {
    inner_step(locks, id, raw).await
}

#[tokio::test]
async fn nested_locked_fns_keep_the_longer_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let left = outer_step(&locks, 1, &raw).await.expect("locked calls");
    assert!(
        left > 20_000,
        "the inner fn's watchdog cut the outer lease to {left} ms"
    );
}
