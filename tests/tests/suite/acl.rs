//! Least privilege: every mode, waits and wake-ups included, works for a Redis user that may
//! touch only the lock keys and channels and run only the command categories the README lists.

use crate::common;

use distlock::Client;
use distlock_testkit::RedisServer;

use common::ACL_RULES as RULES;

async fn locker(server: &RedisServer) -> Client {
    let url = common::add_locker(server, RULES);
    Client::connect(&url)
        .await
        .expect("connect as the locking user")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_works_for_a_least_privileged_user() {
    let server = RedisServer::start();
    let locks = locker(&server).await;

    common::every_mode_works(&locks, "acl").await;

    // And what the user may not do is still refused: its rights are really that narrow.
    let mut conn = redis::Client::open(format!(
        "redis://locker:s3cret@127.0.0.1:{}/",
        server.port()
    ))
    .expect("url")
    .get_multiplexed_async_connection()
    .await
    .expect("connect");
    let denied: Result<(), _> = redis::cmd("SET")
        .arg("app:data")
        .arg("x")
        .query_async(&mut conn)
        .await;
    assert!(denied.is_err(), "the user may write outside the lock keys");
    let denied: Result<(), _> = redis::cmd("FLUSHALL").query_async(&mut conn).await;
    assert!(denied.is_err(), "the user may run a dangerous command");
}
