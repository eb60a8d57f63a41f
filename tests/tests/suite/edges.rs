//! Safety at the edges (issue 25): what a release reports once the lease is gone, what a
//! builder prints, and the like. Each test here failed on the code before its fix.

use crate::common;

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
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
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

/// A server that may evict keys may evict a held lock (a second owner then takes it while the
/// first still says held): such a server is refused when the client connects, unless the
/// client opted in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_keys_is_refused_unless_allowed() {
    for policy in ["volatile-ttl", "allkeys-lru"] {
        let server = RedisServer::builder()
            .args(["--maxmemory", "64mb", "--maxmemory-policy", policy])
            .start();
        let refused = Client::connect(&server.url()).await.unwrap_err();
        assert!(
            matches!(refused, Error::InvalidConfig { ref reason } if reason.contains(policy) && reason.contains("allow_eviction")),
            "{policy}: {refused}"
        );
        let allowed = Client::builder(&server.url())
            .allow_eviction(true)
            .connect()
            .await
            .expect("allowed");
        allowed
            .lock("evictable")
            .try_acquire()
            .await
            .expect("free")
            .release()
            .await
            .expect("release");
    }
}

/// The policy is read again after a reconnection (the server may have been restarted with
/// another configuration): the next acquisition on it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_turned_to_evicting_is_refused_after_a_reconnection() {
    let server = RedisServer::start();
    let locks = Client::connect(&server.url()).await.expect("noeviction");
    locks
        .lock("before")
        .try_acquire()
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
    let mut admin = server.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .exec(&mut admin)
        .expect("CONFIG SET");
    // Every connection but the admin's is closed: the client reconnects.
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .exec(&mut admin)
        .expect("CLIENT KILL");
    let refused = wait_until_async(Duration::from_secs(10), || async {
        matches!(
            locks.lock("after").try_acquire().await,
            Err(Error::InvalidConfig { ref reason }) if reason.contains("allkeys-lru")
        )
    })
    .await;
    assert!(refused, "a server that may now evict keys was still used");
}

/// A Redis user that may not run `INFO` cannot have the policy checked: a clear error saying
/// what to grant, not a bare NOPERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_info_is_told_what_to_grant() {
    let server = RedisServer::start();
    let rules = common::ACL_RULES.replace(" +info", "");
    let url = common::add_locker(&server, &rules);
    let refused = Client::connect(&url).await.unwrap_err();
    assert!(
        matches!(refused, Error::InvalidConfig { ref reason } if reason.contains("+info")),
        "{refused}"
    );
}

/// Nor does a printed client, or any error a URL with a password can produce, printed either
/// way (`{}` in a message, `{:?}` in a log line or a panic).
#[tokio::test]
async fn no_client_or_error_prints_a_password() {
    let secret = "s3cret-pw";
    let server = RedisServer::start_with(&["--requirepass", secret]);
    let port = server.port();
    let locks = Client::connect(&format!("redis://:{secret}@127.0.0.1:{port}"))
        .await
        .expect("the right password works");
    let printed = format!("{locks:?}");
    assert!(!printed.contains(secret), "{printed}");
    let free = RedisServer::start();
    let dead_port = free.port();
    drop(free);
    let errors = [
        // Refused by the server.
        Client::connect(&format!("redis://:{secret}-wrong@127.0.0.1:{port}")).await,
        // Nobody listening.
        Client::connect(&format!("redis://u:{secret}@127.0.0.1:{dead_port}")).await,
        // Not a Redis URL.
        Client::connect(&format!("http://u:{secret}@127.0.0.1:{port}")).await,
        Client::connect(&format!("redis://u:{secret}@[::1")).await,
        // A quorum with one node down, and a bad prefix.
        Client::quorum_builder([
            format!("redis://u:{secret}@127.0.0.1:{dead_port}"),
            format!("redis://u:{secret}@127.0.0.1:{dead_port}"),
            format!("redis://u:{secret}@127.0.0.1:{dead_port}"),
        ])
        .connect()
        .await,
        Client::builder(&format!("redis://:{secret}@127.0.0.1:{port}"))
            .prefix("a{b}")
            .connect()
            .await,
    ];
    for result in errors {
        let err = result.expect_err("refused");
        for printed in [err.to_string(), format!("{err:?}"), format!("{err:#?}")] {
            assert!(!printed.contains(secret), "{printed}");
        }
    }
}

/// A release during a short outage (the connections reset, new ones refused for a moment, as
/// while a client follows a failover) rides it out: it is sent again until a connection is
/// back, within the response timeout. (It gave up after three tries a few milliseconds
/// apart: `release()` failed, though Redis was back almost at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rides_out_a_short_outage() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let guard = locks.lock("outage").try_acquire().await.expect("free");
    proxy.refuse_new(true);
    proxy.reset_all();
    let proxy = std::sync::Arc::new(proxy);
    let back = tokio::spawn({
        let proxy = proxy.clone();
        async move {
            // The outage's length: the fault itself, not a wait for an event.
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.refuse_new(false);
        }
    });
    let released = guard.release().await;
    back.await.expect("the outage ends");
    assert!(released.is_ok(), "{released:?}");
    let mut raw = server.async_connection().await;
    let exists: bool = redis::AsyncCommands::exists(&mut raw, lock_key("outage"))
        .await
        .expect("EXISTS");
    assert!(!exists, "the lock is still held");
}
