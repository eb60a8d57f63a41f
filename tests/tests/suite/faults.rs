//! Faults that real callers produce: stale guards, shortened leases, cancelled futures,
//! concurrent calls in one task, huge durations, one name used in two modes, and permanent
//! errors on quorum nodes. Each test here failed on the code before the tenure-checked
//! protocol (see the README's fault model).

use crate::common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{as_other_owner, channel, client, lock_key, readers_key};
use distlock::{distributed_lock, read_lock, write_lock, Client, Error, LockRequest};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner; only a broken lock
/// reaches it, and the test then fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

async fn exists(raw: &MultiplexedConnection, name: &str) -> bool {
    raw.clone().exists(lock_key(name)).await.expect("EXISTS")
}

async fn pttl(raw: &MultiplexedConnection, name: &str) -> i64 {
    raw.clone().pttl(lock_key(name)).await.expect("PTTL")
}

/// True once some client listens for the lock's releases.
async fn subscribed(raw: &MultiplexedConnection, name: &str) -> bool {
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel(name))
        .query_async(&mut raw.clone())
        .await
        .expect("PUBSUB NUMSUB");
    counts.first().is_some_and(|(_, n)| *n > 0)
}

/// The three modes whose owner is a task (or a locked call): built the same way.
fn request<'c>(locks: &'c Client, mode: &str, name: &str) -> LockRequest<'c> {
    match mode {
        "reentrant" => locks.reentrant(name),
        "read" => locks.read(name),
        "write" => locks.write(name),
        _ => locks.lock(name),
    }
}

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
// Item 2: the guard never trusts a longer lease than the server holds.

/// The guard's remaining lease must not exceed the server's (read first, so the server's can
/// only have shrunk since).
async fn assert_guard_within_server(
    raw: &MultiplexedConnection,
    name: &str,
    guard: &distlock::Guard,
    what: &str,
) {
    let server_left = Duration::from_millis(u64::try_from(pttl(raw, name).await).unwrap_or(0));
    let guard_left = guard.remaining();
    assert!(
        guard_left <= server_left,
        "{what}: guard trusts {guard_left:?}, the server holds {server_left:?}"
    );
}

/// The lease the server holds for the only holder of `name` in `mode`, in ms: the key's PTTL,
/// or for a reader its own lease end (its score in the lock's readers) against the server
/// clock (the key may live longer, for other readers or a writer's intent; the set's
/// placeholder member left out).
async fn server_lease(raw: &MultiplexedConnection, name: &str, mode: &str) -> i64 {
    if mode != "read" {
        return pttl(raw, name).await;
    }
    let readers: Vec<(String, i64)> = raw
        .clone()
        .zrange_withscores(readers_key(name), 0, -1)
        .await
        .expect("ZRANGE");
    let readers: Vec<_> = readers.into_iter().filter(|(o, _)| !o.is_empty()).collect();
    let [(_, until)] = readers.as_slice() else {
        panic!("one reader with a lease expected: {readers:?}");
    };
    let until = *until;
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut raw.clone())
        .await
        .expect("TIME");
    until - (secs * 1000 + micros / 1000)
}

