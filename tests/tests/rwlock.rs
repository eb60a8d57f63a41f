//! The read/write lock: readers share, writers exclude, each reader's lease is its own,
//! waiting writers keep new readers out, downgrade works and upgrade is refused.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{as_other_owner, channel, client, fence_key, lock_key, run_contenders, spawn_holder};
use distlock::{Client, Error, LockMode};
use distlock_testkit::{wait_until_async, FaultProxy, Observer, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner; only a broken lock
/// reaches it, and the test then fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// The lock's hash, field by field, with the per-acquisition fields summed up per owner: one
/// `read:<owner>` count in place of that owner's `r:<nonce>` fields, and `writer-count` in
/// place of the `w:<nonce>` fields.
async fn fields(raw: &MultiplexedConnection, name: &str) -> HashMap<String, String> {
    let raw_fields: HashMap<String, String> =
        raw.clone().hgetall(lock_key(name)).await.expect("HGETALL");
    let mut view = HashMap::new();
    let mut reads: HashMap<String, u64> = HashMap::new();
    let mut writes = 0u64;
    for (field, value) in raw_fields {
        if field.starts_with("r:") {
            *reads.entry(value).or_default() += 1;
        } else if field.starts_with("w:") {
            writes += 1;
        } else {
            view.insert(field, value);
        }
    }
    for (owner, n) in reads {
        view.insert(format!("read:{owner}"), n.to_string());
    }
    if writes > 0 {
        view.insert("writer-count".to_owned(), writes.to_string());
    }
    view
}

/// The owners with a field of the given kind (`read`, `read-until`, `intent`).
fn owners(fields: &HashMap<String, String>, kind: &str) -> Vec<String> {
    let prefix = format!("{kind}:");
    fields
        .keys()
        .filter_map(|f| f.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

/// A numeric field of the hash.
fn number(fields: &HashMap<String, String>, field: &str) -> u64 {
    fields
        .get(field)
        .unwrap_or_else(|| panic!("no field {field} in {fields:?}"))
        .parse()
        .expect("a number")
}

/// The server's clock in milliseconds: the clock the lock's leases are written in.
async fn server_ms(raw: &MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut raw.clone())
        .await
        .expect("TIME");
    secs * 1000 + micros / 1000
}

async fn dump(raw: &MultiplexedConnection, name: &str) -> Vec<u8> {
    redis::cmd("DUMP")
        .arg(lock_key(name))
        .query_async(&mut raw.clone())
        .await
        .expect("DUMP")
}

/// Waits until a writer has registered its intent (it tried once and found the lock busy).
async fn until_a_writer_waits(raw: &MultiplexedConnection, name: &str) {
    let waiting = wait_until_async(EVENT_LIMIT, || async {
        !owners(&fields(raw, name).await, "intent").is_empty()
    })
    .await;
    assert!(waiting, "no writer intent appeared in {name}");
}

/// Spawns a task (a new owner) that waits for the write lock, then releases it at once;
/// it returns when it got the lock.
fn spawn_writer(locks: &Client, name: &str, ttl: Duration) -> tokio::task::JoinHandle<Instant> {
    let (locks, name) = (locks.clone(), name.to_owned());
    tokio::spawn(async move {
        let g = locks
            .write(&name)
            .ttl(ttl)
            .wait(EVENT_LIMIT)
            .acquire()
            .await
            .expect("the writer gets the lock");
        let at = Instant::now();
        g.release().await.expect("release");
        at
    })
}

/// 8 readers and 2 writers in 2 processes for 3 s, with a probe for each side: writers never
/// overlap each other or a reader, and readers do share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_across_processes() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let sections = run_contenders(
        2,
        &[
            "rw",
            &server.url(),
            &observer_server.url(),
            "rw",
            "4",
            "1",
            "3",
        ],
    );
    let writers = Observer::connect(&observer_server.url(), "rw-w").await;
    let readers = Observer::connect(&observer_server.url(), "rw-r").await;
    assert_eq!(writers.violations().await, 0, "two writers at once");
    assert_eq!(writers.max_occupancy().await, 1);
    assert_eq!(
        writers.overlaps().await,
        0,
        "a writer found a reader inside"
    );
    assert_eq!(
        readers.overlaps().await,
        0,
        "a reader found a writer inside"
    );
    assert_eq!(
        writers.counter().await,
        writers.acked().await,
        "lost updates between writers"
    );
    assert_eq!(writers.stale_tokens().await, 0, "write tokens must grow");
    let (writes, reads_together) = (writers.acked().await, readers.max_occupancy().await);
    assert!(writes > 0, "the writers got in");
    assert!(reads_together >= 2, "readers never shared the lock");
    println!("sections per process {sections:?}, writes {writes}, most readers together {reads_together}");
}

