//! Many held locks under the watchdog: S6 (10,000 on the single node), S6b (100,000 on the
//! single node) and S6q (20,000 on a 3-node quorum, the first three of S4's five nodes). One
//! fresh distlock `Client` takes the locks (ttl `S6_TTL`, watchdog on, as users get it) from
//! `TASKS` tasks, holds them for the window while the process does nothing else, and measures
//! the watchdog's renewal traffic and the CPU it costs the client and the servers. Every guard
//! must still be held at the end; then all are released.
//!
//! Only distlock has a batched watchdog: the other columns are n/a (`Kind::no_watchdog`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use distlock_testkit::{cpu_time, own_cpu_time, RedisServer};

use crate::results::{absolute, row, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::{Metrics, S6_LOCKS, S6_TTL, WAIT};

/// Locks held in S6b and in S6q, and S6q's nodes.
pub const S6B_LOCKS: usize = 100_000;
pub const S6Q_LOCKS: usize = 20_000;
pub const S6Q_NODES: usize = 3;
/// Tasks that take (and release) the locks.
pub const TASKS: usize = 50;

/// A fresh client on `servers` (one: that node; more: a quorum of them).
pub async fn client(servers: &[&RedisServer]) -> Result<distlock::Client, String> {
    let connected = match servers {
        [one] => distlock::Client::connect(&one.url()).await,
        // Just-started nodes: the restart guard would keep them out for its 30 s delay.
        many => {
            distlock::Client::quorum_builder(many.iter().map(|s| s.url()))
                .restart_delay(Duration::ZERO)
                .connect()
                .await
        }
    };
    connected.map_err(|e| e.to_string())
}

/// `client` (fresh, on `servers`) takes `locks` distinct locks named after `key`, holds them
/// for `window`, checks every guard, and releases them all.
pub async fn hold_many(
    client: &distlock::Client,
    servers: &[&RedisServer],
    key: &str,
    locks: usize,
    window: Duration,
) -> Result<Metrics, String> {
    let started = Instant::now();
    let guards = take_locks(client, key, locks).await?;
    let per_task = locks.div_ceil(TASKS);
    let acquire_s = started.elapsed().as_secs_f64();

    let server_cpu = || servers.iter().map(|s| cpu_time(s.pid())).sum::<Duration>();
    // A renewal is one EVALSHA, or one SET where the server has `SET .. IFEQ`.
    let evalshas = || {
        servers
            .iter()
            .map(|s| {
                let stats = s.commandstats();
                calls(&stats, "evalsha") + calls(&stats, "set")
            })
            .sum::<u64>()
    };
    let (trips_before, evalsha_before) = (client.renewal_round_trips(), evalshas());
    let (cpu_before, server_cpu_before) = (own_cpu_time(), server_cpu());
    let window_started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = window_started.elapsed().as_secs_f64();
    let (cpu, servers_cpu) = (
        own_cpu_time() - cpu_before,
        server_cpu() - server_cpu_before,
    );
    let trips = (client.renewal_round_trips() - trips_before) as f64;
    // Nothing but renewals reaches the servers in the window: one command each, per node.
    let renewals = (evalshas() - evalsha_before) as f64;
    let held = guards.iter().filter(|g| g.is_held()).count();

    // Released from as many tasks as took them. A lease lost in the window shows in
    // `held_at_end` and here, as a figure, not as the run's error.
    let mut releases = tokio::task::JoinSet::new();
    let mut rest = guards;
    while !rest.is_empty() {
        let chunk: Vec<distlock::Guard> = rest.drain(..per_task.min(rest.len())).collect();
        releases.spawn(async move {
            let mut refused = 0usize;
            for guard in chunk {
                match guard.release().await {
                    Ok(()) => {}
                    Err(distlock::Error::NotOwner { .. }) => refused += 1,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok::<_, String>(refused)
        });
    }
    let mut not_owner = 0;
    while let Some(done) = releases.join_next().await {
        not_owner += done.map_err(|e| e.to_string())??;
    }

    let period = (S6_TTL / 3).as_secs_f64();
    let cpu_s = cpu.as_secs_f64();
    Ok(Metrics::from([
        ("held_at_end", held as f64),
        ("release_not_owner", not_owner as f64),
        ("acquire_s", acquire_s),
        ("round_trips_per_s", trips / elapsed),
        ("round_trips_per_period", trips / (elapsed / period)),
        ("renewals_per_s", renewals / elapsed),
        ("renewals_per_round_trip", renewals / trips.max(1.0)),
        ("client_cpu_pct", 100.0 * cpu_s / elapsed),
        (
            "client_cpu_us_per_lock_s",
            1e6 * cpu_s / elapsed / locks as f64,
        ),
        (
            "server_cpu_pct",
            100.0 * servers_cpu.as_secs_f64() / elapsed,
        ),
        (
            "server_cpu_us_per_renewal",
            1e6 * servers_cpu.as_secs_f64() / renewals.max(1.0),
        ),
    ]))
}

/// Calls of one command so far, from an `INFO commandstats` snapshot.
fn calls(stats: &BTreeMap<String, u64>, name: &str) -> u64 {
    stats.get(name).copied().unwrap_or(0)
}

/// The rows of S6b and S6q (S6's are in `report`), the same figures.
/// Takes `locks` distinct locks (`<key>:<i>`, ttl `S6_TTL`, watchdog on) from `TASKS` tasks.
pub async fn take_locks(
    client: &distlock::Client,
    key: &str,
    locks: usize,
) -> Result<Vec<distlock::Guard>, String> {
    let per_task = locks.div_ceil(TASKS);
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (client, key) = (client.clone(), key.to_owned());
            let names = (t * per_task)..((t + 1) * per_task).min(locks);
            tokio::spawn(async move {
                let mut guards = Vec::with_capacity(names.len());
                for i in names {
                    let guard = client
                        .lock(format!("{key}:{i}"))
                        .ttl(S6_TTL)
                        .wait(WAIT)
                        .acquire()
                        .await
                        .map_err(|e| e.to_string())?;
                    guards.push(guard);
                }
                Ok::<_, String>(guards)
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(locks);
    for task in tasks {
        guards.extend(task.await.map_err(|e| e.to_string())??);
    }
    Ok(guards)
}

pub const ROWS: &[RowSpec] = &[
    row(
        "S6b",
        "locks still held at the end (of 100,000)",
        "held_at_end",
        Fmt::Count,
    ),
    row(
        "S6b",
        "releases refused (lease lost; the most in any round)",
        "release_not_owner",
        Fmt::Count,
    ),
    row(
        "S6b",
        "renewal round trips / renewal period (1 s)",
        "round_trips_per_period",
        Fmt::Ratio,
    ),
    row("S6b", "renewals / s", "renewals_per_s", Fmt::Rate),
    row(
        "S6b",
        "renewals / round trip",
        "renewals_per_round_trip",
        Fmt::Rate,
    ),
    row(
        "S6b",
        "client CPU, % of one core",
        "client_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6b",
        "client CPU µs / held lock / s",
        "client_cpu_us_per_lock_s",
        Fmt::Ratio,
    ),
    row(
        "S6b",
        "redis-server CPU, % of one core",
        "server_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6b",
        "redis-server CPU µs / renewal",
        "server_cpu_us_per_renewal",
        Fmt::Ratio,
    ),
    row(
        "S6b",
        "time to take the 100,000 locks, s",
        "acquire_s",
        Fmt::Ratio,
    ),
    row(
        "S6q",
        "locks still held at the end (of 20,000)",
        "held_at_end",
        Fmt::Count,
    ),
    row(
        "S6q",
        "releases refused (lease lost; the most in any round)",
        "release_not_owner",
        Fmt::Count,
    ),
    row(
        "S6q",
        "renewal round trips / renewal period (1 s), all 3 nodes",
        "round_trips_per_period",
        Fmt::Ratio,
    ),
    row(
        "S6q",
        "renewals / s (all 3 nodes)",
        "renewals_per_s",
        Fmt::Rate,
    ),
    row(
        "S6q",
        "renewals / round trip",
        "renewals_per_round_trip",
        Fmt::Rate,
    ),
    row(
        "S6q",
        "client CPU, % of one core",
        "client_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6q",
        "client CPU µs / held lock / s",
        "client_cpu_us_per_lock_s",
        Fmt::Ratio,
    ),
    row(
        "S6q",
        "redis-server CPU, % of one core (3 nodes together)",
        "server_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6q",
        "time to take the 20,000 locks, s",
        "acquire_s",
        Fmt::Ratio,
    ),
];

pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S6b",
        metric: "held_at_end",
        goal: "= 100,000",
        source: Source::Correctness,
        every_column: false,
        judge: |r, k| absolute(r, k, "S6b", "held_at_end", |v| v == S6B_LOCKS as f64),
        ahead: None,
    },
    TargetSpec {
        scenario: "S6q",
        metric: "held_at_end",
        goal: "= 20,000",
        source: Source::Correctness,
        every_column: false,
        judge: |r, k| absolute(r, k, "S6q", "held_at_end", |v| v == S6Q_LOCKS as f64),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S6b/S6q: S6 at scale: 100,000 locks on the single node (S6b) and 20,000 on a 3-node quorum (S6q: `Client::quorum_builder` on the first 3 of S4's 5 nodes, `restart_delay(0)`), taken from 50 tasks by a fresh `Client`, ttl 3 s, watchdog at its default period (1 s), held for the window, every guard checked with `Guard::is_held` (the fewest held in any round is shown), then released (a release refused as not the owner, its lease lost, is counted; the most in any round is shown). Round trips: `Client::renewal_round_trips()` over the window (renewal pipelines, every node's); renewals: EVALSHA calls (SET calls where the server renews natively: Valkey 8.1+) of all the scenario's servers over the window, and the servers' CPU per renewal; client CPU: getrusage(RUSAGE_SELF) user+sys over the window, also per held lock per second (µs of CPU); redis-server CPU: the servers' utime+stime summed, % of one core.",
];

/// S6: one fresh distlock `Client` takes `S6_LOCKS` distinct locks and holds them for
/// `window` under the watchdog (see `held`, which S6b and S6q share).
pub async fn held_locks(
    server: &RedisServer,
    key: &str,
    window: Duration,
) -> Result<Metrics, String> {
    let client = client(&[server]).await?;
    hold_many(&client, &[server], key, S6_LOCKS, window).await
}
