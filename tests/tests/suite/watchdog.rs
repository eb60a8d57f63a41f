//! The watchdog: renewal while held, never after release, and no lease lost silently.

use crate::common;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{as_other_owner, client, has_set_ifeq, lock_key, pttl, renewal_calls};
use distlock::{Client, Error};
use distlock_testkit::{FaultProxy, RedisServer, RedisServers};
use redis::AsyncCommands;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Script calls the server has executed (acquire, renew and release all are scripts).
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.commandstats();
    stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0)
}

/// Renewals of setnx leases the server has run, of either kind: the native `SET .. IFEQ`
/// where the server has it (Valkey 8.1, Redis 8.4: the matrix's Valkey leg), else the extend
/// script; with whatever else ran as a `SET` or a script (acquisitions, releases).
fn renewals_run(server: &RedisServer) -> u64 {
    let (native, scripts) = renewal_calls(server);
    native + scripts
}

/// How long a test waits for an event that should come far sooner; only a broken watchdog
/// reaches it, and then the test fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_watchdog_keeps_a_lock_alive_past_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let g = locks
        .lock("long")
        .ttl(Duration::from_millis(600))
        .try_acquire()
        .await
        .expect("free");
    // The work outlasts the ttl three times over.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert!(g.is_held());
    assert!(pttl(&server, "long").await > 0, "renewed on the server");
    let busy = as_other_owner(locks.lock("long").try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    g.release().await.expect("still ours");
}

#[tokio::test]
async fn renewal_stops_the_moment_the_lock_is_released() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ttl = Duration::from_millis(300);
    let before = script_calls(&server);
    let g = locks
        .reentrant("stop")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    tokio::time::sleep(ttl).await; // long enough for renewals to run
    g.release().await.expect("release");
    let after_release = script_calls(&server);
    assert!(after_release - before > 2, "renewals ran while held");
    assert_eq!(locks.renewing(), 0);
    // Three ttls later nothing was renewed and the key is gone.
    tokio::time::sleep(3 * ttl).await;
    assert_eq!(pttl(&server, "stop").await, -2, "the key is absent");
    assert_eq!(
        script_calls(&server),
        after_release,
        "a renewal was sent after the release"
    );
}

#[tokio::test]
async fn a_key_deleted_behind_the_holders_back_is_reported_lost_by_the_next_renewal() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ttl = Duration::from_secs(30);
    let g = locks
        .lock("deleted")
        .ttl(ttl)
        .renew_every(Duration::from_millis(100))
        .try_acquire()
        .await
        .expect("free");
    let _: () = server
        .async_connection()
        .await
        .del(lock_key("deleted"))
        .await
        .expect("DEL");
    let deleted = Instant::now();
    let lost = tokio::time::timeout(EVENT_LIMIT, g.lost())
        .await
        .expect("loss reported");
    let after = deleted.elapsed();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!g.is_held());
    // The lease had 30 s left on the local clock: only the refused renewal can report it.
    assert!(after < ttl, "reported after {after:?}");
    println!("loss reported {after:?} after the delete (renewal period 100 ms)");
}

#[tokio::test]
async fn a_paused_server_is_reported_lost_by_the_local_deadline_and_the_next_token_is_larger() {
    let mut server = RedisServer::start();
    let locks = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let g = locks
        .lock("paused")
        .ttl(Duration::from_millis(600))
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    server.pause();
    let deadline = Instant::now() + g.remaining();
    let lost = tokio::time::timeout(EVENT_LIMIT, g.lost())
        .await
        .expect("loss reported");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(
        server.is_paused(),
        "reported while Redis was still frozen, not after"
    );
    tokio::time::sleep_until(deadline.into()).await;
    assert!(
        !g.is_held(),
        "past the local deadline the guard never claims the lock"
    );
    server.resume();
    let next = as_other_owner(
        locks
            .lock("paused")
            .wait(Duration::from_secs(10))
            .fencing(true)
            .acquire(),
    )
    .await
    .expect("the lock frees after the lapsed lease");
    assert!(next.fencing_token() > g.fencing_token());
    assert!(g.fencing_token().is_some());
    let err = g.release().await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    next.release().await.expect("release");
}

