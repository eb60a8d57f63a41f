//! The counting semaphore (`Client::semaphore`) against real redis-server processes: the limit
//! across processes, per-permit leases through a holder's SIGKILL, the recorded limit, one
//! waiter woken per release, lost replies, a Cluster, fencing, inspection, and the quorum and
//! mode refusals.

use crate::common;

use std::time::{Duration, Instant};

use common::{as_other_owner, client, fence_key, lock_key, run_contenders, spawn_holder};
use distlock::{semaphore, Client, Error, LockMode};
use distlock_testkit::{
    wait_until_async, FaultProxy, Observer, RedisCluster, RedisServer, RedisServers,
};
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// The semaphore's sorted set as the server holds it: (member, score) lowest score first, the
/// recorded limit (`permits`, score minus the limit) included.
async fn members(server: &RedisServer, name: &str) -> Vec<(String, f64)> {
    server
        .async_connection()
        .await
        .zrange_withscores(lock_key(name), 0, -1)
        .await
        .expect("ZRANGE")
}

/// The server's clock in ms (`TIME`).
async fn server_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("TIME");
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn the_permits_bound_the_holders_and_a_release_frees_one() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    // One task may hold several permits: each acquisition is one.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            locks
                .semaphore("pool", 3)
                .try_acquire()
                .await
                .expect("a permit is free"),
        );
    }
    let busy = as_other_owner(locks.semaphore("pool", 3).try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(busy, Error::Busy { ref name } if name == "pool"),
        "{busy}"
    );
    let timeout = locks
        .semaphore("pool", 3)
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(timeout, Error::Timeout { .. }), "{timeout}");
    // The limit and one member per permit.
    let set = members(&server, "pool").await;
    assert_eq!(set.len(), 4, "{set:?}");
    assert_eq!(set[0], ("permits".to_owned(), -3.0));
    held.pop().expect("three").release().await.expect("release");
    assert_eq!(members(&server, "pool").await.len(), 3);
    let again = locks
        .semaphore("pool", 3)
        .try_acquire()
        .await
        .expect("the released permit is free");
    assert!(held.iter().all(|g| g.is_held()));
    again.release().await.expect("release");
    for guard in held {
        guard.release().await.expect("release");
    }
    assert_eq!(common::pttl(&server, "pool").await, -2, "nothing is left");
}

#[tokio::test]
async fn zero_permits_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let err = locks.semaphore("none", 0).try_acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { reason } if reason.contains("at least 1 permit")),
        "{err}"
    );
    assert_eq!(common::pttl(&server, "none").await, -2);
}

/// Two contender processes x four tasks take permits of one semaphore of 3 until the observer
/// counted 600 sections: each process's own probe never counts more than 3 of its tasks
/// inside (the contender fails otherwise), and the observer's probe, on a server of its own,
/// never more than 3 holders of both processes together; it does reach 3 (the probe sees
/// holders overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_never_exceeded_across_processes() {
    let server = RedisServer::start();
    permits_across_processes("semaphore:3", &server.url(), "sem-mx", 600).await;
}

/// The same with fencing: every permit taken mints a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_never_exceeded_across_processes_with_fencing() {
    let server = RedisServer::start();
    permits_across_processes("semaphore:3+fenced", &server.url(), "sem-mx-f", 300).await;
}

async fn permits_across_processes(kind: &str, url: &str, name: &str, target: u64) {
    let observer_server = RedisServer::start();
    let per_process = run_contenders(
        2,
        &[
            "permits",
            kind,
            url,
            &observer_server.url(),
            name,
            "4",
            &target.to_string(),
        ],
    );
    let total: u64 = per_process.iter().sum();
    assert!(total >= target, "only {total} sections ran");
    assert!(
        per_process.iter().all(|&n| n > 0),
        "every process got permits: {per_process:?}"
    );
    let observer = Observer::connect(&observer_server.url(), name).await;
    assert_eq!(
        observer.max_occupancy().await,
        3,
        "at most 3 holders, and 3 met"
    );
    assert_eq!(observer.occupancy().await, 0);
    assert_eq!(observer.acked().await, total);
}

