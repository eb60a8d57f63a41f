//! Lock names come from request data (`key = "order:<id>"` renders parameters verbatim): no
//! name may reach another name's lock, a helper key of any lock (its waited-for mark, its
//! fencing counter, its forced-unlock record), a process's record or another lock's channel,
//! whatever braces or suffixes it carries; every key of a lock stays in one Cluster slot; and
//! every key the library writes expires.
//!
//! Each collision test names the key layout's defect it reproduces: on the layout
//! `<prefix>:<tagged name><suffix>`, a name that carried its own hash tag kept it verbatim, so
//! `{k}:waited` was lock `k`'s waited-for mark, `{f}:fence` its fencing counter and
//! `{<process tag>}:process` a process's record.

use crate::common;

use std::time::Duration;

use common::{as_other_owner, client, fence_key, intents_key, readers_key};
use distlock::{Client, Error};
use distlock_testkit::{wait_until_async, RedisCluster, RedisServer};

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// True when another owner (of another client) can take `name` at once.
async fn free_for_another(server: &RedisServer, name: &str) -> bool {
    let other = client(server).await;
    match as_other_owner(other.lock(name).try_acquire()).await {
        Ok(g) => {
            g.release().await.expect("release");
            true
        }
        Err(Error::Busy { .. }) => false,
        Err(e) => panic!("`{name}`: {e}"),
    }
}

/// Some client is subscribed to some channel: a waiter parks only after its busy attempt
/// (which marks a setnx lock as waited for) and its subscription.
async fn someone_listens(server: &RedisServer) -> bool {
    let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("PUBSUB CHANNELS");
    !channels.is_empty()
}

#[tokio::test]
async fn a_name_spelled_with_a_hash_tag_is_another_lock_than_the_name_without() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks.lock("order:42").try_acquire().await.expect("free");
    // Failed on the old layout: both names lived at `distlock:{order:42}`.
    assert!(free_for_another(&server, "{order:42}").await);
    assert!(!free_for_another(&server, "order:42").await);
    held.release().await.expect("release");
}

#[tokio::test]
async fn releasing_a_lock_never_deletes_the_lock_named_like_its_waited_mark() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks
        .lock("{k}:waited")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let k = as_other_owner(locks.lock("k").try_acquire())
        .await
        .expect("k is free");
    k.release().await.expect("release k");
    // Failed on the old layout: the release of `k` deleted its mark `{k}:waited`, which was
    // this lock, so another owner took it while `held` said held.
    assert!(
        !free_for_another(&server, "{k}:waited").await,
        "a second owner took `{{k}}:waited`"
    );
    assert!(held.is_held());
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_never_overwrites_the_lock_named_like_the_waited_mark() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut held = locks
        .lock("{k}:waited")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("free");
    let k = locks.lock("k").try_acquire().await.expect("k is free");
    let waiters = client(&server).await;
    let waiter = tokio::spawn(async move {
        waiters
            .lock("k")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    });
    assert!(
        wait_until_async(EVENT_LIMIT, || someone_listens(&server)).await,
        "the waiter of `k` parked"
    );
    // Failed on the old layout: the waiter's busy attempt set the mark `{k}:waited` to `1`
    // over this lock's token; the renewal found another value and reported the lease lost.
    held.extend(Duration::from_secs(30))
        .await
        .expect("`{k}:waited` is still held by its owner");
    assert!(!free_for_another(&server, "{k}:waited").await);
    k.release().await.expect("release k");
    let g = waiter.await.expect("task").expect("the waiter gets `k`");
    g.release().await.expect("release");
    assert!(held.is_held());
    held.release().await.expect("release");
}

#[tokio::test]
async fn a_lock_named_like_a_fencing_counter_leaves_fencing_working() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks.lock("{f}:fence").try_acquire().await.expect("free");
    // Failed on the old layout: `f`'s counter was that lock's value, and INCR refused it.
    let fenced = as_other_owner(locks.lock("f").fencing(true).try_acquire())
        .await
        .expect("a fenced `f` beside a lock named `{f}:fence`");
    assert!(fenced.fencing_token().is_some());
    fenced.release().await.expect("release");
    held.release().await.expect("release");
}