/// Seed 004's cluster variant keeps one `read` timestamp for all readers, so the first reader
/// to release deletes it and lets a writer in beside the other reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_one_readers_release_leaves_the_other_reader_holding() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let a = locks.read("doc").try_acquire().await.expect("free");
    let b = as_other_owner(locks.read("doc").try_acquire())
        .await
        .expect("readers share");
    assert_eq!(owners(&fields(&raw, "doc").await, "read").len(), 2);
    b.release().await.expect("B releases");
    assert_eq!(
        owners(&fields(&raw, "doc").await, "read").len(),
        1,
        "A still reads"
    );
    let busy = as_other_owner(locks.write("doc").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let writer = spawn_writer(&locks, "doc", Duration::from_secs(30));
    until_a_writer_waits(&raw, "doc").await;
    assert!(!writer.is_finished(), "the writer got in beside reader A");
    let released = Instant::now();
    a.release().await.expect("A releases");
    let acquired = tokio::time::timeout(EVENT_LIMIT, writer)
        .await
        .expect("the writer gets in once A left")
        .expect("writer task");
    assert!(acquired >= released, "the writer got in before A released");
    // The last reader's release wakes the writer; this bound only catches a stall.
    let handoff = acquired - released;
    assert!(
        handoff < Duration::from_secs(2),
        "hand-off took {handoff:?}"
    );
}

/// The writer-preference policy, step by step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out_but_readers_inside_may_re_enter() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let a = locks.read("pref").try_acquire().await.expect("free");
    // Without a waiting writer, a second reader comes straight in.
    let b = as_other_owner(locks.read("pref").try_acquire())
        .await
        .expect("readers share");
    b.release().await.expect("release");
    let writer = spawn_writer(&locks, "pref", Duration::from_secs(30));
    until_a_writer_waits(&raw, "pref").await;
    let refused = as_other_owner(locks.read("pref").try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Busy { .. }),
        "a new reader got in while a writer waits: {refused}"
    );
    let again = locks
        .read("pref")
        .try_acquire()
        .await
        .expect("a reader inside may re-enter");
    assert_eq!(
        number(&fields(&raw, "pref").await, &read_field(&raw, "pref").await),
        2
    );
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    again.release().await.expect("release");
    a.release().await.expect("release");
    tokio::time::timeout(EVENT_LIMIT, writer)
        .await
        .expect("the writer gets in after the readers left")
        .expect("writer task");
    // Once the writer is done (its intent gone with it), readers come in again.
    as_other_owner(locks.read("pref").try_acquire())
        .await
        .expect("readers are welcome again")
        .release()
        .await
        .expect("release");
    let left = fields(&raw, "pref").await;
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

/// The `read:<owner>` field of the only reader.
async fn read_field(raw: &MultiplexedConnection, name: &str) -> String {
    let readers = owners(&fields(raw, name).await, "read");
    assert_eq!(readers.len(), 1, "{readers:?}");
    format!("read:{}", readers[0])
}

/// A continuous stream of readers, each holding for `READ_HOLD`, a new one arriving every
/// `READ_HOLD / 2`: without writer preference the lock is never free of readers and a writer
/// would wait forever (Redisson's read/write lock documents exactly that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_under_a_continuous_stream_of_readers() {
    const READ_HOLD: Duration = Duration::from_millis(50);
    const WRITER_TTL: Duration = Duration::from_secs(1);
    // The bound: the writer's first attempt registers its intent, after which no new reader
    // enters; the readers inside entered at most READ_HOLD earlier, so they are all gone
    // READ_HOLD later, and the last one's release wakes the writer. Should that wake-up be
    // lost, the busy answer already told the writer to retry within a third of its intent
    // (min(ttl, 2 s) / 3 = 333 ms here). Two seconds on top absorb a loaded 2-core machine.
    let bound = READ_HOLD + WRITER_TTL / 3 + Duration::from_secs(2);
    let server = RedisServer::start();
    // Several clients, so the readers' arrivals are not queued behind each other inside one
    // client: each arrives on schedule, like requests from many processes.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let writer_client = client(&server).await;
    let inside = Arc::new(AtomicI64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    let stream = {
        let (inside, reads, stop) = (inside.clone(), reads.clone(), stop.clone());
        tokio::spawn(async move {
            let mut readers = tokio::task::JoinSet::new();
            let mut tick = tokio::time::interval(READ_HOLD / 2);
            for n in 0.. {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.notified() => break,
                }
                let locks: Client = clients[n % clients.len()].clone();
                let (inside, reads) = (inside.clone(), reads.clone());
                readers.spawn(async move {
                    let g = locks
                        .read("stream")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .expect("readers are served");
                    inside.fetch_add(1, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(READ_HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                });
            }
            while let Some(r) = readers.join_next().await {
                r.expect("reader task");
            }
        })
    };
    for round in 0..3 {
        // Let the stream run (its readers overlap all along), then ask for the write lock.
        let seen = reads.load(Ordering::SeqCst);
        let streaming = wait_until_async(EVENT_LIMIT, || async {
            reads.load(Ordering::SeqCst) >= seen + 8 && inside.load(Ordering::SeqCst) > 0
        })
        .await;
        assert!(streaming, "round {round}: the reader stream is not running");
        let asked = Instant::now();
        let g = writer_client
            .write("stream")
            .ttl(WRITER_TTL)
            .wait(bound)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the writer starved: {e}"));
        let waited = asked.elapsed();
        assert_eq!(
            inside.load(Ordering::SeqCst),
            0,
            "a reader is inside with the writer"
        );
        assert!(
            waited <= bound,
            "round {round}: the writer waited {waited:?}, more than {bound:?}"
        );
        println!("round {round}: the writer waited {waited:?}");
        g.release().await.expect("release");
    }
    stop.notify_one();
    stream.await.expect("stream");
}

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
    let mut last_write = 0;
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
    // A string, a hash without expiry, and a hash with expiry that is not a read/write lock.
    let _: () = raw.set(lock_key("s"), "hello").await.expect("SET");
    let _: () = raw.hset(lock_key("h"), "name", "ada").await.expect("HSET");
    let _: () = raw.hset(lock_key("he"), "name", "ada").await.expect("HSET");
    let _: () = raw.pexpire(lock_key("he"), 60_000).await.expect("PEXPIRE");
    for name in ["s", "h", "he"] {
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
    let _: () = raw
        .hdel(
            lock_key("dog"),
            &[victim.clone(), victim.replacen("read:", "read-until:", 1)],
        )
        .await
        .expect("HDEL");
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

/// A writer's release wakes every waiting reader at once: their fallback sleep is the
/// writer's remaining lease (30 s), so only the wake-up brings them in this soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_wakes_every_waiting_reader() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let w = locks
        .write("wake")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let mut readers = three_sharing_readers(&locks, "wake");
    // All three tried once and are parked on the lock's channel.
    let parked = wait_until_async(EVENT_LIMIT, || async {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel("wake"))
            .query_async(&mut server.async_connection().await)
            .await
            .map(|v: Vec<(String, i64)>| v.into_iter().next().expect("one channel"))
            .expect("PUBSUB NUMSUB");
        n > 0
    })
    .await;
    assert!(parked);
    let released = Instant::now();
    w.release().await.expect("release");
    all_get_in_soon(&mut readers, released).await;
}