/// A holder process killed with SIGKILL never releases: its one permit frees when its own
/// lease runs out, not before, while this process's two permits stay held, renewed by the
/// watchdog all along (the dead holder's permit is not kept alive by their renewals), and
/// exactly one permit is free then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_exactly_its_own_permit_at_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut mine = Vec::new();
    for _ in 0..2 {
        mine.push(
            locks
                .semaphore("crash", 3)
                .ttl(Duration::from_millis(600))
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let (mut holder, _) = spawn_holder("semaphore:3", &server.url(), "crash", 1500);
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap the holder");
    let asked = Instant::now();
    let now = server_ms(&server).await;
    let set = members(&server, "crash").await;
    assert_eq!(set.len(), 4, "the limit and three permits: {set:?}");
    // The dead holder's lease ends last: it was taken last, with the longest ttl.
    let (_, dead_ends) = set.last().expect("members").clone();
    let left = dead_ends as i64 - now;
    assert!(
        left > 0,
        "the dead holder's permit outlives it until its ttl"
    );
    let expires_no_earlier_than = asked + Duration::from_millis(left as u64);
    let renewals = locks.renewal_round_trips();

    let busy = as_other_owner(locks.semaphore("crash", 3).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let third = locks
        .semaphore("crash", 3)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("the dead holder's permit frees at its ttl");
    // TIME and ZSCORE are whole milliseconds: allow one.
    assert!(
        Instant::now() + Duration::from_millis(1) >= expires_no_earlier_than,
        "a permit freed before the dead holder's ttl ran out"
    );
    assert!(
        locks.renewal_round_trips() > renewals,
        "the other permits were renewed meanwhile"
    );
    assert!(mine.iter().all(|g| g.is_held()), "our permits stayed held");
    let busy = locks.semaphore("crash", 3).try_acquire().await.unwrap_err();
    assert!(
        matches!(busy, Error::Busy { .. }),
        "exactly one permit was freed: {busy}"
    );
    third.release().await.expect("release");
    for guard in mine {
        guard.release().await.expect("release");
    }
}

/// The limit is recorded by the holder that finds the name free; a request with another
/// number of permits is refused while a permit is held, and changes nothing.
#[tokio::test]
async fn holders_that_disagree_on_the_permits_get_an_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks
        .semaphore("limit", 3)
        .try_acquire()
        .await
        .expect("free");
    let before = members(&server, "limit").await;
    for permits in [2, 4] {
        let err = locks
            .semaphore("limit", permits)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap_err();
        match &err {
            Error::PermitsMismatch {
                name,
                permits: asked,
                recorded,
            } => {
                assert_eq!((name.as_str(), *asked, *recorded), ("limit", permits, 3));
            }
            other => panic!("expected PermitsMismatch, got {other}"),
        }
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("same number of permits"), "{err}");
    }
    assert_eq!(members(&server, "limit").await, before, "nothing changed");
    held.release().await.expect("release");
    // Free again: the next holder records its own number.
    let held = locks
        .semaphore("limit", 4)
        .try_acquire()
        .await
        .expect("free");
    assert_eq!(members(&server, "limit").await[0].1, -4.0);
    held.release().await.expect("release");
}

