//! A write set excludes each name's writers and readers and they exclude it; a read during a
//! transfer waits; a waiting set keeps new readers out; a stream of readers cannot starve it.

use super::*;

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
