//! `Client::write_many`: several names at once on the write side of each name's read/write
//! lock (issue 37 item 2, "one name, one mode"). The README's own suggestion, `write(account)`
//! for one account and a set for a transfer between two, used to fail at runtime whenever
//! the two met: `lock_many` takes setnx locks, and a name written with `write` is refused to
//! it with `Error::ModeConflict` (the last test here shows that still holds, and what the
//! message says). A write set excludes each name's writers and readers and they exclude it,
//! with no conflict; a read during a transfer waits; the set is taken whole or not at all; a
//! lost reply leaves no name held; one fencing token for the set; a Redis Cluster takes it a
//! slot at a time; the attribute takes a list of keys.

use crate::common;

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{as_other_owner, client, fence_key, intents_key, lock_key};
use distlock::{write_lock, Client, Error, LockMode};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};
use redis::AsyncCommands;

use crate::many::{two_slots, CLUSTER};

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(5);
const LONG: Duration = Duration::from_secs(30);

/// The write holder of `name`'s read/write lock on `server` (`None`: no writer).
async fn writer(server: &RedisServer, name: &str) -> Option<String> {
    let mut conn = server.async_connection().await;
    conn.hget(lock_key(name), "writer").await.expect("HGET")
}

/// The live intents (waiting writers) on `name` (the sorted set's placeholder, scored 0, is
/// not one).
async fn intents(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    redis::cmd("ZCOUNT")
        .arg(intents_key(name))
        .arg("(0")
        .arg("+inf")
        .query_async(conn)
        .await
        .expect("ZCOUNT")
}

/// True when no key of `names` is left on `server`: no hold, no intent.
async fn nothing_left(server: &RedisServer, names: &[&str]) -> bool {
    let mut conn = server.async_connection().await;
    for name in names {
        let exists: bool = conn.exists(lock_key(name)).await.expect("EXISTS");
        if exists {
            return false;
        }
    }
    true
}

/// Who is inside each of two names right now, checked on every entry: a writer finds nobody,
/// a reader finds no writer.
#[derive(Default)]
struct Occupancy {
    writers: [AtomicU32; 2],
    readers: [AtomicU32; 2],
    overlaps: AtomicU32,
}

