//! Wake-ups: a writer's release wakes every waiting reader, also readers that join a
//! subscription after a release they did not hear, and so does a waiting writer that gives up.

use super::*;

/// A writer's release wakes every waiting reader at once: their fallback sleep is the
/// writer's remaining lease (30 s), so only the wake-up brings them in this soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_wakes_every_waiting_reader() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let w = locks
        .write("wake")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let mut readers = three_sharing_readers(&locks, "wake");
    // All three tried once and are parked on the lock's channel.
    let parked = wait_until_async(EVENT_LIMIT, || async {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel("wake"))
            .query_async(&mut server.async_connection().await)
            .await
            .map(|v: Vec<(String, i64)>| v.into_iter().next().expect("one channel"))
            .expect("PUBSUB NUMSUB");
        n > 0
    })
    .await;
    assert!(parked);
    let released = Instant::now();
    w.release().await.expect("release");
    all_get_in_soon(&mut readers, released).await;
}

/// Readers of one client whose busy answers come back after the writer released, a release
/// none of them heard (nobody here had subscribed to the lock yet): the first to subscribe
/// re-checks and gets in, and the others, which join its subscription, must re-check too,
/// since the lock is free for them as well. The replies to this client are delayed through
/// the proxy, so the order is forced: the attempts reach the server at once, the release
/// follows, and the busy answers and the subscription come after it. Fails on the code before
/// af32497: the joiners slept until their wait ran out (the first reader keeps its hold until
/// all are in, so its release cannot wake them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_join_a_subscription_after_an_unheard_release_check_again() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let holder = client(&server).await;
    let readers_client = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    // The warm-up goes through the readers' call site: the read script is loaded and the
    // process's record written beforehand, so each reader's attempt is one EVALSHA.
    let warm = reader(&readers_client, "warm")
        .acquire()
        .await
        .expect("free");
    warm.release().await.expect("release");
    let w = holder
        .write("unheard")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let evalsha = || server.commandstats().get("evalsha").copied().unwrap_or(0);
    let before = evalsha();
    proxy.reply_latency(Duration::from_millis(400));
    let mut readers = three_sharing_readers(&readers_client, "unheard");
    // All three attempts reached the server (their busy answers are on their way).
    let attempted = wait_until_async(EVENT_LIMIT, || async { evalsha() >= before + 3 }).await;
    assert!(attempted, "the readers never attempted");
    let released = Instant::now();
    w.release().await.expect("release");
    all_get_in_soon(&mut readers, released).await;
}

/// A reader of `name` that waits up to 20 s; one call site for every reader of the tests
/// below (and their warm-ups).
fn reader<'a>(locks: &'a Client, name: &str) -> distlock::LockRequest<'a> {
    locks.read(name).wait(Duration::from_secs(20))
}

/// Three tasks that each take a read hold of `name` and keep it until all three are in (so
/// that no reader's own release wakes the next); each returns when it got in.
fn three_sharing_readers(locks: &Client, name: &'static str) -> tokio::task::JoinSet<Instant> {
    let inside = Arc::new(AtomicI64::new(0));
    let (all_in_tx, all_in) = tokio::sync::watch::channel(());
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (locks, inside, all_in_tx) = (locks.clone(), inside.clone(), all_in_tx.clone());
        let mut all_in = all_in.clone();
        readers.spawn(async move {
            let g = reader(&locks, name).acquire().await.expect("reader");
            let at = Instant::now();
            if inside.fetch_add(1, Ordering::SeqCst) == 2 {
                all_in_tx.send(()).expect("signal");
            }
            all_in.changed().await.expect("all in");
            g.release().await.expect("release");
            at
        });
    }
    readers
}

/// Every reader got in within 5 s of the writer's `released` (their wait is 20 s).
async fn all_get_in_soon(readers: &mut tokio::task::JoinSet<Instant>, released: Instant) {
    while let Some(at) = readers.join_next().await {
        let woken = at.expect("reader task") - released;
        assert!(
            woken < Duration::from_secs(5),
            "a reader got in only after {woken:?}"
        );
    }
}