/// An attempt takes the lock but its answer comes after the response timeout, as do the
/// answers of the retries that follow, until the fault ends: each retry finds its own hold.
/// The guard measures its lease from the retry that was answered, so the server must have
/// renewed the lease then; a reader's retry did not (found by the spin model, spec/README.md
/// `OLD_READ_RETRY`, fixed in 9b4a670), and its guard trusted the fault's length more than
/// the server held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_finds_its_own_hold_renews_the_lease_the_guard_trusts() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect");
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        load_scripts(&locks, mode).await;
        let name = format!("own-{mode}");
        // Requests reach the server at once; answers come 400 ms late.
        proxy.reply_latency(Duration::from_millis(400));
        let acquiring = tokio::spawn({
            let (locks, name) = (locks.clone(), name.clone());
            async move {
                request(&locks, mode, &name)
                    .ttl(Duration::from_secs(3))
                    .watchdog(false)
                    .wait(EVENT_LIMIT)
                    .acquire()
                    .await
            }
        });
        wait_until_async(EVENT_LIMIT, || exists(&raw, &name)).await;
        // The fault lasts a while: the retry that is answered in time was sent this much
        // (and the answers queued behind the late ones) after the attempt that took the lock.
        tokio::time::sleep(Duration::from_millis(600)).await;
        proxy.reply_latency(Duration::ZERO);
        let guard = acquiring
            .await
            .expect("task")
            .expect("a retry finds its own hold");
        let server_left = server_lease(&raw, &name, mode).await;
        let guard_left = guard.remaining();
        println!("{mode}: guard {guard_left:?}, server {server_left} ms");
        assert!(
            guard_left <= Duration::from_millis(u64::try_from(server_left).unwrap_or(0)),
            "{mode}: guard trusts {guard_left:?}, the server holds {server_left} ms"
        );
        guard.release().await.expect("release");
        assert!(!exists(&raw, &name).await, "{mode}: released");
    }
}

#[tokio::test]
async fn extending_with_a_shorter_ttl_never_leaves_the_guard_trusting_more_than_the_server() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("ext-{mode}");
        let mut g = request(&locks, mode, &name)
            .ttl(Duration::from_secs(10))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("free");
        g.extend(Duration::from_millis(200)).await.expect("extend");
        assert!(g.is_held());
        assert_guard_within_server(&raw, &name, &g, mode).await;
        g.release().await.expect("release");
    }
}

#[tokio::test]
async fn an_inner_hold_with_a_short_ttl_never_shortens_the_outer_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["reentrant", "write", "read"] {
        let name = format!("nest-{mode}");
        let outer = request(&locks, mode, &name)
            .ttl(Duration::from_secs(10))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("free");
        let before = locks.renewal_round_trips();
        let inner = request(&locks, mode, &name)
            .ttl(Duration::from_millis(300))
            .renew_every(Duration::from_millis(50))
            .try_acquire()
            .await
            .expect("re-entry");
        // Let the inner hold's watchdog renew it a few times.
        let renewed = wait_until_async(EVENT_LIMIT, || async {
            locks.renewal_round_trips() >= before + 3
        })
        .await;
        assert!(renewed, "the inner hold was never renewed");
        assert_guard_within_server(&raw, &name, &outer, mode).await;
        assert!(
            pttl(&raw, &name).await > 5_000,
            "{mode}: the inner renewal shortened the outer lease"
        );
        inner.release().await.expect("release inner");
        outer.release().await.expect("release outer");
    }
}

// Two nested locked fns with different ttls: the inner watchdog must not cut the outer lease.
#[distributed_lock(key = "nested:<id>", client = locks, mode = "reentrant", ttl = "1500ms")]
async fn inner_step(locks: &Client, id: u32, raw: &MultiplexedConnection) -> Result<i64, Error> {
    let before = locks.renewal_round_trips();
    // Two renewals of the inner hold (every 500 ms).
    let renewed = wait_until_async(EVENT_LIMIT, || async {
        locks.renewal_round_trips() >= before + 2
    })
    .await;
    assert!(renewed, "the inner hold was never renewed");
    Ok(raw
        .clone()
        .pttl(lock_key(&format!("nested:{id}")))
        .await
        .expect("PTTL"))
}

#[distributed_lock(key = "nested:<id>", client = locks, mode = "reentrant", ttl = "30s")]
async fn outer_step(locks: &Client, id: u32, raw: &MultiplexedConnection) -> Result<i64, Error> {
    inner_step(locks, id, raw).await
}

#[tokio::test]
async fn nested_locked_fns_keep_the_longer_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    let left = outer_step(&locks, 1, &raw).await.expect("locked calls");
    assert!(
        left > 20_000,
        "the inner fn's watchdog cut the outer lease to {left} ms"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 4: a cancelled acquire or release leaves no orphan.

/// Takes and releases a lock of `mode`, so the server has its scripts.
async fn load_scripts(locks: &Client, mode: &str) {
    let g = request(locks, mode, "warm-up")
        .try_acquire()
        .await
        .expect("warm-up");
    g.release().await.expect("warm-up release");
}

/// Scripts the server has run so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    server.commandstats().get("evalsha").copied().unwrap_or(0)
}