/// A release wakes one waiter, with no polling: two waiters of another client sleep (each in
/// its hand-off slot, the event that says it sleeps); one permit released by the holder's
/// client is one `PUBLISH` and one acquire attempt, by one waiter, which gets it; the other
/// sleeps on until the next release. The holders' ttl (30 s) is far beyond the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter() {
    let server = RedisServer::start();
    let holders = client(&server).await;
    let waiters = client(&server).await;
    let ttl = Duration::from_secs(30);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            holders
                .semaphore("wake", 2)
                .ttl(ttl)
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (waiters, got_tx) = (waiters.clone(), got_tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .semaphore("wake", 2)
                .ttl(ttl)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a waiter gets a permit");
            got_tx.send(Instant::now()).expect("the test listens");
            guard
        }));
    }
    let asleep = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::handoff_waiters(&waiters, "wake") == 2
    })
    .await;
    assert!(asleep, "both waiters sleep");
    let before = server.commandstats();
    let calls = |stats: &std::collections::BTreeMap<String, u64>, cmd: &str| {
        stats.get(cmd).copied().unwrap_or(0)
    };
    let released = Instant::now();
    held.pop().expect("two").release().await.expect("release");
    let woken = tokio::time::timeout(EVENT_LIMIT, got.recv())
        .await
        .expect("a waiter got the permit long before the holders' ttl")
        .expect("sent");
    println!("released to acquired: {:?}", woken - released);
    let after = server.commandstats();
    assert_eq!(calls(&after, "publish") - calls(&before, "publish"), 1);
    // The release, and the one waiter's attempt.
    assert_eq!(
        calls(&after, "evalsha") - calls(&before, "evalsha"),
        2,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        distlock::__private::handoff_waiters(&waiters, "wake"),
        1,
        "the other waiter sleeps on"
    );
    held.pop().expect("one").release().await.expect("release");
    tokio::time::timeout(EVENT_LIMIT, got.recv())
        .await
        .expect("the second waiter is woken by the second release")
        .expect("sent");
    for task in tasks {
        task.await
            .expect("waiter task")
            .release()
            .await
            .expect("release");
    }
}

/// A permit released while a task of the same client waits for one passes to it with no
/// command to Redis (the local hand-off): the server sees one unbroken permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_permit_passes_to_a_local_waiter_without_a_command() {
    let server = RedisServer::start();
    let locks = Client::builder(&server.url())
        .local_handoff(8, Duration::from_secs(3600))
        .connect()
        .await
        .expect("connect");
    let held = locks
        .semaphore("passed", 1)
        .try_acquire()
        .await
        .expect("free");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .semaphore("passed", 1)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let ready = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::handoff_waiters(&locks, "passed") == 1
    })
    .await;
    assert!(ready, "the waiter sleeps in its hand-off slot");
    let before = members(&server, "passed").await;
    let scripts = server.commandstats().get("evalsha").copied();
    held.release().await.expect("release");
    let passed = waiter
        .await
        .expect("task")
        .expect("the waiter gets the permit");
    assert!(passed.is_held());
    assert_eq!(server.commandstats().get("evalsha").copied(), scripts);
    assert_eq!(members(&server, "passed").await, before, "the same permit");
    passed.release().await.expect("release");
    assert_eq!(common::pttl(&server, "passed").await, -2);
}

/// Every holder's fenced permit gets a token of its own, each above every token minted
/// before for the name (the counter beside the semaphore, in its slot).
#[tokio::test]
async fn fencing_tokens_are_per_permit_and_increase() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut last = distlock::FencingToken::new(0);
    let mut held = Vec::new();
    for _ in 0..3 {
        let guard = locks
            .semaphore("fenced", 3)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let token = guard.fencing_token().expect("fencing(true)");
        assert!(token > last, "{token} after {last}");
        last = token;
        held.push(guard);
    }
    // Without fencing: no token, and the order of the tokens is left alone.
    held.remove(0).release().await.expect("release");
    let plain = locks
        .semaphore("fenced", 3)
        .try_acquire()
        .await
        .expect("free");
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.expect("release");
    let next = locks
        .semaphore("fenced", 3)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(next.fencing_token().expect("fencing(true)") > last);
    let counter: u64 = server
        .async_connection()
        .await
        .get(fence_key("fenced"))
        .await
        .expect("GET");
    assert_eq!(
        Some(counter),
        next.fencing_token().map(distlock::FencingToken::get)
    );
    next.release().await.expect("release");
    for guard in held {
        guard.release().await.expect("release");
    }
}

