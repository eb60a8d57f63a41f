//! Local hand-off: a released setnx lock passes straight to a waiting task of the same client,
//! with no command to Redis, within bounds that keep other processes from being starved.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{as_other_owner, channel, client, lock_key, pttl, subscribers};
use distlock::__private::handoff_waiters;
use distlock::{Client, Error, Guard};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer};

/// Calls of `command` the server executed so far (scripts' inner calls included).
fn calls(server: &RedisServer, command: &str) -> u64 {
    server.commandstats().get(command).copied().unwrap_or(0)
}

async fn value(server: &RedisServer, name: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(lock_key(name))
        .query_async(&mut server.async_connection().await)
        .await
        .expect("GET")
}

/// A task of `locks` (as an owner of its own) that waits up to 20 s for the lock `name`.
fn spawn_waiter(
    locks: &Client,
    name: &'static str,
    ttl: Duration,
    fencing: bool,
) -> tokio::task::JoinHandle<Result<Guard, Error>> {
    let locks = locks.clone();
    tokio::spawn(as_other_owner(async move {
        locks
            .lock(name)
            .ttl(ttl)
            .fencing(fencing)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    }))
}

/// Waits until a waiter for `name` has parked: its connection listens on the lock's wake-up
/// channel.
async fn parked(server: &RedisServer, name: &str) {
    let channel = channel(name);
    let parked = wait_until_async(Duration::from_secs(10), || async {
        subscribers(server, &channel).await > 0
    })
    .await;
    assert!(parked, "no waiter for {name} parked");
}

/// A client whose holds pass between its tasks however long the test took to set up: the
/// default 25 ms window could run out on a loaded machine before the waiter is in place.
async fn passing_client(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .local_handoff(8, Duration::from_secs(3600))
        .connect()
        .await
        .expect("connect")
}