#[tokio::test]
async fn a_cancelled_acquire_is_given_back_once_the_server_answers() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("cancel-{mode}");
        // Load the mode's scripts first: a cancelled call that met NOSCRIPT would never take
        // the lock, and the test would prove nothing.
        load_scripts(&locks, mode).await;
        let executed = evalsha_calls(&server);
        server.pause();
        let unread = server.unread_bytes();
        // Cancelled once its request reached the frozen server (an event, not a fixed time
        // that a loaded machine could spend before the request was written).
        let reached = wait_until_async(EVENT_LIMIT, || async { server.unread_bytes() > unread });
        let cancelled = tokio::select! {
            _ = request(&locks, mode, &name).ttl(Duration::from_secs(30)).acquire() => false,
            written = reached => written,
        };
        assert!(
            cancelled,
            "{mode}: a frozen server answered, or the request never reached it"
        );
        server.resume();
        // The request reaches the server, which grants it to nobody; the background release
        // must free it long before its 30 s lease ends.
        let ran =
            wait_until_async(EVENT_LIMIT, || async { evalsha_calls(&server) > executed }).await;
        assert!(
            ran,
            "{mode}: the cancelled request never reached the server"
        );
        let freed = wait_until_async(EVENT_LIMIT, || async { !exists(&raw, &name).await }).await;
        assert!(
            freed,
            "{mode}: the cancelled acquisition left the lock taken"
        );
        let again = as_other_owner(request(&locks, mode, &name).try_acquire())
            .await
            .expect("free for the next owner");
        again.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_release_cancelled_or_failed_while_the_connection_is_down_still_frees_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let raw = server.async_connection().await;
    for mode in ["setnx", "reentrant", "write", "read"] {
        let name = format!("cancel-release-{mode}");
        let g = request(&locks, mode, &name)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("free");
        // The connection breaks and cannot be made again for now: the release waits for the
        // reconnection, and the caller gives up on it (a handler whose client went away).
        proxy.refuse_new(true);
        proxy.reset_all();
        // Cancelled, or failed with the connection's error: either way the caller is done.
        let outcome = tokio::time::timeout(Duration::from_millis(50), g.release()).await;
        assert!(
            !matches!(outcome, Ok(Ok(()))),
            "{mode}: released through a refused connection"
        );
        assert!(
            exists(&raw, &name).await,
            "{mode}: freed before the network came back"
        );
        proxy.refuse_new(false);
        let freed = wait_until_async(EVENT_LIMIT, || async { !exists(&raw, &name).await }).await;
        assert!(freed, "{mode}: the cancelled release left the lock taken");
    }
}

