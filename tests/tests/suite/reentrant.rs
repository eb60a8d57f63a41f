//! The reentrant lock: ownership by task, re-entry, fencing.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{as_other_owner, client, contend_across_processes, fence_key, lock_key};
use distlock::{Error, LockContext};
use distlock_testkit::RedisServer;
use redis::AsyncCommands;

/// The hold counts in the lock's hash: one `h:<nonce>` field per acquisition of its single
/// owner (an empty list when nobody holds it).
async fn counts(conn: &redis::aio::MultiplexedConnection, name: &str) -> Vec<i64> {
    let all: HashMap<String, String> = conn.clone().hgetall(lock_key(name)).await.expect("HGETALL");
    let holds = all.keys().filter(|k| k.starts_with("h:")).count() as i64;
    if holds == 0 {
        Vec::new()
    } else {
        vec![holds]
    }
}

#[tokio::test]
async fn reentry_depth_1_to_16_balances_and_the_key_is_gone_after_the_last_release() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let mut last_token = distlock::FencingToken::new(0);
    for depth in 1..=16i64 {
        let mut guards = Vec::new();
        for _ in 0..depth {
            guards.push(
                locks
                    .reentrant("nest")
                    .fencing(true)
                    .try_acquire()
                    .await
                    .expect("re-entry"),
            );
        }
        assert_eq!(
            counts(&raw, "nest").await,
            vec![depth],
            "one owner holding {depth} levels"
        );
        let token = guards[0].fencing_token().expect("fencing(true)");
        assert!(
            guards.iter().all(|g| g.fencing_token() == Some(token)),
            "re-entry keeps the token"
        );
        assert!(token > last_token, "a new tenure gets a larger token");
        last_token = token;
        while guards.len() > 1 {
            guards
                .pop()
                .expect("a level")
                .release()
                .await
                .expect("release a level");
            assert_eq!(counts(&raw, "nest").await, vec![guards.len() as i64]);
        }
        guards
            .pop()
            .expect("last level")
            .release()
            .await
            .expect("last release");
        let exists: bool = raw.clone().exists(lock_key("nest")).await.expect("EXISTS");
        assert!(
            !exists,
            "the last release deletes the lock at depth {depth}"
        );
    }
}

#[tokio::test]
async fn a_foreign_owners_release_is_refused_and_leaves_the_hash_intact() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let foreign = as_other_owner(
        locks
            .reentrant("shared")
            .ttl(Duration::from_millis(300))
            .watchdog(false)
            .try_acquire(),
    )
    .await
    .expect("free");
    // Once the foreign hold lapses, this task takes the lock (twice: nested).
    let mine = locks
        .reentrant("shared")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free after the foreign lease lapsed");
    let nested = locks
        .reentrant("shared")
        .try_acquire()
        .await
        .expect("re-entry");
    let dump = || async {
        let d: Vec<u8> = redis::cmd("DUMP")
            .arg(lock_key("shared"))
            .query_async(&mut raw.clone())
            .await
            .expect("DUMP");
        d
    };
    let before = dump().await;
    let err = foreign.release().await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    assert_eq!(dump().await, before, "the holder's hash is untouched");
    nested.release().await.expect("release");
    mine.release().await.expect("release");
}

/// Two tasks on one thread (a current-thread runtime) are different owners.
#[tokio::test(flavor = "current_thread")]
async fn two_tasks_on_one_thread_exclude_each_other() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let g = locks.reentrant("thread").try_acquire().await.expect("free");
            held_tx.send(std::thread::current().id()).expect("signal");
            go_rx.await.expect("go");
            g.release().await.expect("release");
        })
    };
    let first_thread = held_rx.await.expect("first task holds");
    let second = {
        let locks = locks.clone();
        tokio::spawn(async move {
            assert_eq!(std::thread::current().id(), first_thread, "same thread");
            let busy = locks.reentrant("thread").try_acquire().await.unwrap_err();
            assert!(matches!(busy, Error::Busy { .. }), "{busy}");
            go_tx.send(()).expect("go");
            let g = locks
                .reentrant("thread")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .expect("free once the first task released");
            g.release().await.expect("release");
        })
    };
    first.await.expect("first task");
    second.await.expect("second task");
}

#[tokio::test]
async fn a_spawned_task_is_a_new_owner_unless_the_context_is_passed_on() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let outer = locks
        .reentrant("ctx")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let spawned = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.reentrant("ctx").try_acquire().await.map(|_| ()) })
    };
    let err = spawned.await.expect("task").unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    let me = LockContext::current();
    let carried = {
        let locks = locks.clone();
        tokio::spawn(me.scope(async move {
            let inner = locks.reentrant("ctx").fencing(true).try_acquire().await?;
            let token = inner.fencing_token();
            inner.release().await.map(|()| token)
        }))
    };
    let token = carried
        .await
        .expect("task")
        .expect("re-entered through the context");
    assert_eq!(token, outer.fencing_token());
    assert!(token.is_some());
    outer.release().await.expect("release");
}

/// Without fencing a reentrant hold has no token and writes no counter; a re-entry that asks
/// for one mints the tenure's token then, which every later re-entry that asks keeps, and the
/// next tenure's is larger.
#[tokio::test]
async fn fencing_is_minted_only_when_asked_even_inside_a_tenure() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let counter = fence_key("lazy");
    let outer = locks.reentrant("lazy").try_acquire().await.expect("free");
    assert_eq!(outer.fencing_token(), None);
    let exists: bool = raw.clone().exists(&counter).await.expect("EXISTS");
    assert!(!exists, "a counter was written without fencing");
    let fenced = locks
        .reentrant("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    let token = fenced.fencing_token().expect("fencing(true)");
    let again = locks
        .reentrant("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    assert_eq!(
        again.fencing_token(),
        Some(token),
        "the tenure keeps its token"
    );
    let plain = locks
        .reentrant("lazy")
        .try_acquire()
        .await
        .expect("re-entry");
    assert_eq!(plain.fencing_token(), None, "not asked, not given");
    for g in [plain, again, fenced, outer] {
        g.release().await.expect("release");
    }
    let next = locks
        .reentrant("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(next.fencing_token().expect("fencing(true)") > token);
    next.release().await.expect("release");
}

/// Tokens strictly increase across holders in two processes (checked by a fenced resource
/// on the observer), and the lock excludes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_and_processes() {
    let server = RedisServer::start();
    contend_across_processes("reentrant+fenced", &server.url(), 1_000).await;
}

/// The same without fencing tokens: the script skips the counter, and the lock excludes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_holders_across_processes_exclude() {
    let server = RedisServer::start();
    contend_across_processes("reentrant", &server.url(), 500).await;
}

#[tokio::test]
async fn user_data_under_a_reentrant_key_is_reported_not_touched() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let _: () = raw
        .hset(lock_key("profile"), "name", "ada")
        .await
        .expect("HSET");
    let err = locks.reentrant("profile").try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    let name: String = raw.hget(lock_key("profile"), "name").await.expect("HGET");
    assert_eq!(name, "ada");
}