/// Waits until `n` tasks of `locks` wait for `name` in hand-off slots.
async fn waiting(locks: &Client, name: &str, n: usize) {
    let ready = wait_until_async(Duration::from_secs(10), || async {
        handoff_waiters(locks, name) == n
    })
    .await;
    assert!(ready, "{n} waiter(s) for {name} never got in place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_passes_the_lock_to_a_waiting_task_without_a_command() {
    let server = RedisServer::start();
    let locks = passing_client(&server).await;
    let ttl = Duration::from_secs(5);
    let held = locks
        .lock("pass")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let taken = value(&server, "pass").await.expect("held");
    let waiter = spawn_waiter(&locks, "pass", ttl, false);
    waiting(&locks, "pass", 1).await;
    let (sets, dels, publishes) = (
        calls(&server, "set"),
        calls(&server, "del"),
        calls(&server, "publish"),
    );
    held.release().await.expect("release");
    let guard = waiter.await.expect("task").expect("handed the lock");
    assert!(guard.is_held());
    // Nothing was freed, published or taken again: the server's hold went on as it was.
    assert_eq!(calls(&server, "set"), sets, "the waiter sent SET");
    assert_eq!(calls(&server, "del"), dels, "the holder freed the lock");
    assert_eq!(calls(&server, "publish"), publishes);
    assert_eq!(value(&server, "pass").await, Some(taken));
    assert!(pttl(&server, "pass").await > 0);
    // The new holder's release is a real one.
    guard.release().await.expect("release");
    assert_eq!(value(&server, "pass").await, None);
    assert_eq!(calls(&server, "del"), dels + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_renewing_a_handed_lease() {
    let server = RedisServer::start();
    let locks = passing_client(&server).await;
    let ttl = Duration::from_millis(300);
    let held = locks
        .lock("renewed")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let waiter = spawn_waiter(&locks, "renewed", ttl, false);
    waiting(&locks, "renewed", 1).await;
    let taken = value(&server, "renewed").await;
    held.release().await.expect("release");
    let guard = waiter.await.expect("task").expect("handed the lock");
    // Held for many ttls: only the renewals that went along with the hold keep it.
    tokio::time::sleep(ttl * 5).await;
    assert!(guard.is_held(), "the handed lease was not renewed");
    assert_eq!(value(&server, "renewed").await, taken);
    assert!(pttl(&server, "renewed").await > 0);
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_after_the_hand_off_gives_the_lock_back() {
    let server = RedisServer::start();
    let locks = passing_client(&server).await;
    let ttl = Duration::from_secs(30);
    let held = locks
        .lock("dropped")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let mut waiter = Box::pin(as_other_owner(
        locks
            .lock("dropped")
            .ttl(ttl)
            .wait(Duration::from_secs(30))
            .acquire(),
    ));
    // Run the waiter only until it waits in its slot, then leave it unpolled.
    tokio::select! {
        r = &mut waiter => panic!("the waiter finished early: {r:?}"),
        () = waiting(&locks, "dropped", 1) => {}
    }
    // The hold now sits in the waiter's slot, which nobody will read.
    held.release().await.expect("release");
    assert_eq!(handoff_waiters(&locks, "dropped"), 0);
    assert!(value(&server, "dropped").await.is_some());
    drop(waiter);
    // Given back in the background, long before its 30 s lease would end.
    let freed = wait_until_async(Duration::from_secs(10), || async {
        value(&server, "dropped").await.is_none()
    })
    .await;
    assert!(freed, "the dropped waiter's hold was not given back");
    let again = locks
        .lock("dropped")
        .try_acquire()
        .await
        .expect("free again");
    again.release().await.expect("release");
}

/// A waiter that asked for a fencing token gets one: a hold taken without one is not passed
/// to it, the lock is really released and taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_waiter_is_not_handed_a_hold_without_a_token() {
    let server = RedisServer::start();
    let locks = passing_client(&server).await;
    let ttl = Duration::from_secs(5);
    let held = locks
        .lock("fenced")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let fenced = spawn_waiter(&locks, "fenced", ttl, true);
    parked(&server, "fenced").await;
    let sets = calls(&server, "set");
    held.release().await.expect("release");
    let guard = fenced.await.expect("task").expect("acquired");
    assert!(
        guard.fencing_token().is_some(),
        "no token for a fenced waiter"
    );
    assert!(
        calls(&server, "set") > sets,
        "the fenced waiter took no hold of its own"
    );
    guard.release().await.expect("release");
}

/// Tasks of one process that keep the lock busy pass it among themselves only so often: a
/// waiter of another process (here another client, which shares nothing with the first) gets
/// it while they are still at it, not after they stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_are_bounded_so_another_process_gets_the_lock() {
    let server = RedisServer::start();
    let busy = client(&server).await;
    let other = client(&server).await;
    let ttl = Duration::from_secs(5);
    let other_got_it = Arc::new(AtomicBool::new(false));
    let acquisitions = Arc::new(AtomicU64::new(0));
    const CAP: u64 = 2_000;
    let sets = calls(&server, "set");
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (locks, done, count) = (busy.clone(), other_got_it.clone(), acquisitions.clone());
            tokio::spawn(as_other_owner(async move {
                while !done.load(Ordering::Acquire) && count.load(Ordering::Acquire) < CAP {
                    let guard = locks
                        .lock("bounded")
                        .ttl(ttl)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .expect("acquire");
                    count.fetch_add(1, Ordering::AcqRel);
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    guard.release().await.expect("release");
                }
            }))
        })
        .collect();
    // Let the busy tasks pass the lock around before the other process asks.
    let passing = wait_until_async(Duration::from_secs(10), || async {
        acquisitions.load(Ordering::Acquire) >= 50
    })
    .await;
    assert!(passing);
    let guard = other
        .lock("bounded")
        .ttl(ttl)
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the other process gets the lock");
    let by_then = acquisitions.load(Ordering::Acquire);
    other_got_it.store(true, Ordering::Release);
    guard.release().await.expect("release");
    for task in tasks {
        task.await.expect("task");
    }
    assert!(
        by_then < CAP,
        "the other process waited until the busy tasks stopped"
    );
    // And the busy tasks did pass it among themselves: far fewer SETs than acquisitions.
    let sent = calls(&server, "set") - sets;
    let total = acquisitions.load(Ordering::Acquire);
    println!("{total} acquisitions, {sent} SET calls; the other got it after {by_then}");
    assert!(sent * 2 < total, "{sent} SETs for {total} acquisitions");
}

