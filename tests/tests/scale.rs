//! Many locks and many waiters: held leases survive their renewals however many there are,
//! and a crowd of waiters costs the server no burst.
//!
//! The tests marked `#[ignore]` are the scale tier, too long for `tests/run.sh` (`.ci/run`
//! runs them): `cargo test --test scale -- --ignored --test-threads 1 --nocapture`.

mod common;

use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};

use distlock::{Client, Guard};
use distlock_testkit::{own_cpu_time, RedisServer, RedisServers};

/// Acquisitions in flight at once while taking many locks.
const TAKING_AT_ONCE: usize = 256;

/// Takes `n` free locks named `<prefix>:<i>`, each with `ttl`.
async fn hold_many(locks: &Client, prefix: &str, n: usize, ttl: Duration) -> Vec<Guard> {
    stream::iter(0..n)
        .map(|i| {
            let locks = locks.clone();
            let name = format!("{prefix}:{i}");
            async move {
                locks
                    .lock(name)
                    .ttl(ttl)
                    .try_acquire()
                    .await
                    .expect("a free lock")
            }
        })
        .buffer_unordered(TAKING_AT_ONCE)
        .collect()
        .await
}

/// What holding many locks cost while they were held.
struct Held {
    lost: usize,
    round_trips: u64,
    cpu: Duration,
}

/// Holds `guards` for `hold`, then reports how many leases were lost meanwhile (a guard that
/// no longer says held), the renewal round trips sent and the client's CPU time.
async fn keep(locks: &Client, guards: &[Guard], hold: Duration) -> Held {
    let (trips, cpu) = (locks.renewal_round_trips(), own_cpu_time());
    tokio::time::sleep(hold).await;
    Held {
        lost: guards.iter().filter(|g| !g.is_held()).count(),
        round_trips: locks.renewal_round_trips() - trips,
        cpu: own_cpu_time() - cpu,
    }
}

/// Takes `n` locks with `ttl` and holds them for `hold`; prints what that cost and asserts
/// that no lease was lost.
async fn hold_and_report(locks: &Client, what: &str, n: usize, ttl: Duration, hold: Duration) {
    let taking = Instant::now();
    let guards = hold_many(locks, what, n, ttl).await;
    let taken = taking.elapsed();
    let held = keep(locks, &guards, hold).await;
    let periods = hold.as_secs_f64() / (ttl / 3).as_secs_f64();
    println!(
        "{what}: {n} locks taken in {taken:.1?}, held {hold:?} (ttl {ttl:?}): {} lost; \
         {} renewal round trips ({:.1} per renewal period), client CPU {:.2?} ({:.1} % of a core)",
        held.lost,
        held.round_trips,
        held.round_trips as f64 / periods,
        held.cpu,
        100.0 * held.cpu.as_secs_f64() / hold.as_secs_f64(),
    );
    assert_eq!(held.lost, 0, "{what}: leases lost out of {n}");
}

async fn quorum(nodes: &RedisServers) -> Client {
    Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect to the quorum")
}

/// 20,000 leases on a 3-node quorum, with the default 100 ms node timeout, outlive their
/// first renewals. Each node's whole batch had to answer within the node timeout: every lease
/// was lost at the first renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_leases_on_a_quorum_survive_their_renewals() {
    let nodes = RedisServers::start(3);
    let locks = quorum(&nodes).await;
    let ttl = Duration::from_secs(6);
    // Past the first lease: every one renewed at least once, or lost.
    hold_and_report(&locks, "quorum", 20_000, ttl, ttl + ttl / 2).await;
}

/// The scale tier: 20,000 leases on a 3-node quorum held 20 s with no lease lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale tier: cargo test --test scale -- --ignored --test-threads 1"]
async fn scale_twenty_thousand_leases_on_a_quorum_held_20s() {
    let nodes = RedisServers::start(3);
    let locks = quorum(&nodes).await;
    let ttl = Duration::from_secs(6);
    hold_and_report(&locks, "quorum", 20_000, ttl, Duration::from_secs(20)).await;
}

/// The scale tier: 100,000 leases on one node held 20 s with no lease lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale tier: cargo test --test scale -- --ignored --test-threads 1"]
async fn scale_a_hundred_thousand_leases_on_one_node_held_20s() {
    let server = RedisServer::start();
    let locks = Client::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(6);
    hold_and_report(&locks, "single", 100_000, ttl, Duration::from_secs(20)).await;
}
