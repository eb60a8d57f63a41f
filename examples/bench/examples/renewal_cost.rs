//! The client's work per lease renewal, for profilers: holds N leases (setnx, one name each)
//! on one server or a quorum of servers, then has the watchdog renew every one of them R
//! times, a round at a time, each round started at once (`distlock::testing::end_lease` of a
//! name nobody holds: it ends nothing and makes the watchdog renew everything now) and
//! awaited until every lease's deadline moved. The leases' ttl (60 s) is long enough that no
//! renewal happens on its own, so a run renews exactly N x R leases whatever the machine's
//! speed, and instruction counts (callgrind) are repeatable; `renewal_cost.sh` runs it twice
//! with two round counts and divides the difference by the renewals it adds.
//!
//! ```sh
//! cargo build --release -p distlock-bench --example renewal_cost
//! target/release/examples/renewal_cost [--url URL].. [LEASES, default 10000] [ROUNDS, default 5] [NODES, default 1]
//! bash examples/bench/renewal_cost.sh   # instructions per renewal, debug and release
//! ```
//!
//! Without `--url`, it starts NODES servers of its own. Prints the renewal pipelines sent and
//! the process's CPU time per renewal (getrusage, noisy on a shared VM).

use std::time::{Duration, Instant};

use distlock_testkit::{own_cpu_time, RedisServer};

const TTL: Duration = Duration::from_secs(60);
/// Acquisitions in flight at once while the leases are taken.
const TAKING: usize = 64;
/// Every timeout of the client.
const SLOW: Duration = Duration::from_secs(10);
/// Rounds at least this far apart, so that a lease's deadline tells which one renewed it.
const GAP: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() {
    let mut urls = Vec::new();
    let mut positional = Vec::new();
    let mut raw = std::env::args().skip(1);
    while let Some(arg) = raw.next() {
        match arg.as_str() {
            "--url" => urls.extend(raw.next()),
            _ => positional.push(arg),
        }
    }
    let mut args = positional.into_iter();
    let leases: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let nodes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let servers: Vec<RedisServer> = if urls.is_empty() {
        (0..nodes).map(|_| RedisServer::start()).collect()
    } else {
        Vec::new()
    };
    urls.extend(servers.iter().map(RedisServer::url));
    // Timeouts that a run under valgrind (tens of times slower) does not reach.
    let builder = if urls.len() == 1 {
        distlock::Client::builder(&urls[0])
    } else {
        // The servers were just started: no restart to guard against.
        distlock::Client::quorum_builder(urls.iter().map(String::as_str))
            .restart_delay(Duration::ZERO)
            .node_timeout(SLOW)
    };
    let client = builder
        .connect_timeout(SLOW)
        .response_timeout(SLOW)
        .connect()
        .await
        .expect("connect");

    let mut guards = Vec::with_capacity(leases);
    for start in (0..leases).step_by(TAKING) {
        let taking = (start..leases.min(start + TAKING)).map(|i| {
            let client = &client;
            async move {
                client
                    .lock(format!("renewal-cost:{i}"))
                    .ttl(TTL)
                    .acquire()
                    .await
                    .expect("acquire")
            }
        });
        guards.extend(futures::future::join_all(taking).await);
    }
    // What a lease just granted or renewed has left: the ttl, less the quorum's drift
    // allowance (the most recent grant's, read closest to it).
    let span = guards.iter().map(|g| g.remaining()).max().unwrap_or(TTL);

    let (cpu, trips) = (own_cpu_time(), client.renewal_round_trips());
    for _ in 0..rounds {
        let round = Instant::now();
        distlock::testing::end_lease(&client, "renewal-cost:nobody")
            .await
            .expect("a renewal round");
        // Renewed in this round once its deadline lies past the middle between the previous
        // round's (at least GAP before) and this one's; the leases renewed last are the
        // latest acquired, so look at them first.
        let renewed = |g: &distlock::Guard| g.remaining() + round.elapsed() + GAP / 2 > span;
        while !guards.iter().rev().all(renewed) {
            // Each look may read thousands of deadlines (answers come out of order): not
            // often, or a slow run (valgrind) counts more looking than renewing.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(GAP).await;
    }
    let renewals = (leases * rounds) as f64;
    let cpu = own_cpu_time() - cpu;
    println!(
        "{leases} leases on {} node(s), {rounds} rounds: {} pipelines, {:.2} us CPU per renewal",
        urls.len(),
        client.renewal_round_trips() - trips,
        cpu.as_secs_f64() * 1e6 / renewals,
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}