/// Calls of `cmd` the server counted (`INFO commandstats`).
async fn command_calls(raw: &MultiplexedConnection, cmd: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw.clone())
        .await
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The reply of an acquisition's first attempt is lost (the proxy drops it and resets the
/// connection): the retry finds the lock holding its own value and takes it as its own,
/// instead of waiting on itself until its ttl ran out. Without fencing the attempt is the
/// plain `SET .. NX PX .. GET`, whose reply names the holder; the acquire script settles that
/// case (making the lease last at least the ttl). With fencing, the script's retry flag does.
#[tokio::test]
async fn a_lost_acquire_reply_is_recognised_by_the_retry_with_and_without_fencing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let raw = server.async_connection().await;
    let ttl = Duration::from_secs(30);
    // One call site for the warm-up and the test's acquisition (see below).
    let request = |name: &str, fencing: bool| {
        locks
            .lock(name)
            .ttl(ttl)
            .wait(Duration::from_secs(3600))
            .fencing(fencing)
    };
    for fencing in [false, true] {
        let name = format!("lost-reply-{fencing}");
        // The acquire script loaded beforehand, so its one call below is counted once, and
        // the process's record naming the call site written, so the reply dropped below is
        // the acquisition's.
        let warm = request("warm", true).try_acquire().await;
        warm.expect("free").release().await.expect("release");
        let scripts = command_calls(&raw, "evalsha").await;
        proxy.drop_next_reply();
        let g = tokio::time::timeout(EVENT_LIMIT, request(&name, fencing).acquire())
            .await
            .expect("the retry waited on its own hold")
            .expect("acquired by the retry");
        assert_eq!(proxy.replies_dropped(), 1 + u64::from(fencing));
        assert!(g.is_held());
        assert_eq!(g.fencing_token().is_some(), fencing);
        assert_eq!(
            command_calls(&raw, "evalsha").await - scripts,
            1 + u64::from(fencing),
            "plain: one script, the follow-up; fenced: the lost attempt and the retry"
        );
        assert!(
            pttl(&raw, &name).await > (ttl - Duration::from_secs(5)).as_millis() as i64,
            "the lease lasts the ttl"
        );
        // The hold is the caller's: released by its guard, and nobody else got in.
        let busy = as_other_owner(locks.lock(&name).try_acquire()).await;
        assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
        g.release().await.expect("release");
        assert!(!exists(&raw, &name).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_quorum_acquire_is_given_back_on_every_node() {
    let mut nodes = RedisServers::start(5);
    let locks = Client::quorum_builder(nodes.urls())
        // Fresh servers: this test is not about restarts.
        .restart_delay(Duration::ZERO)
        .node_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("quorum");
    let mut raws = Vec::new();
    for node in &nodes {
        raws.push(node.async_connection().await);
    }
    load_scripts(&locks, "setnx").await;
    let executed: Vec<u64> = nodes.iter().map(evalsha_calls).collect();
    for node in nodes.iter_mut() {
        node.pause();
    }
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        locks
            .lock("cancel-q")
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await;
    assert!(cancelled.is_err(), "frozen servers answered");
    for node in nodes.iter_mut() {
        node.resume();
    }
    for (i, node) in nodes.iter().enumerate() {
        let ran =
            wait_until_async(EVENT_LIMIT, || async { evalsha_calls(node) > executed[i] }).await;
        assert!(ran, "node {i}: the cancelled request never reached it");
    }
    for (i, raw) in raws.iter().enumerate() {
        let freed =
            wait_until_async(EVENT_LIMIT, || async { !exists(raw, "cancel-q").await }).await;
        assert!(freed, "node {i} kept the cancelled acquisition");
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

// ---------------------------------------------------------------------------------------------
// Item 7: huge durations, one name in two modes, permanent errors on a quorum.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_wait_and_hold_are_accepted_without_panicking() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let holder = locks
        .lock("forever")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    let waited = tokio::time::timeout(
        EVENT_LIMIT,
        as_other_owner(locks.lock("forever").wait(Duration::MAX).acquire()),
    )
    .await
    .expect("the waiter gets the lock once the short lease ends")
    .expect("acquired");
    drop(holder);
    waited.release().await.expect("release");
    let capped = locks
        .lock("forever")
        .max_hold(Duration::MAX)
        .try_acquire()
        .await
        .expect("a cap too large to matter is no cap");
    assert!(capped.is_held());
    capped.release().await.expect("release");
    // Client settings without limit: accepted, or refused with an error, never a panic.
    let nodes = RedisServers::start(3);
    let unlimited = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::MAX)
        .node_timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .response_timeout(Duration::MAX)
        .connect()
        .await
        .expect("connect");
    // Fresh servers, an endless restart delay: no node votes, and the lock says so.
    let err = unlimited.lock("forever").try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached { .. }), "{err}");
}

