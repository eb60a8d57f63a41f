//! Lost replies leave nothing behind.

use super::*;

/// Lock keys (not fencing counters or other helper keys) on the server.
async fn lock_keys(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:*")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("KEYS");
    keys.into_iter()
        .filter(|k| !k.starts_with("distlock:#"))
        .collect()
}

/// Holders behind a proxy that drops 3 % of the server's replies (the request ran, the
/// answer never came; the connection is reset): the limit holds, every call that fails is
/// retryable, and once the last release returned nothing is left at the semaphore's key
/// (every permit whose acquisition or release lost its reply is given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_leave_nothing_behind() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            Client::connect(&proxy.url())
                .await
                .expect("connect through the proxy"),
        );
    }
    proxy.drop_replies(0.03);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let locks = clients[i % 2].clone();
        let observer = Observer::connect(&observer_server.url(), "lossy").await;
        tasks.spawn(async move {
            let (mut sections, mut errors) = (0u32, 0u32);
            while started.elapsed() < Duration::from_secs(2) {
                let guard = match locks
                    .semaphore("lossy", 3)
                    .ttl(Duration::from_secs(3))
                    .wait(Duration::from_secs(20))
                    .fencing(i % 2 == 0)
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                        continue;
                    }
                };
                observer.enter().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                observer.exit().await;
                match guard.release().await {
                    Ok(()) => sections += 1,
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                    }
                }
            }
            (sections, errors)
        });
    }
    let (mut sections, mut errors) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (s, e) = done.expect("task");
        sections += s;
        errors += e;
    }
    let dropped = proxy.replies_dropped();
    proxy.clear();
    println!("{sections} sections, {errors} failed calls, {dropped} replies lost");
    assert!(dropped > 0, "the proxy dropped nothing");
    assert!(sections > 0);
    let observer = Observer::connect(&observer_server.url(), "lossy").await;
    let most = observer.max_occupancy().await;
    assert!((1..=3).contains(&most), "{most} holders at once");
    let clean = wait_until_async(Duration::from_secs(3), || async {
        lock_keys(&server).await.is_empty()
    })
    .await;
    assert!(
        clean,
        "permits left after the last release: {:?}",
        members(&server, "lossy").await
    );
}
