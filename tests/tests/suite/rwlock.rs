//! The read/write lock: readers share, writers exclude, each reader's lease is its own,
//! waiting writers keep new readers out, downgrade works and upgrade is refused.

mod cost;
mod foreign;
mod leases;
mod reentry;
mod wakeups;

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    as_other_owner, channel, client, fence_key, intents_key, lock_key, readers_key, run_contenders,
    spawn_holder,
};
use distlock::{Client, Error, LockMode};
use distlock_testkit::{wait_until_async, FaultProxy, Observer, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner; only a broken lock
/// reaches it, and the test then fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// Fields the view leaves out: who took the write tenure (for inspection) and what the scripts
/// keep about their own keys.
const NOT_SHOWN: [&str; 6] = [
    "writer-holder",
    "rwlock-layout",
    "keys-until",
    "helpers-until",
    "intents-until",
    "readers-from",
];

/// The lock's state as one map, in the terms of its rules rather than its layout: `mode`,
/// `writer`, `writer-until` and `writer-fence` as the hash holds them (its layout marker and
/// the summaries the scripts keep of their own keys left out: `rwlock-layout`, `keys-until`,
/// `helpers-until`, `intents-until`, `readers-from`), `writer-count` for the number of write
/// acquisitions, and per owner `read:<owner>` (its number of read acquisitions),
/// `read-until:<owner>` (its lease end, from the readers' set; the hash's copy,
/// `r-until:<owner>`, is checked against it) and `intent:<owner>` (its intent's end, from the
/// intents' set; each set's placeholder member left out). Entries the scripts have not
/// cleared yet show too, as on the server. The three keys are read in one `MULTI`, so that a
/// renewal cannot land between them.
async fn fields(raw: &MultiplexedConnection, name: &str) -> HashMap<String, String> {
    type Scores = Vec<(String, u64)>;
    let (raw_fields, readers, intents): (HashMap<String, String>, Scores, Scores) = redis::pipe()
        .atomic()
        .hgetall(lock_key(name))
        .zrange_withscores(readers_key(name), 0, -1)
        .zrange_withscores(intents_key(name), 0, -1)
        .query_async(&mut raw.clone())
        .await
        .expect("HGETALL and ZRANGEs");
    let count = |list: &str| list.split_whitespace().count().to_string();
    let mut view = HashMap::new();
    let mut lease_copies = HashMap::new();
    for (field, value) in raw_fields {
        if let Some(owner) = field.strip_prefix("r-until:") {
            lease_copies.insert(format!("read-until:{owner}"), value);
        } else if let Some(owner) = field.strip_prefix("r:") {
            view.insert(format!("read:{owner}"), count(&value));
        } else if field == "writer-holds" {
            view.insert("writer-count".to_owned(), count(&value));
        } else if !NOT_SHOWN.contains(&field.as_str()) {
            view.insert(field, value);
        }
    }
    for (members, kind) in [(readers, "read-until"), (intents, "intent")] {
        for (owner, until) in members.into_iter().filter(|(owner, _)| !owner.is_empty()) {
            view.insert(format!("{kind}:{owner}"), until.to_string());
        }
    }
    for (lease, copy) in lease_copies {
        assert_eq!(
            view.get(&lease),
            Some(&copy),
            "the hash's copy of {lease} disagrees with the readers' set"
        );
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

/// Every key of the lock, serialized (the hash, its readers and its intents).
async fn dump(raw: &MultiplexedConnection, name: &str) -> Vec<Option<Vec<u8>>> {
    let mut all = Vec::new();
    for key in [lock_key(name), readers_key(name), intents_key(name)] {
        all.push(
            redis::cmd("DUMP")
                .arg(key)
                .query_async(&mut raw.clone())
                .await
                .expect("DUMP"),
        );
    }
    all
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