#[tokio::test]
async fn one_name_in_two_modes_is_one_clear_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let modes = ["setnx", "reentrant", "write", "read"];
    for held in modes {
        let name = format!("mixed-{held}");
        let g = request(&locks, held, &name)
            .try_acquire()
            .await
            .expect("free");
        for asked in modes.iter().filter(|m| {
            // read and write are the two sides of one lock.
            **m != held && !(matches!(held, "read" | "write") && matches!(**m, "read" | "write"))
        }) {
            let err = as_other_owner(
                request(&locks, asked, &name)
                    .wait(Duration::from_secs(30))
                    .acquire(),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(err, Error::ModeConflict { .. }),
                "{asked} on a {held} lock: {err}"
            );
            assert!(!err.is_retryable(), "{err}");
        }
        g.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_on_a_majority_of_quorum_nodes_fail_at_once_with_their_cause() {
    let nodes = RedisServers::start(5);
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum");
    // The application's own value at the lock key on three nodes.
    for node in nodes.iter().take(3) {
        let _: () = node
            .async_connection()
            .await
            .set(lock_key("taken-by-app"), "user data")
            .await
            .expect("SET");
    }
    let err = locks
        .lock("taken-by-app")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached { .. }), "{err}");
    assert!(
        !err.is_retryable(),
        "a permanent cause reported as retryable: {err}"
    );
    assert!(
        err.to_string().contains("string"),
        "the cause is hidden: {err}"
    );
    // Out of memory on three nodes: every write is refused there.
    for node in nodes.iter().skip(2) {
        let mut c = node.async_connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("1")
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
    }
    let err = locks
        .lock("oom")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("OOM"),
        "the cause is hidden: {err}"
    );
    // One node with a permanent error is a minority: the lock still works.
    for node in nodes.iter().skip(2) {
        let mut c = node.async_connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("0")
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
    }
    for node in nodes.iter().skip(1).take(2) {
        let _: () = node
            .async_connection()
            .await
            .del(lock_key("taken-by-app"))
            .await
            .expect("DEL");
    }
    let g = locks
        .lock("taken-by-app")
        .acquire()
        .await
        .expect("a majority is free");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_does_not_swallow_the_release_a_quorum_waiter_listens_for() {
    let mut nodes = RedisServers::start(5);
    let connect = || {
        Client::quorum_builder(nodes.urls())
            .restart_delay(Duration::ZERO)
            .connect()
    };
    let holder_client = connect().await.expect("quorum");
    let waiter_client = connect().await.expect("quorum");
    let holder = holder_client
        .lock("wake-q")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("free");
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("wake-q")
            .wait(Duration::from_secs(120))
            .acquire()
            .await
            .map(|g| g.is_held())
    });
    // The waiter listens on node 0 (the node it preferred before this fix)...
    let first = nodes[0].async_connection().await;
    let listening = wait_until_async(EVENT_LIMIT, || subscribed(&first, "wake-q")).await;
    assert!(listening, "the waiter never subscribed");
    // ...which freezes before the holder releases.
    nodes[0].pause();
    holder.release().await.expect("a majority released");
    let held = tokio::time::timeout(EVENT_LIMIT, waiter)
        .await
        .expect("the waiter heard the release from another node")
        .expect("task")
        .expect("acquired");
    assert!(held, "the waiter holds the lock");
    nodes[0].resume();
}

// ---------------------------------------------------------------------------------------------
// Fencing tokens across a restart without persistence.

#[tokio::test]
async fn tokens_keep_increasing_across_a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    for mode in ["setnx", "reentrant", "write"] {
        let name = format!("fence-{mode}");
        let mut last = distlock::FencingToken::new(0);
        for round in 0..2 {
            let g = request(&locks, mode, &name).fencing(true).acquire().await;
            let g = g.expect("free");
            let token = g.fencing_token().expect("fencing(true)");
            assert!(
                token > last,
                "{mode} round {round}: token {token} after {last}"
            );
            last = token;
            g.release().await.expect("release");
        }
        server.kill();
        server.restart();
        let g = request(&locks, mode, &name)
            .wait(EVENT_LIMIT)
            .fencing(true)
            .acquire()
            .await
            .expect("the client reconnects");
        let token = g.fencing_token().expect("fencing(true)");
        assert!(
            token > last,
            "{mode}: token {token} after the restart, {last} before"
        );
        g.release().await.expect("release");
    }
}
