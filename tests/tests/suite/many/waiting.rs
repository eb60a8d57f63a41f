//! A waiter holds no name while it waits; the guard is held only while every name is; a
//! fenced set's one token.

use super::*;

#[tokio::test]
async fn a_waiter_holds_no_name_while_it_waits_and_wakes_at_the_busy_ones_release() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let names = ["w-a", "w-b", "w-c"];
    let order = in_order(&names);
    let (first, last) = (order[0], order[2]);
    let holder_of_first = locks
        .lock(first)
        .ttl(LONG)
        .try_acquire()
        .await
        .expect("free");
    let holder_of_last = as_other_owner(locks.lock(last).ttl(LONG).try_acquire())
        .await
        .expect("free");
    let waiter = spawn_set_waiter(&locks, &names);
    assert!(
        listened(&server, first).await,
        "the waiter waits for {first}"
    );
    let mut conn = server.async_connection().await;
    for name in [order[1], last] {
        assert_ne!(
            value(&mut conn, name).await,
            value(&mut conn, first).await,
            "{name} is not the waiter's while it waits"
        );
    }
    assert_eq!(value(&mut conn, order[1]).await, None, "no name taken");
    let marked: bool = conn.exists(waited_key(first)).await.expect("EXISTS");
    assert!(marked, "the busy name is marked as waited for");

    // Its release lets the waiter try again: the last name is still busy, so it waits for
    // that one now, holding nothing.
    holder_of_first.release().await.expect("release");
    assert!(listened(&server, last).await, "the waiter waits for {last}");
    assert_eq!(values(&server, &[first, order[1]]).await, [None, None]);

    let released = Instant::now();
    holder_of_last.release().await.expect("release");
    let set = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("woken by the release, not by its 30 s lease")
        .expect("task")
        .expect("the set");
    eprintln!(
        "the waiter got the set {:?} after the release",
        released.elapsed()
    );
    let held = values(&server, &names).await;
    assert!(
        held.iter().all(|v| v.is_some() && *v == held[0]),
        "{held:?}"
    );
    set.release().await.expect("release");
}

#[tokio::test]
async fn the_guard_is_held_only_while_every_name_is() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let names = ["l-a", "l-b", "l-c"];
    let set = locks
        .lock_many(names)
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    // Renewed past its ttl while every name is ours.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "the watchdog renews every name");
    assert!(values(&server, &names).await.iter().all(Option::is_some));
    let mut conn = server.async_connection().await;
    let _: () = conn.del(lock_key("l-b")).await.expect("DEL");
    let lost = tokio::time::timeout(EVENT_LIMIT, set.lost())
        .await
        .expect("the loss of one name is the loss of the set");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!set.is_held());
    let err = set.release().await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    assert_eq!(values(&server, &names).await, [None, None, None]);
}

#[tokio::test]
async fn a_fenced_set_has_one_token_above_each_names_tokens_before_and_after() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut conn = server.async_connection().await;
    let names = ["f-a", "f-b"];
    let token = fenced_set_token(
        &mut conn,
        names,
        |name| locks.lock(name),
        |names| locks.lock_many(names),
    )
    .await;
    for name in names {
        assert!(fenced_token(locks.lock(name)).await > token, "{name}");
    }
}
