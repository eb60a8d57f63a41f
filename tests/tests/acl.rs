//! Least privilege: every mode, waits and wake-ups included, works for a Redis user that may
//! touch only the lock keys and channels and run only the command categories the README lists.

mod common;

use std::time::Duration;

use common::as_other_owner;
use distlock::Client;
use distlock_testkit::RedisServer;

/// The ACL rules the README gives a locking service (after `on >password`).
const RULES: &str =
    "~distlock:* &distlock:* +@connection +@scripting +@read +@write +@pubsub +time -@dangerous";

async fn locker(server: &RedisServer) -> Client {
    let mut admin = server.async_connection().await;
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(">s3cret");
    for rule in RULES.split_whitespace() {
        setuser.arg(rule);
    }
    let _: () = setuser.query_async(&mut admin).await.expect("ACL SETUSER");
    let url = format!("redis://locker:s3cret@127.0.0.1:{}/", server.port());
    Client::connect(&url)
        .await
        .expect("connect as the locking user")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_works_for_a_least_privileged_user() {
    let server = RedisServer::start();
    let locks = locker(&server).await;

    // setnx (the plain SET acquire), with a waiter (the fencing script) woken by the release.
    let held = locks.lock("acl-setnx").try_acquire().await.expect("setnx");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock("acl-setnx")
                .wait(Duration::from_secs(30))
                .fencing(true)
                .acquire()
                .await
        })
    };
    tokio::task::yield_now().await;
    held.release().await.expect("release");
    let next = waiter.await.expect("task").expect("the waiter gets it");
    assert!(next.fencing_token().is_some());
    next.release().await.expect("release");

    // reentrant with a re-entry, and an extension.
    let mut outer = locks
        .reentrant("acl-re")
        .try_acquire()
        .await
        .expect("reentrant");
    let inner = locks
        .reentrant("acl-re")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    outer.extend(Duration::from_secs(20)).await.expect("extend");
    inner.release().await.expect("release");
    outer.release().await.expect("release");

    // read/write: readers share, a writer waits for them and is woken.
    let r1 = locks.read("acl-rw").try_acquire().await.expect("read");
    let r2 = as_other_owner(locks.read("acl-rw").try_acquire())
        .await
        .expect("readers share");
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .write("acl-rw")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = writer.await.expect("task").expect("the writer gets in");
    w.release().await.expect("release");

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