/// `local_handoff(0, ..)` turns it off: a waiter takes the lock from Redis, with a value of
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_can_be_turned_off() {
    let server = RedisServer::start();
    let locks = Client::builder(&server.url())
        .local_handoff(0, Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let ttl = Duration::from_secs(5);
    let held = locks
        .lock("off")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let taken = value(&server, "off").await;
    let waiter = spawn_waiter(&locks, "off", ttl, false);
    parked(&server, "off").await;
    assert_eq!(
        handoff_waiters(&locks, "off"),
        0,
        "a slot opened with hand-off off"
    );
    let sets = calls(&server, "set");
    held.release().await.expect("release");
    let guard = waiter.await.expect("task").expect("acquired");
    assert!(
        calls(&server, "set") > sets,
        "the waiter took no hold of its own"
    );
    assert_ne!(value(&server, "off").await, taken);
    guard.release().await.expect("release");
}

/// A release that was sent frees the lock for everyone: once its future is dropped (a timeout
/// around it, a cancelled handler), the hold it gave back must not pass to a local waiter, which
/// would then call itself the holder while another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_that_was_sent_hands_nothing_to_a_waiter() {
    let server = RedisServer::start();
    // One connection for everything, the default two, and two acquisition connections.
    for (connections, name) in [(1, "sent-1"), (2, "sent-2"), (3, "sent-3")] {
        dropped_release_after_it_was_sent(&server, connections, name).await;
    }
}

async fn dropped_release_after_it_was_sent(
    server: &RedisServer,
    connections: usize,
    name: &'static str,
) {
    // Replies come late through the proxy, so the release runs on the server while its
    // future is still pending.
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let locks = Client::builder(&proxy.url())
        .local_handoff(8, Duration::from_secs(3600))
        .connections(connections)
        .connect()
        .await
        .expect("connect");
    let other = client(server).await;
    // The release script is loaded first: a NOSCRIPT round trip would time out below.
    let warm = locks.lock("warm").try_acquire().await.expect("free");
    warm.release().await.expect("release");
    let held = locks.lock(name).try_acquire().await.expect("free");
    proxy.reply_latency(Duration::from_millis(800));
    let mut release = Box::pin(held.release());
    // Polled by hand until the server has run it; its answer is on its way, unread.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut freed = false;
    while !freed && std::time::Instant::now() < deadline {
        if let std::task::Poll::Ready(r) = std::future::Future::poll(release.as_mut(), &mut cx) {
            panic!("the release finished before the server had run it: {r:?}");
        }
        tokio::task::yield_now().await;
        freed = value(server, name).await.is_none();
    }
    proxy.reply_latency(Duration::ZERO);
    assert!(freed, "the release never reached the server");
    let theirs = other.lock(name).try_acquire().await.expect("freed");
    let waiter = spawn_waiter(&locks, name, Duration::from_secs(30), false);
    waiting(&locks, name, 1).await;
    drop(release);
    // Nothing was handed over: the waiter still waits in its slot.
    assert_eq!(
        handoff_waiters(&locks, name),
        1,
        "the dropped release handed the hold on"
    );
    assert!(!waiter.is_finished());
    // It gets the lock for real once the other client lets go.
    theirs.release().await.expect("release");
    let guard = waiter
        .await
        .expect("task")
        .expect("acquired after the release");
    assert!(guard.is_held());
    assert!(value(server, name).await.is_some());
    guard.release().await.expect("release");
}