#[tokio::test]
async fn inspect_shows_the_permits_and_their_holders() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let free = locks.inspect("shown").await.expect("inspect");
    assert!(!free.is_held() && free.permits.is_none() && free.permit_holders.is_empty());
    let a = locks
        .semaphore("shown", 4)
        .ttl(Duration::from_secs(20))
        .try_acquire()
        .await
        .expect("free");
    let b = locks
        .semaphore("shown", 4)
        .ttl(Duration::from_secs(60))
        .try_acquire()
        .await
        .expect("free");
    let info = locks.inspect("shown").await.expect("inspect");
    assert!(info.is_held());
    assert_eq!(info.mode, Some(LockMode::Semaphore));
    assert_eq!(info.permits, Some(4));
    assert_eq!(info.hold_count, 2);
    assert_eq!(info.permit_holders.len(), 2);
    assert!(info.holder.is_none(), "no single holder");
    // Earliest lease end first; each with its own remaining lease and who took it.
    let (first, second) = (&info.permit_holders[0], &info.permit_holders[1]);
    assert!(
        first.remaining <= Duration::from_secs(20) && first.remaining > Duration::from_secs(10)
    );
    assert!(second.remaining > Duration::from_secs(50));
    for permit in &info.permit_holders {
        assert_eq!(permit.holder.pid, Some(std::process::id()));
        let site = permit.holder.site.as_deref().expect("the call site");
        assert!(site.contains("semaphore.rs"), "{site}");
        assert!(permit.holder.acquired_at.is_some());
    }
    assert_ne!(first.holder.owner, second.holder.owner);
    assert!(info.remaining.expect("the key's lease") > Duration::from_secs(50));
    a.release().await.expect("release");
    b.release().await.expect("release");
    assert!(!locks.inspect("shown").await.expect("inspect").is_held());
}

/// One name is one lock of one mode: a semaphore found by another mode, or another mode's
/// lock found by a semaphore, is a mode conflict (not the application's data), and nothing
/// is changed; a sorted set that is not a semaphore is the application's.
#[tokio::test]
async fn a_semaphore_and_the_other_modes_report_each_other_as_mode_conflicts() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks
        .semaphore("shared-name", 2)
        .try_acquire()
        .await
        .expect("free");
    let before = members(&server, "shared-name").await;
    // setnx three ways: the plain `SET .. NX PX .. GET`, a waiter's `SET .. NX PX` and its
    // script, the fencing script.
    for (mode, request, waits) in [
        (LockMode::SetNx, locks.lock("shared-name"), false),
        (LockMode::SetNx, locks.lock("shared-name"), true),
        (
            LockMode::SetNx,
            locks.lock("shared-name").fencing(true),
            false,
        ),
        (LockMode::Reentrant, locks.reentrant("shared-name"), false),
        (LockMode::Read, locks.read("shared-name"), false),
        (LockMode::Write, locks.write("shared-name"), false),
    ] {
        let err = as_other_owner(async {
            if waits {
                request.wait(EVENT_LIMIT).acquire().await
            } else {
                request.try_acquire().await
            }
        })
        .await
        .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ModeConflict { held_as: LockMode::Semaphore, requested, .. }
                    if *requested == mode
            ),
            "{mode}: {err}"
        );
    }
    assert_eq!(members(&server, "shared-name").await, before);
    held.release().await.expect("release");

    for (name, held_as) in [
        ("n-setnx", LockMode::SetNx),
        ("n-re", LockMode::Reentrant),
        ("n-read", LockMode::Read),
        ("n-write", LockMode::Write),
    ] {
        let guard = match held_as {
            LockMode::SetNx => locks.lock(name).try_acquire().await,
            LockMode::Reentrant => locks.reentrant(name).try_acquire().await,
            LockMode::Read => locks.read(name).try_acquire().await,
            _ => locks.write(name).try_acquire().await,
        }
        .expect("free");
        let err = as_other_owner(locks.semaphore(name, 2).try_acquire())
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ModeConflict { held_as: found, requested: LockMode::Semaphore, .. }
                    if *found == held_as
            ),
            "{held_as}: {err}"
        );
        guard.release().await.expect("release");
    }

    let mut raw = server.async_connection().await;
    let _: () = raw.zadd(lock_key("app"), "x", 1).await.expect("ZADD");
    let _: () = raw.pexpire(lock_key("app"), 60_000).await.expect("PEXPIRE");
    for attempt in [
        locks.semaphore("app", 2).try_acquire(),
        locks.lock("app").try_acquire(),
        locks.reentrant("app").try_acquire(),
        locks.write("app").try_acquire(),
    ] {
        let err = attempt.await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{err}");
    }
    let left: Vec<(String, f64)> = raw
        .zrange_withscores(lock_key("app"), 0, -1)
        .await
        .expect("ZRANGE");
    assert_eq!(
        left,
        [("x".to_owned(), 1.0)],
        "the application's data is untouched"
    );
}