#[tokio::test]
async fn max_hold_caps_renewal() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let cap = Duration::from_millis(500);
    let started = Instant::now();
    let g = locks
        .lock("capped")
        .ttl(Duration::from_millis(200))
        .max_hold(cap)
        .try_acquire()
        .await
        .expect("free");
    let lost = tokio::time::timeout(EVENT_LIMIT, g.lost())
        .await
        .expect("the lease ends");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(
        started.elapsed() >= cap,
        "renewed until the cap, ended after it"
    );
    let free = as_other_owner(locks.lock("capped").wait(Duration::from_secs(5)).acquire()).await;
    free.expect("free after the capped lease")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_locks_are_renewed_in_one_round_trip_per_tick() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ttl = Duration::from_millis(900);
    let mut guards = Vec::new();
    for i in 0..1_000 {
        guards.push(
            locks
                .lock(format!("many:{i}"))
                .ttl(ttl)
                .try_acquire()
                .await
                .expect("free"),
        );
    }
    let trips_before = locks.renewal_round_trips();
    let calls_before = renewals_run(&server);
    tokio::time::sleep(2 * ttl).await; // two ttls: every lease renewed several times
    let trips = locks.renewal_round_trips() - trips_before;
    let renewals = renewals_run(&server) - calls_before;
    assert!(
        guards.iter().all(|g| g.is_held()),
        "every lease stayed alive"
    );
    assert!(
        renewals >= 2 * 1_000,
        "each lease renewed at least twice: {renewals}"
    );
    // Per-lock timers would need one round trip per renewal; batching averages many.
    assert!(
        trips * 50 <= renewals,
        "{trips} round trips for {renewals} renewals"
    );
    println!("{renewals} renewals in {trips} round trips");
    for g in guards {
        g.release().await.expect("release");
    }
    assert_eq!(locks.renewing(), 0);
}

/// A quorum renewal that a node answers after the node timeout still proves the lease that
/// node holds: with one node of three down and another answering every renewal late, the
/// late answers make the majority. They were discarded as too late, so every renewal failed
/// and each lease was lost when it ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_after_the_node_timeout_still_counts() {
    let mut servers = RedisServers::start(2);
    let slow = RedisServer::start();
    let proxy = FaultProxy::start(&slow.addr()).expect("fault proxy");
    let node_timeout = Duration::from_millis(100);
    let locks = Client::quorum_builder([servers[0].url(), servers[1].url(), proxy.url()])
        .node_timeout(node_timeout)
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect to the quorum");
    let ttl = Duration::from_secs(2);
    // An acquisition returns at a majority's grant and drops the slowest request, which may
    // not have left yet: keep the locks taken on both nodes that stay up, the ones that can
    // live on once the third is gone.
    let mut both = Vec::new();
    for i in 0..1_000 {
        if both.len() == 20 {
            break;
        }
        let g = locks.lock(format!("late:{i}")).ttl(ttl).try_acquire().await;
        let g = g.expect("free");
        let key = lock_key(g.name());
        let mut on = 0;
        for server in [&servers[0], &slow] {
            let mut conn = server.async_connection().await;
            on += conn.exists::<_, usize>(&key).await.expect("EXISTS");
        }
        if on == 2 {
            both.push(g);
        } else {
            g.release().await.expect("release");
        }
    }
    assert_eq!(both.len(), 20, "locks taken on both nodes");
    servers[1].kill();
    proxy.reply_latency(3 * node_timeout);
    // Renewals every ttl/3, each answered late by the slow node: several leases' worth.
    tokio::time::sleep(ttl * 5 / 2).await;
    let lost = both.iter().filter(|g| !g.is_held()).count();
    assert_eq!(lost, 0, "leases lost out of 20");
    proxy.reply_latency(Duration::ZERO);
    for g in both {
        g.release().await.expect("release");
    }
}

/// The messages of the WARN events traced on this thread while the guard lives (a
/// current-thread runtime runs the client's tasks on it too).
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn capture() -> (Warnings, tracing::subscriber::DefaultGuard) {
        let warnings = Warnings::default();
        let subscriber = tracing_subscriber::registry().with(warnings.clone());
        (warnings, tracing::subscriber::set_default(subscriber))
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        struct Message<'a>(&'a mut String);
        impl Visit for Message<'_> {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    let _ = write!(self.0, "{value:?}");
                }
            }
        }
        if *event.metadata().level() == Level::WARN {
            let mut message = String::new();
            event.record(&mut Message(&mut message));
            self.0.lock().unwrap().push(message);
        }
    }
}

/// A fresh server has only the scripts it ran: the first renewal finds no extend script. The
/// watchdog sends it with its source and renews in the same tick; that is no failed renewal, and nothing is
/// logged. It logged "lease renewal failed" at WARN, although the lease was kept. On a server
/// with `SET .. IFEQ` (the matrix's Valkey leg) the renewals go as that command, after the
/// client read the server's commands: no script to load, and no warning either.
#[tokio::test]
async fn the_first_renewal_on_a_fresh_server_loads_the_script_without_a_warning() {
    let server = RedisServer::start();
    let (warnings, _guard) = Warnings::capture();
    let locks = client(&server).await;
    let ttl = Duration::from_millis(300);
    let g = locks
        .lock("fresh")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("free");
    let calls = renewals_run(&server);
    // Several renewal periods (ttl/3 each).
    tokio::time::sleep(2 * ttl).await;
    assert!(g.is_held());
    assert!(renewals_run(&server) >= calls + 2, "renewed");
    if !has_set_ifeq(&server) {
        // The renewal that found no script was sent again with the script's source.
        let evals = server.commandstats().get("eval").copied();
        assert!(evals >= Some(1), "the server lacked the script: {evals:?}");
    }
    assert_eq!(warnings.all(), Vec::<String>::new());
    g.release().await.expect("release");
}