#[tokio::test]
async fn a_fencing_counter_never_blocks_the_name_spelled_like_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let fenced = locks
        .lock("g")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    fenced.release().await.expect("release");
    // Failed on the old layout: `{g}:fence` was `g`'s counter, a string without expiry, and
    // the lock of that name was refused as the application's data for ever.
    let g = locks
        .lock("{g}:fence")
        .try_acquire()
        .await
        .expect("`{g}:fence` is a lock of its own");
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_process_record_never_stretches_the_lock_named_like_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    // One call site for both locks: the record is written before a site's first hold only.
    let take = |name: String, ttl: Duration| locks.lock(name).ttl(ttl).try_acquire();
    let probe = take("probe".into(), Duration::from_secs(10))
        .await
        .expect("free");
    let tag = locks
        .inspect("probe")
        .await
        .expect("inspect")
        .holder
        .and_then(|h| h.process)
        .expect("the holder's process tag");
    probe.release().await.expect("release");
    // The record as a server restarted without persistence has it: gone, until the process
    // writes it again (at its next new call site, or within a minute).
    let records: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{tag}*"))
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert_eq!(records.len(), 1, "{records:?}");
    let _: () = redis::cmd("DEL")
        .arg(&records[0])
        .query_async(&mut raw)
        .await
        .expect("DEL");
    let name = format!("{{{tag}}}:process");
    let ttl = Duration::from_millis(500);
    let held = take(name.clone(), ttl).await.expect("free");
    // A lock taken from a call site this process has not used yet writes the process's
    // record (host, pid, sites) first, and sets its expiry to a day.
    let other = locks
        .lock("another-site")
        .try_acquire()
        .await
        .expect("free");
    other.release().await.expect("release");
    let remaining = locks
        .inspect(name.as_str())
        .await
        .expect("inspect")
        .remaining
        .expect("held");
    // Failed on the old layout: the record was this lock's key; its 500 ms lease was
    // stretched to a day.
    assert!(
        remaining <= ttl,
        "`{name}` now lives {remaining:?}, more than its lease"
    );
    held.release().await.expect("release");
}

/// Names whose first `}` comes right after the brace the layout wrapped them in: Redis Cluster
/// then hashed each key whole, so a lock's keys fell into different slots and every script
/// that touches two of them was refused with CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_lock_stays_in_one_slot_on_a_cluster() {
    let cluster = RedisCluster::start_with(3, 0, 5000);
    let locks = Client::cluster(cluster.urls()).await.expect("connect");
    for name in ["}x", "}", "}{", "a}b", "{}", "{x}y{z}", "#{x}", "{#}"] {
        let held = locks
            .lock(name)
            .fencing(true)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("fenced `{name}`: {e}"));
        assert!(held.fencing_token().is_some());
        // A waiter's busy attempt marks the lock as waited for: a third key of the lock.
        let waiter =
            as_other_owner(locks.lock(name).wait(Duration::from_millis(300)).acquire()).await;
        assert!(
            matches!(waiter, Err(Error::Timeout { .. })),
            "`{name}`: {waiter:?}"
        );
        held.release().await.expect("release");
        // A read/write lock keeps its readers and its waiting writers' intents in two more
        // keys: a reader, then a writer that waits (its intent) and gives up (withdrawn).
        let reader = locks
            .read(name)
            .fencing(true)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("read `{name}`: {e}"));
        let writer =
            as_other_owner(locks.write(name).wait(Duration::from_millis(300)).acquire()).await;
        assert!(
            matches!(writer, Err(Error::Timeout { .. })),
            "`{name}`: {writer:?}"
        );
        reader.release().await.expect("release");
    }
}