/// A Redlock quorum cannot bound the holders by the limit: the request is refused, and
/// nothing reaches the nodes.
#[tokio::test]
async fn a_quorum_client_refuses_a_semaphore() {
    let nodes = RedisServers::start(3);
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect to the quorum");
    let err = locks.semaphore("q", 2).try_acquire().await.unwrap_err();
    match &err {
        Error::InvalidConfig { reason } => {
            assert!(reason.contains("not on a Redlock quorum"), "{reason}");
            assert!(reason.contains("does not bound the holders"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other}"),
    }
    for node in nodes.iter() {
        assert_eq!(node.commandstats().get("evalsha"), None, "nothing was sent");
    }
}

static INSIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// At most 2 exports per tenant run at once.
#[semaphore(key = "export:<tenant>", permits = 2, ttl = "5s", wait = "30s", client = locks)]
async fn export(locks: &Client, tenant: &str) -> Result<usize, Error> {
    use std::sync::atomic::Ordering;
    let here = INSIDE.fetch_add(1, Ordering::AcqRel) + 1;
    MOST.fetch_max(here, Ordering::AcqRel);
    tokio::time::sleep(Duration::from_millis(20)).await;
    INSIDE.fetch_sub(1, Ordering::AcqRel);
    Ok(tenant.len())
}

/// The attribute asks for its own number of permits (a holder that recorded another makes
/// the call fail, without running the body), and six calls at once run two at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_admits_its_permits() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let three = locks
        .semaphore("export:acme", 3)
        .try_acquire()
        .await
        .expect("free");
    let err = as_other_owner(export(&locks, "acme")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                permits: 2,
                recorded: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        MOST.load(std::sync::atomic::Ordering::Acquire),
        0,
        "the body never ran"
    );
    three.release().await.expect("release");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let locks = locks.clone();
        calls.spawn(async move { export(&locks, "acme").await });
    }
    while let Some(call) = calls.join_next().await {
        assert_eq!(call.expect("task").expect("every call runs"), 4);
    }
    assert_eq!(MOST.load(std::sync::atomic::Ordering::Acquire), 2);
    assert_eq!(common::pttl(&server, "export:acme").await, -2);
}

/// Lock keys (not fencing counters or other helper keys) on the server.
async fn lock_keys(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:*")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("KEYS");
    keys.into_iter()
        .filter(|k| !k.starts_with("distlock:#"))
        .collect()
}

