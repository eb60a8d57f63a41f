//! Each reader's lease is its own: a killed reader's share ends with its own lease; the
//! watchdog renews each side per owner.

use super::*;

/// A killed reader's share ends with its own lease, although another reader keeps renewing
/// its own all along (a single expiry for the hash would keep the dead share alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_share_ends_with_its_own_lease_while_another_reader_renews() {
    const DEAD_TTL_MS: u64 = 1500;
    const LIVE_TTL: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let (mut dead, _) = spawn_holder("read", &server.url(), "crash", DEAD_TTL_MS);
    let dead_owner = owners(&fields(&raw, "crash").await, "read")
        .pop()
        .expect("the holder process reads");
    let renewing = locks
        .read("crash")
        .ttl(LIVE_TTL)
        .try_acquire()
        .await
        .expect("readers share");
    dead.kill().expect("kill -9");
    dead.wait().expect("reap");
    // Read after the kill: no renewal of the dead reader can follow, so its share must end
    // here (give or take a renewal that was already on its way).
    let dead_until = number(
        &fields(&raw, "crash").await,
        &format!("read-until:{dead_owner}"),
    );
    let gone = wait_until_async(EVENT_LIMIT, || async {
        !owners(&fields(&raw, "crash").await, "read").contains(&dead_owner)
    })
    .await;
    let gone_at = server_ms(&raw).await;
    assert!(gone, "the dead reader's share outlived its lease");
    assert!(
        gone_at >= dead_until,
        "the share was dropped {} ms before its lease ended",
        dead_until - gone_at
    );
    // The other reader renewed its own lease all this time (it has held it for several of its
    // own ttls) and still holds.
    assert!(renewing.held_for() > 3 * LIVE_TTL);
    assert!(renewing.is_held());
    assert_eq!(
        owners(&fields(&raw, "crash").await, "read").len(),
        1,
        "only the live reader is left: {:?}",
        fields(&raw, "crash").await
    );
    let busy = as_other_owner(locks.write("crash").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    renewing.release().await.expect("still ours");
    as_other_owner(locks.write("crash").try_acquire())
        .await
        .expect("free once the live reader left")
        .release()
        .await
        .expect("release");
}

/// A killed reader blocks a waiting writer until its own lease ends, and no longer, even
/// though the other reader left long before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reader_blocks_a_writer_until_its_own_lease_ends_and_no_longer() {
    const DEAD_TTL_MS: u64 = 2000;
    let writer_ttl = Duration::from_secs(5);
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let (mut dead, _) = spawn_holder("read", &server.url(), "crash2", DEAD_TTL_MS);
    let dead_owner = owners(&fields(&raw, "crash2").await, "read")
        .pop()
        .expect("the holder process reads");
    let live = locks
        .read("crash2")
        .ttl(Duration::from_millis(300))
        .try_acquire()
        .await
        .expect("readers share");
    dead.kill().expect("kill -9");
    dead.wait().expect("reap");
    let dead_until = number(
        &fields(&raw, "crash2").await,
        &format!("read-until:{dead_owner}"),
    );
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move {
            // No watchdog: `writer-until` then tells the server time of the acquisition.
            locks
                .write("crash2")
                .ttl(writer_ttl)
                .watchdog(false)
                .wait(EVENT_LIMIT)
                .acquire()
                .await
                .expect("the writer gets in")
        })
    };
    until_a_writer_waits(&raw, "crash2").await;
    live.release().await.expect("the live reader leaves");
    assert!(
        server_ms(&raw).await < dead_until,
        "the test is too slow to show anything: the dead lease already ended"
    );
    let g = writer.await.expect("writer task");
    let h = fields(&raw, "crash2").await;
    let acquired_at = number(&h, "writer-until") - writer_ttl.as_millis() as u64;
    assert!(
        acquired_at >= dead_until,
        "the writer got in {} ms before the dead reader's lease ended",
        dead_until - acquired_at
    );
    // Its busy answers told the writer to come back when that lease ends; allow one renewal
    // the dead reader may have had on its way when killed (ttl / 3) plus a loaded machine.
    let late = acquired_at - dead_until;
    assert!(
        late < DEAD_TTL_MS / 3 + 1000,
        "the writer got in {late} ms after the dead lease ended"
    );
    assert!(owners(&h, "read").is_empty(), "the dead share was pruned");
    g.release().await.expect("release");
}

/// Renewal is per owner on both sides, and a lease taken away is reported on the guard.
#[tokio::test]
async fn the_watchdog_renews_each_side_per_owner_and_reports_a_lost_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let ttl = Duration::from_millis(300);
    let lost = locks
        .read("dog")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let victim = read_field(&raw, "dog").await;
    let kept = as_other_owner(locks.read("dog").ttl(ttl).try_acquire())
        .await
        .expect("readers share");
    let kept_until = owners(&fields(&raw, "dog").await, "read")
        .into_iter()
        .map(|o| format!("read-until:{o}"))
        .find(|f| *f != victim.replacen("read:", "read-until:", 1))
        .expect("the second reader");
    // Take away one reader's share, as if its lease had run out: its next renewal is refused
    // and its guard reports the loss. The other reader's lease is untouched and renewed on.
    let victim_owner = victim.strip_prefix("read:").expect("a reader's entry");
    let _: () = raw
        .hdel(
            lock_key("dog"),
            &[
                format!("r:{victim_owner}"),
                format!("r-until:{victim_owner}"),
            ],
        )
        .await
        .expect("HDEL");
    let _: () = raw
        .zrem(readers_key("dog"), victim_owner)
        .await
        .expect("ZREM");
    let err = tokio::time::timeout(EVENT_LIMIT, lost.lost())
        .await
        .expect("the loss is reported");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let until = number(&fields(&raw, "dog").await, &kept_until);
    let renewed = wait_until_async(EVENT_LIMIT, || async {
        number(&fields(&raw, "dog").await, &kept_until) > until
    })
    .await;
    assert!(renewed, "the other reader's lease is no longer renewed");
    assert!(kept.is_held());
    assert!(!lost.is_held());
    kept.release().await.expect("release");
    let refused = lost.release().await.unwrap_err();
    assert!(matches!(refused, Error::NotOwner { .. }), "{refused}");
    // The write side: renewed past its ttl, and a lost write lease is reported too.
    let w = locks
        .write("dog")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let until = number(&fields(&raw, "dog").await, "writer-until");
    let renewed = wait_until_async(EVENT_LIMIT, || async {
        number(&fields(&raw, "dog").await, "writer-until") > until + ttl.as_millis() as u64
    })
    .await;
    assert!(renewed && w.is_held(), "the write lease is not renewed");
    let _: () = raw.del(lock_key("dog")).await.expect("DEL");
    let err = tokio::time::timeout(EVENT_LIMIT, w.lost())
        .await
        .expect("the loss is reported");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
}