impl Occupancy {
    fn write(&self, i: usize) {
        if self.writers[i].fetch_add(1, Ordering::SeqCst) != 0
            || self.readers[i].load(Ordering::SeqCst) != 0
        {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn write_done(&self, i: usize) {
        self.writers[i].fetch_sub(1, Ordering::SeqCst);
    }
    fn read(&self, i: usize) {
        self.readers[i].fetch_add(1, Ordering::SeqCst);
        if self.writers[i].load(Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn read_done(&self, i: usize) {
        self.readers[i].fetch_sub(1, Ordering::SeqCst);
    }
}

/// Fails before the fix: `lock_many` in place of `write_many` (the only set there was) meets
/// the single writers with `ModeConflict`. Writers of each account, transfers between the two
/// and readers of each, from two clients: no error, never two inside at once, and the
/// balances (moved by read-modify-write with a pause in between) add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_writers_readers_and_write_sets_exclude_each_other_without_conflict() {
    let server = RedisServer::start();
    let (one, two) = (client(&server).await, client(&server).await);
    let names = ["acct:1", "acct:2"];
    let inside = Arc::new(Occupancy::default());
    let balances = Arc::new([AtomicI64::new(1000), AtomicI64::new(1000)]);
    const ROUNDS: usize = 12;
    let mut tasks = Vec::new();
    for t in 0..10usize {
        let locks = if t % 2 == 0 { one.clone() } else { two.clone() };
        let (inside, balances) = (inside.clone(), balances.clone());
        tasks.push(tokio::spawn(as_other_owner(async move {
            for round in 0..ROUNDS {
                let i = (t + round) % 2;
                match t % 5 {
                    // A transfer between the two accounts, either way round.
                    0 | 1 => {
                        let pair = if i == 0 { names } else { [names[1], names[0]] };
                        let set = locks.write_many(pair).wait(LONG).acquire().await?;
                        inside.write(0);
                        inside.write(1);
                        let from = balances[i].load(Ordering::SeqCst);
                        let to = balances[1 - i].load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        balances[i].store(from - 7, Ordering::SeqCst);
                        balances[1 - i].store(to + 7, Ordering::SeqCst);
                        inside.write_done(0);
                        inside.write_done(1);
                        set.release().await?;
                    }
                    // One account written alone (a deposit and its reversal).
                    2 | 3 => {
                        let guard = locks.write(names[i]).wait(LONG).acquire().await?;
                        inside.write(i);
                        let v = balances[i].load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        balances[i].store(v + 1, Ordering::SeqCst);
                        let v = balances[i].load(Ordering::SeqCst);
                        balances[i].store(v - 1, Ordering::SeqCst);
                        inside.write_done(i);
                        guard.release().await?;
                    }
                    // A balance read.
                    _ => {
                        let guard = locks.read(names[i]).wait(LONG).acquire().await?;
                        inside.read(i);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.read_done(i);
                        guard.release().await?;
                    }
                }
            }
            Ok::<(), Error>(())
        })));
    }
    for task in tasks {
        task.await
            .expect("task")
            .expect("no lock error (no ModeConflict)");
    }
    assert_eq!(
        inside.overlaps.load(Ordering::SeqCst),
        0,
        "two inside at once"
    );
    let total: i64 = balances.iter().map(|b| b.load(Ordering::SeqCst)).sum();
    assert_eq!(total, 2000, "a lost update");
    assert!(nothing_left(&server, &names).await, "every key given back");
}

/// Fails before the fix (`lock_many`: the read is refused with `ModeConflict`). A read of a
/// balance during a transfer waits for it, and a single writer too; the set's release lets
/// them in at once (woken, not polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_during_a_transfer_waits_for_it_and_is_woken_by_its_release() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let set = locks
        .write_many(["r-a", "r-b"])
        .ttl(LONG)
        .try_acquire()
        .await
        .expect("free");
    assert!(writer(&server, "r-a").await.is_some() && writer(&server, "r-b").await.is_some());
    let spawn = |write: bool, name: &'static str| {
        let locks = locks.clone();
        tokio::spawn(as_other_owner(async move {
            let request = if write {
                locks.write(name)
            } else {
                locks.read(name)
            };
            let guard = request.wait(LONG).acquire().await?;
            let at = Instant::now();
            guard.release().await.map(|()| at)
        }))
    };
    let (reader, single) = (spawn(false, "r-a"), spawn(true, "r-b"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reader.is_finished() && !single.is_finished(), "they wait");
    for name in ["r-a", "r-b"] {
        let busy = as_other_owner(locks.read(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    }
    let released = Instant::now();
    set.release().await.expect("release");
    for task in [reader, single] {
        let at = tokio::time::timeout(EVENT_LIMIT, task)
            .await
            .expect("woken by the release")
            .expect("task")
            .expect("taken");
        assert!(
            at.duration_since(released) < Duration::from_secs(2),
            "woken, not polled"
        );
    }
}

/// All or nothing: a waiting set holds none of its names (another writer takes the free one
/// meanwhile); it keeps new readers of its names out (its intents), and once the busy name is
/// released it takes both. A single try registers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_set_holds_nothing_and_keeps_new_readers_out() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let b = as_other_owner(locks.write("w-b").ttl(LONG).try_acquire())
        .await
        .expect("free");
    let busy = locks
        .write_many(["w-a", "w-b"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    assert!(
        nothing_left(&server, &["w-a"]).await,
        "a single try leaves nothing, no intent"
    );
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(as_other_owner(async move {
            locks.write_many(["w-b", "w-a"]).wait(LONG).acquire().await
        }))
    };
    let mut conn = server.async_connection().await;
    let registered = wait_until_async(EVENT_LIMIT, || {
        let mut conn = conn.clone();
        async move { intents(&mut conn, "w-a").await > 0 }
    })
    .await;
    assert!(registered, "the waiting set's intent on the free name");
    assert_eq!(
        writer(&server, "w-a").await,
        None,
        "nothing held while waiting"
    );
    let reader = as_other_owner(locks.read("w-a").try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(reader, Error::Busy { .. }),
        "a new reader waits for the set: {reader}"
    );
    // Writers are not ordered among themselves: one takes the free name meanwhile.
    let a = as_other_owner(locks.write("w-a").try_acquire())
        .await
        .expect("not held by the set");
    a.release().await.expect("release");
    b.release().await.expect("release");
    let set = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("woken")
        .expect("task")
        .expect("the set");
    assert!(writer(&server, "w-a").await.is_some() && writer(&server, "w-b").await.is_some());
    assert_eq!(
        intents(&mut conn, "w-a").await,
        0,
        "its intent had its turn"
    );
    set.release().await.expect("release");
    assert!(nothing_left(&server, &["w-a", "w-b"]).await);

    // A set that gives up withdraws its intents: the readers it kept out come in.
    let b = as_other_owner(locks.write("w-b").ttl(LONG).try_acquire())
        .await
        .expect("free");
    let err = as_other_owner(
        locks
            .write_many(["w-a", "w-b"])
            .wait(Duration::from_millis(400))
            .acquire(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let withdrawn = wait_until_async(EVENT_LIMIT, || {
        let mut conn = conn.clone();
        async move { intents(&mut conn, "w-a").await == 0 }
    })
    .await;
    assert!(withdrawn, "intents withdrawn");
    let r = as_other_owner(locks.read("w-a").try_acquire())
        .await
        .expect("readers in again");
    r.release().await.expect("release");
    b.release().await.expect("release");
}

/// The owner is the task, as for `write`: a name it writes is re-entered (and stays held
/// after the set's release); a name it only reads is refused at once (`Upgrade`), nothing
/// taken; the guard is held only while every name is; a quorum refuses write sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_upgrade_lease_and_quorum() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let outer = locks.write("e-a").try_acquire().await.expect("free");
    let set = locks
        .write_many(["e-a", "e-b"])
        .try_acquire()
        .await
        .expect("re-enters e-a");
    set.release().await.expect("release");
    assert!(
        writer(&server, "e-a").await.is_some(),
        "the outer hold stays"
    );
    assert_eq!(writer(&server, "e-b").await, None);
    outer.release().await.expect("release");

    let read = locks.read("e-b").try_acquire().await.expect("free");
    let started = Instant::now();
    let err = locks
        .write_many(["e-a", "e-b"])
        .wait(LONG)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Upgrade { ref name } if name == "e-b"),
        "{err}"
    );
    assert!(started.elapsed() < EVENT_LIMIT, "refused at once");
    assert_eq!(writer(&server, "e-a").await, None, "nothing taken");
    read.release().await.expect("release");

    let set = locks
        .write_many(["e-a", "e-b", "e-c"])
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "the watchdog renews every name");
    let mut conn = server.async_connection().await;
    let _: () = conn.hdel(lock_key("e-b"), "writer").await.expect("HDEL");
    let lost = tokio::time::timeout(EVENT_LIMIT, set.lost())
        .await
        .expect("lost");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");

    let nodes = RedisServers::start(3);
    let quorum = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let err = quorum
        .write_many(["q-a", "q-b"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

/// A lost reply leaves no name held: a single try's error gives the set back, a waiter's
/// retry finds its own hold, and many cycles with a third of the replies lost leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_leaves_no_name_held() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    let names = ["l-a", "l-b", "l-c"];
    // One call site for every request: its process record is written with the first, so
    // the replies dropped below are the scripts'.
    let request = |names: &[&'static str]| locks.write_many(names.to_vec()).ttl(LONG);
    let warm = request(&names).try_acquire().await.expect("free");
    warm.release().await.expect("release");

    proxy.drop_next_reply();
    let err = request(&names).try_acquire().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    let none = || nothing_left(&server, &names);
    assert!(wait_until_async(EVENT_LIMIT, none).await, "given back");

    proxy.drop_next_reply();
    let set = request(&names)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("taken by the retry");
    for name in names {
        assert!(writer(&server, name).await.is_some(), "{name}");
    }
    set.release().await.expect("release");
    assert!(none().await);

    proxy.drop_replies(0.3);
    let mut taken = 0;
    for i in 0..45 {
        let pair = [names[i % 3], names[(i + 1) % 3]];
        let attempt = request(&pair).wait(Duration::from_millis(200)).acquire();
        if let Ok(Ok(set)) = tokio::time::timeout(Duration::from_millis(300), attempt).await {
            taken += 1;
            let _ = set.release().await;
        }
    }
    proxy.drop_replies(0.0);
    assert!(taken > 0, "no cycle went through");
    assert!(
        wait_until_async(EVENT_LIMIT, none).await,
        "names left behind"
    );
}

/// One token for the set, above each name's earlier write tokens (a counter far ahead
/// included); the next write of each name and a fenced read see it or above.
#[tokio::test]
async fn a_fenced_write_set_has_one_token_above_each_names() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut conn = server.async_connection().await;
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = conn
        .set(fence_key("f-b"), ahead.to_string())
        .await
        .expect("SET");
    let a = locks
        .write("f-a")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let before = a.fencing_token().expect("a token");
    a.release().await.expect("release");
    let set = locks
        .write_many(["f-a", "f-b"])
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let token = set.fencing_token().expect("a token");
    assert!(token > before && token.get() > ahead, "{token}");
    set.release().await.expect("release");
    let read = locks
        .read("f-a")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert_eq!(
        read.fencing_token(),
        Some(token),
        "a read after the set sees its token"
    );
    read.release().await.expect("release");
    let mut last = token;
    for name in ["f-a", "f-b", "f-a"] {
        let next = locks
            .write(name)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let t = next.fencing_token().expect("a token");
        assert!(t > last, "{name}: {t} after {last}");
        last = t;
        next.release().await.expect("release");
        let set = locks
            .write_many(["f-a", "f-b"])
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let t = set.fencing_token().expect("a token");
        assert!(t > last, "the set after {name}");
        last = t;
        set.release().await.expect("release");
    }
}

/// On a Redis Cluster a set spanning two masters is taken a slot at a time, excludes each
/// name's writers and readers, and a busy later slot leaves the earlier one free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_takes_a_write_set_a_slot_at_a_time() {
    let _serial = CLUSTER.serial().await;
    let seeds = CLUSTER.with(|c| c.urls());
    let locks = Client::cluster(seeds.clone()).await.expect("connect");
    let mut raw = redis::cluster::ClusterClient::new(seeds)
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect");
    let (first, last) = two_slots("wc");
    let (first, last) = (first.as_str(), last.as_str());
    let hold = as_other_owner(locks.write(last).ttl(LONG).try_acquire())
        .await
        .expect("free");
    let busy = locks
        .write_many([first, last])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let exists: bool = raw.exists(lock_key(first)).await.expect("EXISTS");
    assert!(!exists, "{first} given back");
    hold.release().await.expect("release");
    let set = locks
        .write_many([last, first])
        .ttl(Duration::from_secs(1))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(set.fencing_token().is_some());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(set.is_held(), "renewed on both slots");
    for name in [first, last] {
        let err = as_other_owner(locks.read(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{err}");
        let err = as_other_owner(locks.write(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{err}");
    }
    set.release().await.expect("release");
    for name in [first, last] {
        let exists: bool = raw.exists(lock_key(name)).await.expect("EXISTS");
        assert!(!exists, "{name} released");
    }
}

#[write_lock(key = ["attr:<from>", "attr:<to>"], client = locks, wait = "30s")]
async fn transfer(locks: &Client, from: u32, to: u32, inside: &Occupancy) -> Result<(), Error> {
    inside.write(0);
    inside.write(1);
    tokio::time::sleep(Duration::from_millis(2)).await;
    inside.write_done(0);
    inside.write_done(1);
    Ok(())
}

#[write_lock(key = "attr:<id>", client = locks, wait = "30s")]
async fn deposit(locks: &Client, id: u32, inside: &Occupancy) -> Result<(), Error> {
    inside.write(id as usize);
    tokio::time::sleep(Duration::from_millis(2)).await;
    inside.write_done(id as usize);
    Ok(())
}

/// The README's design in attributes: `#[write_lock(key = "account:<id>")]` for one account,
/// `#[write_lock(key = [..])]` for a transfer; before, the list was refused at compile time
/// and `#[distributed_lock(key = [..])]` met the single writer with `ModeConflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_lock_attribute_takes_a_list_of_keys() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let inside = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for t in 0..6u32 {
        let (locks, inside) = (locks.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..10u32 {
                let i = (t + round) % 2;
                if t % 2 == 0 {
                    transfer(&locks, i, 1 - i, &inside).await?;
                } else {
                    deposit(&locks, i, &inside).await?;
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("no lock error");
    }
    assert_eq!(inside.overlaps.load(Ordering::SeqCst), 0);
}

/// `lock_many` still takes setnx locks: a name written elsewhere is refused with
/// `ModeConflict`, whose message says the name is used in two modes and what to do.
#[tokio::test]
async fn lock_many_over_a_written_name_says_how_to_fix_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let w = as_other_owner(locks.write("m-a").try_acquire())
        .await
        .expect("free");
    let err = locks
        .lock_many(["m-a", "m-b"])
        .try_acquire()
        .await
        .unwrap_err();
    match &err {
        Error::ModeConflict {
            name,
            held_as,
            requested,
        } => {
            assert_eq!(
                (name.as_str(), *held_as, *requested),
                ("m-a", LockMode::Write, LockMode::SetNx)
            );
        }
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("two modes") && text.contains("write_many"),
        "{text}"
    );
    w.release().await.expect("release");
    let set = locks
        .lock_many(["m-a", "m-b"])
        .try_acquire()
        .await
        .expect("free");
    let err = as_other_owner(locks.write_many(["m-b", "m-c"]).try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ModeConflict { ref name, held_as: LockMode::SetNx, requested: LockMode::Write } if name == "m-b"),
        "{err}"
    );
    assert!(
        nothing_left(&server, &["m-c"]).await,
        "nothing taken in part"
    );
    set.release().await.expect("release");
}

/// Writer preference holds for a set: readers coming and going on one of its names without
/// pause (each task re-reads as soon as it left, the readers overlapping so the name is
/// never free) cannot keep a waiting set out: its intent keeps new readers out, those inside
/// leave, and the set gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_readers_cannot_starve_a_waiting_set() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (locks, stop, reads) = (locks.clone(), stop.clone(), reads.clone());
        readers.push(tokio::spawn(as_other_owner(async move {
            while !stop.load(Ordering::SeqCst) {
                let guard = locks.read("s-a").wait(LONG).acquire().await?;
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await?;
            }
            Ok::<(), Error>(())
        })));
    }
    let streaming = wait_until_async(EVENT_LIMIT, || {
        let reads = reads.clone();
        async move { reads.load(Ordering::SeqCst) > 20 }
    })
    .await;
    assert!(streaming, "the readers run");
    let started = Instant::now();
    let set = as_other_owner(
        locks
            .write_many(["s-b", "s-a"])
            .wait(Duration::from_secs(10))
            .acquire(),
    )
    .await
    .expect("the set gets in");
    let waited = started.elapsed();
    let during = reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        reads.load(Ordering::SeqCst),
        during,
        "no reader while the set holds"
    );
    set.release().await.expect("release");
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader
            .await
            .expect("task")
            .expect("the readers go on after the set");
    }
    eprintln!("the set waited {waited:?} for a stream of readers");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}