/// Holders behind a proxy that drops 3 % of the server's replies (the request ran, the
/// answer never came; the connection is reset): the limit holds, every call that fails is
/// retryable, and once the last release returned nothing is left at the semaphore's key
/// (every permit whose acquisition or release lost its reply is given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_leave_nothing_behind() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            Client::connect(&proxy.url())
                .await
                .expect("connect through the proxy"),
        );
    }
    proxy.drop_replies(0.03);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let locks = clients[i % 2].clone();
        let observer = Observer::connect(&observer_server.url(), "lossy").await;
        tasks.spawn(async move {
            let (mut sections, mut errors) = (0u32, 0u32);
            while started.elapsed() < Duration::from_secs(2) {
                let guard = match locks
                    .semaphore("lossy", 3)
                    .ttl(Duration::from_secs(3))
                    .wait(Duration::from_secs(20))
                    .fencing(i % 2 == 0)
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                        continue;
                    }
                };
                observer.enter().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                observer.exit().await;
                match guard.release().await {
                    Ok(()) => sections += 1,
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                    }
                }
            }
            (sections, errors)
        });
    }
    let (mut sections, mut errors) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (s, e) = done.expect("task");
        sections += s;
        errors += e;
    }
    let dropped = proxy.replies_dropped();
    proxy.clear();
    println!("{sections} sections, {errors} failed calls, {dropped} replies lost");
    assert!(dropped > 0, "the proxy dropped nothing");
    assert!(sections > 0);
    let observer = Observer::connect(&observer_server.url(), "lossy").await;
    let most = observer.max_occupancy().await;
    assert!((1..=3).contains(&most), "{most} holders at once");
    let clean = wait_until_async(Duration::from_secs(3), || async {
        lock_keys(&server).await.is_empty()
    })
    .await;
    assert!(
        clean,
        "permits left after the last release: {:?}",
        members(&server, "lossy").await
    );
}

/// On a Redis Cluster (3 masters): the semaphore and its fencing counter share one slot, a
/// waiter is woken by sharded pub/sub, and the limit holds across two processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_cluster() {
    let cluster = RedisCluster::start_with(3, 0, 1500);
    let seeds = cluster.urls();
    let locks = Client::cluster(seeds.clone())
        .await
        .expect("connect to the cluster");
    let slot = RedisCluster::slot_of(lock_key("c-sem").as_bytes());
    assert_eq!(RedisCluster::slot_of(fence_key("c-sem").as_bytes()), slot);
    let master = cluster.master_of_slot(slot);
    let a = locks
        .semaphore("c-sem", 2)
        .ttl(Duration::from_secs(30))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let b = locks
        .semaphore("c-sem", 2)
        .ttl(Duration::from_secs(30))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(b.fencing_token() > a.fencing_token());
    let card: usize = redis::cmd("ZCARD")
        .arg(lock_key("c-sem"))
        .query(&mut cluster.server(master).connection())
        .expect("the semaphore is on its slot's master");
    assert_eq!(card, 3);
    // Another client waits; the release wakes it long before the 30 s leases end.
    let other = Client::cluster(seeds.clone())
        .await
        .expect("connect to the cluster");
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = other
            .semaphore("c-sem", 2)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("a permit after the release");
        let waited = started.elapsed();
        guard.release().await.expect("release");
        waited
    });
    // Without sharded pub/sub (Redis 6.2) the waiter polls instead.
    let subscribed = !common::has_sharded_pub_sub(cluster.server(master))
        && common::polling_started().await
        || wait_until_async(EVENT_LIMIT, || async {
            let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(lock_key("c-sem"))
                .query(&mut cluster.server(master).connection())
                .expect("PUBSUB SHARDNUMSUB");
            counts.first().is_some_and(|(_, n)| *n > 0)
        })
        .await;
    assert!(subscribed, "the waiter listens on the slot's shard channel");
    a.release().await.expect("release");
    let waited = waiter.await.expect("waiter");
    assert!(waited < Duration::from_secs(20), "woken after {waited:?}");
    b.release().await.expect("release");

    let observer_server = RedisServer::start();
    let url = format!("cluster:{}", seeds.join(","));
    let per_process = run_contenders(
        2,
        &[
            "permits",
            "semaphore:2",
            &url,
            &observer_server.url(),
            "c-sem-mx",
            "4",
            "200",
        ],
    );
    assert!(per_process.iter().all(|&n| n > 0), "{per_process:?}");
    let observer = Observer::connect(&observer_server.url(), "c-sem-mx").await;
    assert_eq!(observer.max_occupancy().await, 2);
}