/// A forced unlock on a Cluster wakes the waiters, which listen on sharded pub/sub there.
/// Failed on the code whose forced unlock sent a plain `PUBLISH`: the waiter slept until its
/// wait ran out, the holder's lease being longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_on_a_cluster_wakes_the_waiters() {
    let cluster = RedisCluster::start_with(3, 0, 5000);
    let locks = Client::cluster(cluster.urls()).await.expect("connect");
    let held = locks
        .lock("stuck")
        .ttl(Duration::from_secs(60))
        .try_acquire()
        .await
        .expect("free");
    let waiters = Client::cluster(cluster.urls()).await.expect("connect");
    let waiter = tokio::spawn(async move {
        waiters
            .lock("stuck")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    let master = cluster.master_of_slot(RedisCluster::slot_of(b"distlock:{stuck}"));
    // Without sharded pub/sub (Redis 6.2) the waiter polls, and finds the lock free as soon.
    let parked = !common::has_sharded_pub_sub(cluster.server(master))
        && common::polling_started().await
        || wait_until_async(EVENT_LIMIT, || async {
            let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query_async(&mut cluster.server(master).async_connection().await)
                .await
                .expect("PUBSUB SHARDCHANNELS");
            !channels.is_empty()
        })
        .await;
    assert!(parked, "the waiter listens on its shard");
    let forced = std::time::Instant::now();
    assert!(locks.force_unlock("stuck", "test").await.expect("force"));
    let g = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let woken = forced.elapsed();
    assert!(
        woken < EVENT_LIMIT,
        "woken {woken:?} after the forced unlock"
    );
    g.release().await.expect("release");
    drop(held);
}

/// Every key the library writes has a bounded lifetime: locks, waited-for marks, fencing
/// counters (failed on the code that kept them for ever: a service locking `order:<id>` with
/// fencing grew Redis by one key per order), forced-unlock records and process records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_the_library_writes_expires() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    for fenced in [false, true] {
        let g = locks
            .lock("setnx")
            .fencing(fenced)
            .try_acquire()
            .await
            .expect("free");
        g.release().await.expect("release");
        let g = locks
            .reentrant("reentrant")
            .fencing(fenced)
            .try_acquire()
            .await
            .expect("free");
        g.release().await.expect("release");
        let g = locks
            .write("rw")
            .fencing(fenced)
            .try_acquire()
            .await
            .expect("free");
        g.release().await.expect("release");
        let g = locks
            .read("rw")
            .fencing(fenced)
            .try_acquire()
            .await
            .expect("free");
        g.release().await.expect("release");
    }
    // A waiter marks a busy setnx lock; it is left held and so is the mark.
    let held = locks
        .lock("waited")
        .ttl(Duration::from_secs(20))
        .try_acquire()
        .await
        .expect("free");
    let waiter = as_other_owner(
        locks
            .lock("waited")
            .wait(Duration::from_millis(200))
            .acquire(),
    )
    .await;
    assert!(matches!(waiter, Err(Error::Timeout { .. })), "{waiter:?}");
    // A read/write lock's readers and intents: a reader is left holding, and a writer waits
    // beside it for as long as the keys are looked at.
    let reading = locks
        .read("rw-held")
        .ttl(Duration::from_secs(20))
        .try_acquire()
        .await
        .expect("free");
    let writing = {
        let locks = locks.clone();
        tokio::spawn(as_other_owner(async move {
            locks
                .write("rw-held")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .map(drop)
        }))
    };
    let mut raw = server.async_connection().await;
    let intent = wait_until_async(EVENT_LIMIT, || {
        let mut raw = raw.clone();
        async move {
            let n: i64 = redis::cmd("EXISTS")
                .arg(intents_key("rw-held"))
                .query_async(&mut raw)
                .await
                .expect("EXISTS");
            n == 1
        }
    })
    .await;
    assert!(intent, "the writer's intent");
    let forced = locks.lock("forced").try_acquire().await.expect("free");
    assert!(locks
        .force_unlock("forced", "test")
        .await
        .expect("force unlock"));
    drop(forced);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert!(keys.len() >= 5, "{keys:?}");
    assert!(keys.contains(&readers_key("rw-held")), "{keys:?}");
    for key in &keys {
        let ms: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .expect("PTTL");
        assert!(ms > 0, "`{key}` never expires ({ms}); every key: {keys:?}");
        assert!(
            ms <= 7 * 24 * 3600 * 1000,
            "`{key}` lives {ms} ms, longer than any documented lifetime"
        );
    }
    held.release().await.expect("release");
    reading.release().await.expect("release");
    writing
        .await
        .expect("writer task")
        .expect("the writer gets in once the reader left");
}

/// A counter that expired restarts from nothing, and the next token is still larger than every
/// earlier one: tokens are floored at the server's clock (in microseconds), which has moved on
/// by the counter's whole retention since its last use.
#[tokio::test]
async fn a_fencing_counter_that_expired_still_issues_a_larger_token() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut last = distlock::FencingToken::new(0);
    for mode in ["setnx", "reentrant", "write"] {
        let name = format!("expiring-{mode}");
        let take = || async {
            let request = match mode {
                "setnx" => locks.lock(name.as_str()),
                "reentrant" => locks.reentrant(name.as_str()),
                _ => locks.write(name.as_str()),
            };
            let g = request.fencing(true).try_acquire().await.expect("free");
            let token = g.fencing_token().expect("a token");
            g.release().await.expect("release");
            token
        };
        let first = take().await;
        // Another name's counter: floored at the same clock, so not below the last token, but
        // equal to it when both were minted within one millisecond (failed that way twice
        // under load with `>`).
        assert!(first >= last, "{mode}: {first} after {last}");
        let counter = fence_key(&name);
        let mut raw = server.async_connection().await;
        let ms: i64 = redis::cmd("PTTL")
            .arg(&counter)
            .query_async(&mut raw)
            .await
            .expect("PTTL");
        assert!(ms > 0, "`{counter}` has a lifetime ({ms})");
        // Its retention, shortened: the counter goes as if unused for that long.
        let _: () = redis::cmd("PEXPIRE")
            .arg(&counter)
            .arg(1)
            .query_async(&mut raw)
            .await
            .expect("PEXPIRE");
        let gone = wait_until_async(EVENT_LIMIT, || {
            let (counter, mut raw) = (counter.clone(), raw.clone());
            async move {
                let n: i64 = redis::cmd("EXISTS")
                    .arg(&counter)
                    .query_async(&mut raw)
                    .await
                    .expect("EXISTS");
                n == 0
            }
        })
        .await;
        assert!(gone);
        let second = take().await;
        assert!(second > first, "{mode}: {second} after {first}");
        last = second;
    }
}
