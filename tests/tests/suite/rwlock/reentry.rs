//! Within one owner: downgrade, a refused upgrade, re-entry, and fencing on both sides.

use super::*;

#[tokio::test]
async fn a_writer_downgrades_by_taking_the_read_lock_then_releasing_the_write_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let w = locks
        .write("down")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let r = locks
        .read("down")
        .fencing(true)
        .try_acquire()
        .await
        .expect("the writer may read");
    assert_eq!(
        r.fencing_token(),
        w.fencing_token(),
        "a read returns the latest write's token"
    );
    let busy = as_other_owner(locks.read("down").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    w.release().await.expect("release the write lock");
    let h = fields(&raw, "down").await;
    assert_eq!(h.get("mode").map(String::as_str), Some("read"), "{h:?}");
    assert!(!h.contains_key("writer"), "{h:?}");
    assert!(r.is_held());
    as_other_owner(locks.read("down").try_acquire())
        .await
        .expect("other readers join after the downgrade")
        .release()
        .await
        .expect("release");
    let busy = as_other_owner(locks.write("down").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    r.release().await.expect("release");
    // Only the refused writer's intent may remain (it lapses within min(ttl, 2 s)).
    let h = fields(&raw, "down").await;
    assert!(
        h.keys().all(|f| f.starts_with("intent:")),
        "a hold survived its last release: {h:?}"
    );
}

#[tokio::test]
async fn an_upgrade_is_refused_at_once_and_changes_nothing() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let r = locks.read("up").try_acquire().await.expect("free");
    let before = dump(&raw, "up").await;
    let asked = Instant::now();
    let err = locks
        .write("up")
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Upgrade { .. }), "{err}");
    assert!(
        asked.elapsed() < EVENT_LIMIT / 2,
        "refused only after waiting {:?}",
        asked.elapsed()
    );
    assert!(!err.is_retryable());
    assert_eq!(err.name(), Some("up"));
    let message = err.to_string();
    assert!(message.contains("release the read lock first"), "{message}");
    assert_eq!(dump(&raw, "up").await, before, "no intent, no change");
    r.release().await.expect("release");
    // Taking the write lock from the start works.
    locks
        .write("up")
        .try_acquire()
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

#[tokio::test]
async fn read_and_write_re_enter_per_task_and_fencing_counts_writes_only() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let mut last_write = distlock::FencingToken::new(0);
    for _ in 0..3 {
        let mut writes = Vec::new();
        for _ in 0..3 {
            let write = locks.write("nest").fencing(true).try_acquire().await;
            writes.push(write.expect("re-entry"));
        }
        let token = writes[0].fencing_token().expect("fencing(true)");
        assert!(writes.iter().all(|g| g.fencing_token() == Some(token)));
        assert!(token > last_write, "each write tenure draws a larger token");
        last_write = token;
        assert_eq!(number(&fields(&raw, "nest").await, "writer-count"), 3);
        for g in writes {
            g.release().await.expect("release a level");
        }
        let mut reads = Vec::new();
        for _ in 0..3 {
            let read = locks.read("nest").fencing(true).try_acquire().await;
            reads.push(read.expect("re-entry"));
        }
        assert!(
            reads.iter().all(|g| g.fencing_token() == Some(last_write)),
            "reads return the counter without drawing"
        );
        let field = read_field(&raw, "nest").await;
        assert_eq!(number(&fields(&raw, "nest").await, &field), 3);
        for g in reads {
            g.release().await.expect("release a level");
        }
        let exists: bool = raw.clone().exists(lock_key("nest")).await.expect("EXISTS");
        assert!(!exists, "balanced releases delete the lock");
    }
}

/// Without fencing neither side reads or writes the counter and neither gets a token; a write
/// re-entry that asks mints the tenure's token then, and a read that asks gets the latest
/// fenced write's token.
#[tokio::test]
async fn fencing_only_when_asked_on_both_sides() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let counter = fence_key("lazy");
    let w = locks.write("lazy").try_acquire().await.expect("free");
    assert_eq!(w.fencing_token(), None);
    let r = locks.read("lazy").try_acquire().await.expect("downgrade");
    assert_eq!(r.fencing_token(), None);
    let exists: bool = raw.clone().exists(&counter).await.expect("EXISTS");
    assert!(!exists, "a counter was written without fencing");
    let fenced = locks
        .write("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    let token = fenced.fencing_token().expect("fencing(true)");
    let again = locks
        .write("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    assert_eq!(
        again.fencing_token(),
        Some(token),
        "the tenure keeps its token"
    );
    let read = locks
        .read("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("the writer may read");
    assert_eq!(
        read.fencing_token(),
        Some(token),
        "the latest fenced write's"
    );
    for g in [read, again, fenced, r, w] {
        g.release().await.expect("release");
    }
    let next = locks
        .write("lazy")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(next.fencing_token().expect("fencing(true)") > token);
    next.release().await.expect("release");
}
