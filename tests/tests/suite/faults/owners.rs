//! Whose hold a call is: a re-entry never queues behind local waiters for its own hold, a
//! stale guard cannot release the same task's new hold, each call of a locked fn is its own owner.

use super::*;

// ---------------------------------------------------------------------------------------------
// Item 0: a re-entry never queues behind local waiters for the lock it already holds.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_does_not_queue_behind_tasks_waiting_for_its_own_hold() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    for mode in ["reentrant", "write"] {
        let name = format!("q-{mode}");
        // The holder's lease (renewed by the watchdog) is far longer than EVENT_LIMIT: a
        // re-entry that queued behind the waiter would sleep until that lease ends.
        let ttl = Duration::from_secs(60);
        let outer = request(&locks, mode, &name)
            .ttl(ttl)
            .fencing(true)
            .acquire()
            .await
            .expect("free");
        let waiter = {
            let locks = locks.clone();
            let name = name.clone();
            let mode = mode.to_owned();
            tokio::spawn(async move {
                request(&locks, &mode, &name)
                    .wait(Duration::from_secs(120))
                    .acquire()
                    .await
                    .map(drop)
            })
        };
        // The waiter found the lock busy and listens for its release: it is queued locally.
        let raw = server.async_connection().await;
        let waiting = wait_until_async(EVENT_LIMIT, || subscribed(&raw, &name)).await;
        assert!(waiting, "the waiter never queued");
        let inner = tokio::time::timeout(
            EVENT_LIMIT,
            request(&locks, mode, &name)
                .ttl(ttl)
                .wait(Duration::from_secs(3600))
                .fencing(true)
                .acquire(),
        )
        .await
        .unwrap_or_else(|_| panic!("{mode}: the re-entry queued behind a waiter for its own hold"))
        .expect("re-entry");
        assert_eq!(inner.fencing_token(), outer.fencing_token());
        assert!(inner.fencing_token().is_some());
        inner.release().await.expect("release inner");
        outer.release().await.expect("release outer");
        tokio::time::timeout(EVENT_LIMIT, waiter)
            .await
            .expect("the waiter gets the lock after the release")
            .expect("task")
            .expect("acquired");
    }
}

// ---------------------------------------------------------------------------------------------
// Item 1: a stale guard cannot release the same owner's new hold.

#[tokio::test]
async fn a_stale_guard_cannot_release_the_same_tasks_new_hold() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["reentrant", "read", "write"] {
        let name = format!("stale-{mode}");
        let old = request(&locks, mode, &name)
            .ttl(Duration::from_millis(200))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("free");
        let expired = wait_until_async(EVENT_LIMIT, || async {
            !old.is_held() && !exists(&raw, &name).await
        })
        .await;
        assert!(expired, "{mode}: the short lease never ended");
        // The natural code: `if !g.is_held() { g = locks.reentrant("k").acquire().await?; }`
        let new = request(&locks, mode, &name)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("free again");
        let err = old.release().await.unwrap_err();
        assert!(matches!(err, Error::NotOwner { .. }), "{mode}: {err}");
        assert!(new.is_held());
        let exclusive = if mode == "read" { "write" } else { mode };
        let other = as_other_owner(request(&locks, exclusive, &name).try_acquire()).await;
        assert!(
            matches!(other, Err(Error::Busy { .. })),
            "{mode}: another owner got in while the new guard is held: {other:?}"
        );
        new.release().await.expect("release");
        // (The refused writer's intent keeps a read lock's key for up to 2 s.)
        let gone = wait_until_async(EVENT_LIMIT, || async { !exists(&raw, &name).await }).await;
        assert!(gone, "{mode}: left behind");
    }
}

// ---------------------------------------------------------------------------------------------
// Item 6: each call of a locked fn is its own owner.

/// Occupancy and a non-atomic read-modify-write, as the contention tests use.
#[derive(Default)]
struct Section {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    balance: AtomicU64,
}

impl Section {
    async fn run(&self, amount: u64) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now, Ordering::SeqCst);
        let read = self.balance.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.balance.store(read + amount, Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[distributed_lock(key = "acct:<id>", client = locks, mode = "reentrant")]
async fn debit(locks: &Client, id: u32, amount: u64, s: &Section) -> Result<(), Error> {
    s.run(amount).await;
    Ok(())
}

#[distributed_lock(key = "acct-x:<id>", client = locks)]
async fn debit_exclusive(locks: &Client, id: u32, amount: u64, s: &Section) -> Result<(), Error> {
    s.run(amount).await;
    Ok(())
}

#[write_lock(key = "doc:<id>", client = locks)]
async fn write_doc(locks: &Client, id: u32, s: &Section) -> Result<(), Error> {
    s.run(1).await;
    Ok(())
}

#[read_lock(key = "doc:<id>", client = locks)]
async fn read_doc(locks: &Client, id: u32, s: &Section) -> Result<(), Error> {
    s.run(0).await;
    Ok(())
}

/// A locked call inside the body of another re-enters its hold (lexically nested here).
#[distributed_lock(key = "acct:<id>", client = locks, mode = "reentrant")]
async fn transfer(locks: &Client, id: u32, s: &Section) -> Result<(), Error> {
    debit(locks, id, 5, s).await
}

#[tokio::test]
async fn concurrent_locked_calls_in_one_task_exclude_each_other() {
    let server = RedisServer::start();
    let locks = client(&server).await;

    let s = Section::default();
    let (a, b) = tokio::join!(debit(&locks, 1, 10, &s), debit(&locks, 1, 20, &s));
    a.and(b).expect("both debits ran");
    assert_eq!(
        s.max_inside.load(Ordering::SeqCst),
        1,
        "reentrant: both bodies ran at once"
    );
    assert_eq!(
        s.balance.load(Ordering::SeqCst),
        30,
        "reentrant: lost update"
    );

    let s = Section::default();
    let (a, b) = tokio::join!(
        debit_exclusive(&locks, 1, 10, &s),
        debit_exclusive(&locks, 1, 20, &s)
    );
    a.and(b)
        .expect("setnx: the second call waits instead of failing");
    assert_eq!(s.max_inside.load(Ordering::SeqCst), 1);
    assert_eq!(s.balance.load(Ordering::SeqCst), 30);

    let s = Section::default();
    let (a, b) = tokio::join!(write_doc(&locks, 7, &s), read_doc(&locks, 7, &s));
    a.and(b).expect("both ran");
    assert_eq!(
        s.max_inside.load(Ordering::SeqCst),
        1,
        "a writer and a reader were in together"
    );

    // Nesting still re-enters: the inner call does not wait for the outer one.
    let s = Section::default();
    tokio::time::timeout(EVENT_LIMIT, transfer(&locks, 2, &s))
        .await
        .expect("the nested call re-entered")
        .expect("transfer");
    assert_eq!(s.balance.load(Ordering::SeqCst), 5);
}