/// Readers of one client whose busy answers come back after the writer released, a release
/// none of them heard (nobody here had subscribed to the lock yet): the first to subscribe
/// re-checks and gets in, and the others, which join its subscription, must re-check too,
/// since the lock is free for them as well. The replies to this client are delayed through
/// the proxy, so the order is forced: the attempts reach the server at once, the release
/// follows, and the busy answers and the subscription come after it. Fails on the code before
/// af32497: the joiners slept until their wait ran out (the first reader keeps its hold until
/// all are in, so its release cannot wake them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_join_a_subscription_after_an_unheard_release_check_again() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start_for(&server);
    let holder = client(&server).await;
    let readers_client = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    // The warm-up goes through the readers' call site: the read script is loaded and the
    // process's record written beforehand, so each reader's attempt is one EVALSHA.
    let warm = reader(&readers_client, "warm")
        .acquire()
        .await
        .expect("free");
    warm.release().await.expect("release");
    let w = holder
        .write("unheard")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let evalsha = || server.commandstats().get("evalsha").copied().unwrap_or(0);
    let before = evalsha();
    proxy.reply_latency(Duration::from_millis(400));
    let mut readers = three_sharing_readers(&readers_client, "unheard");
    // All three attempts reached the server (their busy answers are on their way).
    let attempted = wait_until_async(EVENT_LIMIT, || async { evalsha() >= before + 3 }).await;
    assert!(attempted, "the readers never attempted");
    let released = Instant::now();
    w.release().await.expect("release");
    all_get_in_soon(&mut readers, released).await;
}

/// A reader of `name` that waits up to 20 s; one call site for every reader of the tests
/// below (and their warm-ups).
fn reader<'a>(locks: &'a Client, name: &str) -> distlock::LockRequest<'a> {
    locks.read(name).wait(Duration::from_secs(20))
}

/// Three tasks that each take a read hold of `name` and keep it until all three are in (so
/// that no reader's own release wakes the next); each returns when it got in.
fn three_sharing_readers(locks: &Client, name: &'static str) -> tokio::task::JoinSet<Instant> {
    let inside = Arc::new(AtomicI64::new(0));
    let (all_in_tx, all_in) = tokio::sync::watch::channel(());
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (locks, inside, all_in_tx) = (locks.clone(), inside.clone(), all_in_tx.clone());
        let mut all_in = all_in.clone();
        readers.spawn(async move {
            let g = reader(&locks, name).acquire().await.expect("reader");
            let at = Instant::now();
            if inside.fetch_add(1, Ordering::SeqCst) == 2 {
                all_in_tx.send(()).expect("signal");
            }
            all_in.changed().await.expect("all in");
            g.release().await.expect("release");
            at
        });
    }
    readers
}

/// Every reader got in within 5 s of the writer's `released` (their wait is 20 s).
async fn all_get_in_soon(readers: &mut tokio::task::JoinSet<Instant>, released: Instant) {
    while let Some(at) = readers.join_next().await {
        let woken = at.expect("reader task") - released;
        assert!(
            woken < Duration::from_secs(5),
            "a reader got in only after {woken:?}"
        );
    }
}
