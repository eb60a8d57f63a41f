//! Inspection of every mode, listing, and the value a setnx lock stores.

use super::*;

// ---------------------------------------------------------------------------------------------
// Inspection.

fn recent(t: Option<SystemTime>) -> bool {
    t.and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d < Duration::from_secs(60))
}

#[tokio::test]
async fn inspection_reports_the_holder_of_every_exclusive_mode() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let free = locks.inspect("nobody").await.expect("inspect");
    assert!(!free.is_held());
    assert_eq!(free.holder, None);
    assert_eq!(free.last_fencing_token, None);

    // setnx
    let g = locks
        .lock("i-setnx")
        .ttl(Duration::from_secs(20))
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    let info = locks.inspect("i-setnx").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::SetNx));
    assert_eq!(info.hold_count, 1);
    assert_eq!(info.fencing_token, g.fencing_token());
    assert!(info.fencing_token.is_some());
    assert!(info.remaining.unwrap() <= Duration::from_secs(20));
    let h = info.holder.expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(h.host.is_some_and(|h| !h.is_empty()));
    assert!(
        h.site
            .as_deref()
            .is_some_and(|s| s.contains("operations.rs")),
        "{:?}",
        h.site
    );
    assert!(recent(h.acquired_at));
    let token = g.fencing_token();
    g.release().await.expect("release");
    let after = locks.inspect("i-setnx").await.expect("inspect");
    assert!(!after.is_held());
    assert_eq!(after.last_fencing_token, token);

    // reentrant, entered twice
    let outer = locks.reentrant("i-re").acquire().await.expect("free");
    let info = locks.inspect("i-re").await.expect("inspect");
    assert_eq!(info.fencing_token, None, "taken without fencing");
    let inner = locks
        .reentrant("i-re")
        .fencing(true)
        .acquire()
        .await
        .expect("re-entry");
    let info = locks.inspect("i-re").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Reentrant));
    assert_eq!(info.hold_count, 2);
    assert_eq!(info.fencing_token, inner.fencing_token());
    assert!(info.fencing_token.is_some(), "minted by the re-entry");
    let h = info.holder.expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(recent(h.acquired_at));
    inner.release().await.expect("release");
    assert_eq!(locks.inspect("i-re").await.unwrap().hold_count, 1);
    outer.release().await.expect("release");
    assert!(!locks.inspect("i-re").await.unwrap().is_held());

    // write
    let w = locks
        .write("i-rw")
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    let info = locks.inspect("i-rw").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Write));
    assert_eq!(info.fencing_token, w.fencing_token());
    assert!(info.fencing_token.is_some());
    assert_eq!(
        info.holder.as_ref().and_then(|h| h.pid),
        Some(std::process::id())
    );
    w.release().await.expect("release");
}

#[tokio::test]
async fn inspection_reports_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let r1 = as_other_owner(locks.read("doc").acquire())
        .await
        .expect("read");
    let r2 = as_other_owner(locks.read("doc").acquire())
        .await
        .expect("read");
    let info = locks.inspect("doc").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Read));
    assert_eq!(info.readers.len(), 2);
    assert_eq!(info.hold_count, 2);
    assert!(info.holder.is_none());
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move {
            let w = locks
                .write("doc")
                .wait(EVENT_LIMIT)
                .acquire()
                .await
                .expect("write");
            w.release().await.expect("release");
        }
    });
    // The writer registers its intent on its first attempt.
    let deadline = Instant::now() + EVENT_LIMIT;
    loop {
        let info = locks.inspect("doc").await.expect("inspect");
        if info.waiting_writers.len() == 1 {
            assert_eq!(info.mode, Some(LockMode::Read));
            break;
        }
        assert!(Instant::now() < deadline, "the waiting writer never showed");
        tokio::task::yield_now().await;
    }
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    writer.await.expect("writer");
    let info = locks.inspect("doc").await.expect("inspect");
    assert!(!info.is_held());
}

#[distlock::distributed_lock(key = "job:<n>", client = locks, ttl = "10s")]
async fn inspected_from_inside(
    locks: &distlock::Client,
    n: u32,
) -> Result<distlock::LockInfo, Error> {
    locks.inspect(format!("job:{n}")).await
}

#[tokio::test]
async fn a_locked_fn_is_named_as_the_holder() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let info = inspected_from_inside(&locks, 3).await.expect("locked call");
    let h = info.holder.expect("held while the body runs");
    assert_eq!(h.site.as_deref(), Some("operations::inspected_from_inside"));
}

