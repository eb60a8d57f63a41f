//! Many locks and many waiters: held leases survive their renewals however many there are,
//! and a crowd of waiters costs the server no burst.
//!
//! The tests marked `#[ignore]` are the scale tier, too long for every run:
//! `cargo test --release --test scale -- --ignored --nocapture` (see tests/README.md).

mod common;

use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};

use distlock::{Client, Guard};
use distlock_testkit::{own_cpu_time, RedisServers};

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
    let taking = Instant::now();
    let guards = hold_many(&locks, "q", 20_000, ttl).await;
    println!("20,000 quorum locks taken in {:?}", taking.elapsed());
    // Past the first lease: every one renewed at least once, or lost.
    let held = keep(&locks, &guards, ttl + ttl / 2).await;
    println!(
        "{} renewal round trips, client CPU {:?}",
        held.round_trips, held.cpu
    );
    assert_eq!(held.lost, 0, "leases lost out of 20,000");
}
