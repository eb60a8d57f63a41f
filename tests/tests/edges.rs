//! Safety at the edges (issue 25): what a release reports once the lease is gone, what a
//! builder prints, and the like. Each test here failed on the code before its fix.

mod common;

use std::time::Duration;

use common::lock_key;
use distlock::{Client, Error};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer};

/// A release whose first reply is lost is sent again; the retry finds nothing either way. It
/// may count as released only when the lease was still held when the release was sent: the
/// first try then freed it. A lease that had already run out is reported as not ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_of_a_lost_lease_is_not_reported_as_released() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start_for(&server);
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    // The release script loaded, so that the reply dropped below is the release's own.
    let warm = locks.lock("warm").try_acquire().await.expect("free");
    warm.release().await.expect("release");

    // The lease is lost while the guard's deadline is still ahead: the key is deleted under
    // it, and the watchdog's next renewal is refused.
    let held = locks
        .lock("lost")
        .ttl(Duration::from_secs(3))
        .try_acquire()
        .await
        .expect("free");
    let mut raw = server.async_connection().await;
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key("lost"))
        .query_async(&mut raw)
        .await
        .expect("DEL");
    let lost = wait_until_async(Duration::from_secs(10), || async { !held.is_held() }).await;
    assert!(lost, "the watchdog never noticed the lost lease");
    proxy.drop_next_reply();
    let released = held.release().await;
    assert_eq!(
        proxy.replies_dropped(),
        1,
        "the release's reply was not the one lost"
    );
    assert!(
        matches!(released, Err(Error::NotOwner { .. })),
        "a lease that had run out was reported released: {released:?}"
    );

    // The same lost reply while the lease holds: the retry's "nothing" means the first try
    // freed it.
    let held = locks.lock("held").try_acquire().await.expect("free");
    proxy.drop_next_reply();
    held.release().await.expect("released by the first try");
    assert_eq!(proxy.replies_dropped(), 2);
}

/// Passwords never reach a printed builder: `{:?}` of a builder is what ends up in logs when a
/// service prints its configuration.
#[test]
fn a_builder_prints_no_password() {
    let secret = "s3cret-pw";
    let builders = [
        Client::builder(&format!("redis://user:{secret}@127.0.0.1:1/0")),
        Client::builder(&format!("redis://:{secret}@127.0.0.1:1")),
        Client::builder(&format!("redis+unix:///tmp/redis.sock?db=1&pass={secret}")),
        Client::quorum_builder([
            format!("redis://u:{secret}@127.0.0.1:1"),
            format!("redis://u:{secret}@127.0.0.1:2"),
            format!("redis://u:{secret}@127.0.0.1:3"),
        ]),
        Client::cluster_builder([format!("rediss://{secret}@127.0.0.1:7000")]),
        Client::sentinel_builder([format!("redis://u:{secret}@127.0.0.1:26379")], "locks"),
    ];
    for builder in builders {
        let printed = format!("{builder:?}");
        assert!(!printed.contains(secret), "{printed}");
        assert!(
            printed.contains("127.0.0.1") || printed.contains("redis.sock"),
            "{printed}"
        );
    }
}