#[tokio::test]
async fn listing_shows_held_locks_only() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let a = locks.lock("list:a").acquire().await.expect("free");
    let b = locks.reentrant("list:{b}").acquire().await.expect("free");
    let c = locks.read("list:c").acquire().await.expect("free");
    let gone = locks.lock("list:d").acquire().await.expect("free");
    gone.release().await.expect("release");
    assert_eq!(
        locks.list().await.expect("list"),
        ["list:a", "list:c", "list:{b}"]
    );
    // The CLI over the same API.
    let url = server.url();
    let (out, code) = distlock::__cli::run(&["--url".into(), url.clone(), "list".into()]).await;
    assert_eq!((out.as_str(), code), ("list:a\nlist:c\nlist:{b}", 0));
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "inspect".into(),
        "list:a".into(),
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("state: held (setnx)"), "{out}");
    assert!(
        out.contains(&format!("pid: {}", std::process::id())),
        "{out}"
    );
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "unlock".into(),
        "list:a".into(),
    ])
    .await;
    assert_eq!(code, 2, "a reason is required: {out}");
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "unlock".into(),
        "list:a".into(),
        "--reason".into(),
        "test".into(),
    ])
    .await;
    assert_eq!((out.as_str(), code), ("unlocked list:a", 0));
    assert!(!a.is_held() || a.remaining() > Duration::ZERO); // the guard learns at its next renewal
    assert_eq!(locks.list().await.expect("list"), ["list:c", "list:{b}"]);
    drop((a, b, c));
}

/// A waiter marks a busy setnx lock as waited for, with a key beside it that lasts as long as
/// the holder's lease; the listing names locks, not their marks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_leaves_out_the_waited_for_mark() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks.lock("list:w").acquire().await.expect("free");
    let waiter = common::spawn_waiter(&locks, "list:w", Duration::from_secs(30));
    let mut raw = server.async_connection().await;
    let marked = distlock_testkit::wait_until_async(Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(common::waited_key("list:w"))
                .query_async::<bool>(&mut raw)
                .await
                .expect("EXISTS")
        }
    })
    .await;
    assert!(marked, "the waiter marked the lock");
    assert_eq!(locks.list().await.expect("list"), ["list:w"]);
    held.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    assert!(locks.list().await.expect("list").is_empty());
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    // The process's record (who its holds' tags name) stays; nothing of the lock does.
    assert!(
        left.iter().all(|k| k.starts_with("distlock:#process:")),
        "nothing left behind: {left:?}"
    );
}

#[tokio::test]
async fn a_setnx_value_fits_one_server_allocation_and_names_its_holder_through_the_process_record()
{
    let server = RedisServer::start();
    let locks = client(&server).await;
    let first = locks.lock("rec:1").acquire().await.expect("free");
    let mut raw = server.async_connection().await;
    // At most 44 bytes Redis keeps a string in one allocation with its header; every byte of
    // the value is copied, compared and sent back on every acquisition and release.
    let value: String = redis::cmd("GET")
        .arg("distlock:{rec:1}")
        .query_async(&mut raw)
        .await
        .expect("GET");
    assert!(value.len() <= 44, "{value:?} is {} bytes", value.len());
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg("distlock:{rec:1}")
        .query_async(&mut raw)
        .await
        .expect("OBJECT ENCODING");
    assert_eq!(encoding, "embstr");

    let h = locks.inspect("rec:1").await.expect("inspect").holder;
    let h = h.expect("held");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(h.host.is_some_and(|h| !h.is_empty()));
    assert!(h.site.is_some_and(|s| s.contains("operations.rs")));
    assert!(recent(h.acquired_at));
    let process = h.process.expect("the holder's process tag");
    let record = format!("distlock:#process:{{{process}}}");
    let pid: Option<u32> = redis::cmd("HGET")
        .arg(&record)
        .arg("pid")
        .query_async(&mut raw)
        .await
        .expect("HGET");
    assert_eq!(pid, Some(std::process::id()));
    let kept = redis::cmd("PTTL")
        .arg(&record)
        .query_async::<i64>(&mut raw)
        .await
        .expect("PTTL");
    assert!(kept > 0, "the record expires (PTTL {kept})");
    assert_eq!(locks.list().await.expect("list"), ["rec:1"]);

    // The record lost (a server restarted without persistence, a failover): the holder is
    // still told apart by its process and time.
    let _: () = redis::cmd("DEL")
        .arg(&record)
        .query_async(&mut raw)
        .await
        .expect("DEL");
    let lost = locks.inspect("rec:1").await.expect("inspect").holder;
    let lost = lost.expect("still held");
    assert_eq!(lost.process.as_deref(), Some(process.as_str()));
    assert_eq!(lost.acquired_at, h.acquired_at);
    assert_eq!((lost.host, lost.pid, lost.site), (None, None, None));

    // A hold from a site the server's record lacks writes the whole record again first.
    let second = locks.lock("rec:2").acquire().await.expect("free");
    let again = locks.inspect("rec:1").await.expect("inspect").holder;
    let again = again.expect("still held");
    assert_eq!(again.pid, Some(std::process::id()));
    assert!(again.site.is_some_and(|s| s.contains("operations.rs")));
    first.release().await.expect("release");
    second.release().await.expect("release");
}
