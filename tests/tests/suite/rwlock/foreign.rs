//! What is not the caller's: another owner's release, the application's data at a lock key.

use super::*;

#[tokio::test]
async fn a_foreign_release_is_refused_and_leaves_the_hash_intact() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for write in [false, true] {
        let name = if write { "fw" } else { "fr" };
        fn request<'c>(locks: &'c Client, write: bool, name: &str) -> distlock::LockRequest<'c> {
            if write {
                locks.write(name)
            } else {
                locks.read(name)
            }
        }
        let foreign = as_other_owner(
            request(&locks, write, name)
                .ttl(Duration::from_millis(50))
                .watchdog(false)
                .try_acquire(),
        )
        .await
        .expect("free");
        let h = fields(&raw, name).await;
        let foreign_until = if write {
            number(&h, "writer-until")
        } else {
            number(
                &h,
                &read_field(&raw, name)
                    .await
                    .replacen("read:", "read-until:", 1),
            )
        };
        let lapsed = wait_until_async(EVENT_LIMIT, || async {
            server_ms(&raw).await > foreign_until
        })
        .await;
        assert!(lapsed);
        // Now that the foreign hold has lapsed, this task takes the lock, with a second level
        // and, for reads, a second reader beside it.
        let mine = request(&locks, write, name)
            .try_acquire()
            .await
            .expect("free after the foreign lease lapsed");
        assert!(
            !fields(&raw, name)
                .await
                .values()
                .any(|v| v == &foreign_until.to_string()),
            "the lapsed hold was pruned"
        );
        let nested = request(&locks, write, name)
            .try_acquire()
            .await
            .expect("re-entry");
        let other = if write {
            None
        } else {
            Some(
                as_other_owner(locks.read(name).try_acquire())
                    .await
                    .expect("readers share"),
            )
        };
        let before = dump(&raw, name).await;
        let err = foreign.release().await.unwrap_err();
        assert!(matches!(err, Error::NotOwner { .. }), "{err}");
        assert_eq!(dump(&raw, name).await, before, "{name}: hash changed");
        for g in [Some(nested), Some(mine), other].into_iter().flatten() {
            g.release().await.expect("release");
        }
    }
}

#[tokio::test]
async fn user_data_at_a_lock_key_is_reported_and_left_untouched() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let check = |err: Error, what: &str| {
        assert!(matches!(err, Error::WrongType { .. }), "{what}: {err}");
    };
    // A string, a hash without expiry, a hash with expiry that is not a read/write lock.
    let _: () = raw.set(lock_key("s"), "hello").await.expect("SET");
    let _: () = raw.hset(lock_key("h"), "name", "ada").await.expect("HSET");
    let _: () = raw.hset(lock_key("he"), "name", "ada").await.expect("HSET");
    let _: () = raw.pexpire(lock_key("he"), 60_000).await.expect("PEXPIRE");
    // A read/write lock of the layout before the summaries (its marker `rwlock`), read-held:
    // its clients do not keep this layout's summaries, so neither side enters beside the
    // other's holders.
    let _: () = raw
        .hset_multiple(
            lock_key("v2"),
            &[("rwlock", "2"), ("mode", "read"), ("r:a:1", "n1")],
        )
        .await
        .expect("HSET");
    let _: () = raw.pexpire(lock_key("v2"), 60_000).await.expect("PEXPIRE");
    for name in ["s", "h", "he", "v2"] {
        let before = dump(&raw, name).await;
        check(locks.read(name).try_acquire().await.unwrap_err(), name);
        check(locks.write(name).try_acquire().await.unwrap_err(), name);
        assert_eq!(dump(&raw, name).await, before, "{name} was changed");
    }
    // The fencing counter holding the application's data: nothing is written.
    let fence = fence_key("f");
    let _: () = raw.set(&fence, "mine").await.expect("SET");
    let fenced_write = locks.write("f").fencing(true).try_acquire().await;
    check(fenced_write.unwrap_err(), "fence");
    let fenced_read = locks.read("f").fencing(true).try_acquire().await;
    check(fenced_read.unwrap_err(), "fence");
    let exists: bool = raw.exists(lock_key("f")).await.expect("EXISTS");
    assert!(!exists, "no hold was written");
    let value: String = raw.get(&fence).await.expect("GET");
    assert_eq!(value, "mine");
    // Another lock mode under the same name is not mistaken for a read/write lock either: it
    // is named as what it is.
    let re = locks.reentrant("mixed").try_acquire().await.expect("free");
    let err = locks.read("mixed").try_acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::ModeConflict { held_as, .. } if *held_as == LockMode::Reentrant),
        "mixed: {err}"
    );
    re.release().await.expect("release");
}
