//! `bench`: distlock against rslock, redlock, distributed-lock-redis and the bare redis-rs
//! minimum (`limit`), on redis-server processes of its own.
//!
//! ```text
//! cargo run --release -p distlock-bench -- [--quick] [--out DIR] [--only S1,S1c,...]
//! ```
//!
//! Every column runs in every round, interleaved (round → scenario → column), so machine
//! noise lands on all columns alike; the report gives medians across rounds.

mod chart;
mod child;
mod columns;
mod cost;
mod failover;
mod held;
mod herd;
mod memory;
mod report;
mod rwmix;
mod s3x;
mod scenarios;
mod semaphore;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock_testkit::{RedisCluster, RedisServer, RedisServers};

use columns::{Column, Kind};
use report::{ClusterMeta, Meta, Results};
use scenarios::{Entry, Plan, Scenario};

const USAGE: &str = "usage: bench [--quick] [--rounds N] [--out DIR] [--only IDS]
  --rounds N  rounds instead of the plan's (7; 3 with --quick)
  --out DIR   where bench.{md,json,svg} go (default: target/bench)
  --only IDS  run only these scenarios, comma-separated (e.g. S1,S1c,S2c); the MONITOR pass
              runs only with S3, the Redis Cluster starts only with S1c or S2c; S8 (leader
              failover) runs once after the rounds (about 2 minutes, 1 with --quick); S10 (herd)
              takes about 15 s a round, S6b, S6q and S11 about 10 s each, S12 about 6 s";

/// The Redis Cluster of S1c/S2c: 3 masters without replicas (nothing fails over in a
/// benchmark, so replicas would only add replication traffic to the masters).
const CLUSTER_MASTERS: usize = 3;
const CLUSTER_REPLICAS: usize = 0;
/// Longer than the kit's 1.5 s default: a master stalled by the loaded machine must not be
/// marked failed mid-round (without replicas nothing could take over its slots).
const CLUSTER_NODE_TIMEOUT_MS: u64 = 5_000;

/// Columns connected to one deployment; `Err` says why a column cannot run there.
type Columns = Vec<(Kind, Result<Arc<dyn Column>, String>)>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // One of S3x's two processes (see `s3x`): no servers, no report.
    if args.get(1).map(String::as_str) == Some(s3x::CHILD_FLAG) {
        return s3x::child(&args[2..]);
    }
    // S8's leader process (see `failover`).
    if args.get(1).map(String::as_str) == Some(failover::CHILD_FLAG) {
        return failover::child(&args[2..]);
    }
    // S10's holder and S11's lock-taker (see `herd`, `memory`).
    match args.get(1).map(String::as_str) {
        Some(herd::CHILD_FLAG) => return herd::child(&args[2..]),
        Some(herd::WAITERS_FLAG) => return herd::waiters_child(&args[2..]),
        Some(memory::CHILD_FLAG) => return memory::child(&args[2..]),
        _ => {}
    }
    let (quick, rounds, out, only) = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut plan = Plan::new(quick);
    plan.rounds = rounds.unwrap_or(plan.rounds);
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| only.as_ref().is_none_or(|only| only.contains(s)))
        .collect();
    // Servers start on this thread: the kit ties their lifetime to the spawning thread.
    let node = RedisServer::start();
    let nodes = RedisServers::start(5);
    let cluster = scenarios.iter().any(|s| s.cluster()).then(|| {
        let started = Instant::now();
        let cluster =
            RedisCluster::start_with(CLUSTER_MASTERS, CLUSTER_REPLICAS, CLUSTER_NODE_TIMEOUT_MS);
        let slots = SlotMap::read(&cluster);
        let start_s = started.elapsed().as_secs_f64();
        eprintln!("Redis Cluster formed in {start_s:.1} s");
        (cluster, slots, start_s)
    });
    let meta = Meta {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date_utc: utc_now(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        redis_server: info_field(&node.info("server"), "redis_version"),
        load_average_before: load_average(),
        load_average_after: String::new(),
        quick,
        plan: plan.clone(),
        columns: Kind::ALL.iter().map(|k| k.name()).collect(),
        notes: Kind::ALL
            .iter()
            .map(|k| (k.name(), k.note()))
            .collect::<BTreeMap<_, _>>(),
        scenarios: scenarios.iter().map(|s| s.id()).collect(),
        cluster: cluster.as_ref().map(|(_, _, start_s)| ClusterMeta {
            masters: CLUSTER_MASTERS,
            replicas_per_master: CLUSTER_REPLICAS,
            node_timeout_ms: CLUSTER_NODE_TIMEOUT_MS,
            start_s: *start_s,
            s2c_masters_min: None,
            notes: Kind::ALL
                .iter()
                .map(|k| (k.name(), k.cluster_note()))
                .collect(),
        }),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut results = Results::new(meta);
    let deployments = Deployments {
        node: &node,
        nodes: &nodes,
        cluster: cluster.as_ref().map(|(c, slots, _)| (c, slots)),
    };
    runtime.block_on(run_all(&plan, &scenarios, &deployments, &mut results));
    // Its servers go now, not after the report is written.
    drop(cluster);
    results.meta.load_average_after = load_average();
    results.finish();
    match results.write(&out) {
        Ok(markdown) => {
            println!("{markdown}");
            eprintln!("wrote {}/bench.{{md,json,svg}}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writing the report: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the command line asks for.
type Args = (bool, Option<usize>, PathBuf, Option<Vec<Scenario>>);

fn parse_args() -> Result<Args, String> {
    let (mut quick, mut rounds, mut out, mut only) =
        (false, None, PathBuf::from("target/bench"), None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--rounds" => {
                let n = args.next().ok_or("--rounds needs a number")?;
                match n.parse::<usize>() {
                    Ok(n) if n > 0 => rounds = Some(n),
                    _ => return Err(format!("--rounds needs a number above 0, not `{n}`")),
                }
            }
            "--out" => out = args.next().ok_or("--out needs a directory")?.into(),
            "--only" => {
                let ids = args.next().ok_or("--only needs scenario ids")?;
                let picked = ids
                    .split(',')
                    .map(|id| {
                        Scenario::ALL
                            .into_iter()
                            .find(|s| s.id().eq_ignore_ascii_case(id.trim()))
                            .ok_or_else(|| format!("unknown scenario `{id}`"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                only = Some(picked);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok((quick, rounds, out, only))
}

/// Where the scenarios run: the single node, the five quorum nodes, and the Redis Cluster
/// (when a cluster scenario is selected) with its slot map.
struct Deployments<'a> {
    node: &'a RedisServer,
    nodes: &'a RedisServers,
    cluster: Option<(&'a RedisCluster, &'a SlotMap)>,
}

/// Which master serves each slot, read once after the cluster formed (nothing fails over in
/// a benchmark): S2c checks that its keys spread over every master.
struct SlotMap {
    /// (first slot, last slot, master's port)
    ranges: Vec<(u16, u16, u16)>,
}

impl SlotMap {
    fn read(cluster: &RedisCluster) -> SlotMap {
        // `CLUSTER SLOTS`: [first, last, [ip, port, id, ...], replicas...] per range.
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut cluster.server(0).connection())
            .expect("CLUSTER SLOTS");
        let int = |v: &redis::Value| redis::from_redis_value_ref::<u16>(v).expect("a number");
        let ranges = slots
            .iter()
            .map(|range| {
                let master: Vec<redis::Value> =
                    redis::from_redis_value_ref(&range[2]).expect("the master's address");
                (int(&range[0]), int(&range[1]), int(&master[1]))
            })
            .collect();
        SlotMap { ranges }
    }

    /// The port of the master serving `key`.
    fn master(&self, key: &str) -> Option<u16> {
        let slot = RedisCluster::slot_of(key.as_bytes());
        self.ranges
            .iter()
            .find(|&&(first, last, _)| first <= slot && slot <= last)
            .map(|&(_, _, port)| port)
    }

    /// How many masters the S2c keys of a run on `key` by `kind` land on.
    fn s2c_masters(&self, kind: Kind, key: &str) -> usize {
        let masters: std::collections::BTreeSet<Option<u16>> = (0..scenarios::S2_TASKS)
            .map(|i| self.master(&kind.cluster_key(&scenarios::s2_key(key, i))))
            .collect();
        masters.len()
    }
}

async fn connect_all(urls: &[String]) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        columns.push((kind, kind.connect(urls).await));
    }
    columns
}

async fn connect_cluster(urls: &[String]) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        columns.push((kind, kind.connect_cluster(urls).await));
    }
    columns
}

async fn run_all(
    plan: &Plan,
    scenarios: &[Scenario],
    deployments: &Deployments<'_>,
    results: &mut Results,
) {
    let (node, nodes) = (deployments.node, deployments.nodes);
    let single = connect_all(&[node.url()]).await;
    let quorum = connect_all(&nodes.urls()).await;
    let cluster = match deployments.cluster {
        Some((cluster, _)) => connect_cluster(&cluster.urls()).await,
        None => Vec::new(),
    };
    let semaphores = if scenarios.contains(&Scenario::S7) {
        connect_semaphores(&node.url()).await
    } else {
        Vec::new()
    };
    let rwlocks = if scenarios.contains(&Scenario::S12) {
        rwmix::connect_all(&node.url()).await
    } else {
        Vec::new()
    };

    // Warm-up, not measured: connections opened, scripts loaded, code paths paged in.
    for (columns, cycles) in [
        (&single, plan.warmup_cycles),
        (&quorum, plan.warmup_cycles / 4),
        (&cluster, plan.warmup_cycles),
    ] {
        for (kind, column) in columns {
            if let Ok(column) = column {
                let key = format!("bench:warmup:{}", kind.name());
                for _ in 0..cycles {
                    let held = column.acquire(&key, Duration::from_secs(10)).await;
                    if let Err(e) = async { held?.release().await }.await {
                        eprintln!("warm-up of {}: {e}", kind.name());
                        break;
                    }
                }
            }
        }
    }

    for round in 0..plan.rounds {
        eprintln!("round {}/{}", round + 1, plan.rounds);
        match scenarios::ping_p50(&node.url(), plan.ping_count).await {
            Ok(us) => results.ping_p50_us.push(us),
            Err(e) => eprintln!("PING: {e}"),
        }
        results
            .spawn_blocking_p50_us
            .push(scenarios::spawn_blocking_p50(plan.ping_count).await);
        for &scenario in scenarios {
            if scenario == Scenario::S5 {
                annotated(plan, node, round, results).await;
                continue;
            }
            if scenario == Scenario::S6 {
                held_locks(plan, node, round, results).await;
                continue;
            }
            if scenario == Scenario::S3x {
                two_processes(plan, node, round, results).await;
                continue;
            }
            if scenario == Scenario::S7 {
                semaphore_round(plan, &semaphores, round, results).await;
                continue;
            }
            if scenario == Scenario::S12 {
                rwmix::round(&rwlocks, node, plan.s12_duration, round, results).await;
                continue;
            }
            if matches!(
                scenario,
                Scenario::S6b | Scenario::S6q | Scenario::S10 | Scenario::S11
            ) {
                at_scale(scenario, plan, deployments, &single, round, results).await;
                continue;
            }
            if scenario == Scenario::S8 {
                // Once, after the rounds: one column, and its 30 s ttl samples take minutes.
                continue;
            }
            let columns = if scenario.quorum() {
                &quorum
            } else if scenario.cluster() {
                &cluster
            } else {
                &single
            };
            let mut kinds = Vec::new();
            let mut entries = Vec::new();
            // Rotate the starting column so no column always runs first (or last).
            for i in 0..columns.len() {
                let (kind, column) = &columns[(i + round) % columns.len()];
                if let Some(why) = kind.skips(scenario) {
                    results.cell(scenario, *kind).na = Some(why.to_owned());
                    continue;
                }
                match column {
                    Ok(column) => {
                        let key = format!("bench:{}:{}:r{round}", scenario.id(), kind.name());
                        if let (Scenario::S2c, Some((_, slots))) = (scenario, deployments.cluster) {
                            let spread = slots.s2c_masters(*kind, &key);
                            if let Some(meta) = results.meta.cluster.as_mut() {
                                meta.s2c_masters_min =
                                    Some(meta.s2c_masters_min.map_or(spread, |m| m.min(spread)));
                            }
                            if spread < CLUSTER_MASTERS {
                                eprintln!(
                                    "S2c {}: keys on only {spread} of {CLUSTER_MASTERS} masters",
                                    kind.name()
                                );
                            }
                        }
                        kinds.push(*kind);
                        entries.push(Entry { column, key });
                    }
                    Err(reason) => results.cell(scenario, *kind).na = Some(reason.clone()),
                }
            }
            let started = Instant::now();
            let outcomes = scenarios::run_round(scenario, &entries, plan, node).await;
            eprintln!(
                "  {:<4} {:>6.2} s",
                scenario.id(),
                started.elapsed().as_secs_f64()
            );
            for (kind, outcome) in kinds.into_iter().zip(outcomes) {
                let cell = results.cell(scenario, kind);
                match outcome {
                    Ok(metrics) => cell.rounds.push(metrics),
                    Err(e) => {
                        eprintln!("{} {}: {e}", scenario.id(), kind.name());
                        cell.errors.push(e);
                    }
                }
            }
        }
    }

    if scenarios.contains(&Scenario::S8) {
        leader_failover(plan, node, results).await;
    }
    if !scenarios.contains(&Scenario::S3) {
        return;
    }
    eprintln!("MONITOR pass");
    for (kind, column) in &single {
        if kind.skips(Scenario::S3).is_some() {
            continue;
        }
        let cell = results.accounting.entry(kind.name()).or_default();
        match column {
            Err(reason) => cell.na = Some(reason.clone()),
            Ok(column) => {
                let key = format!("bench:monitor:{}", kind.name());
                match scenarios::count_requests(column, &key, plan.accounting_duration, node).await
                {
                    Ok(metrics) => cell.rounds.push(metrics),
                    Err(e) => cell.errors.push(e),
                }
            }
        }
    }
}

/// S5 for the column with lock attributes (distlock); the peers have none.
async fn annotated(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for kind in Kind::ALL {
        let cell = results.cell(Scenario::S5, kind);
        if let Some(why) = kind.skips(Scenario::S5) {
            cell.na = Some(why.to_owned());
            continue;
        }
        if kind != Kind::Distlock {
            cell.na = Some("no attribute macro".to_owned());
            continue;
        }
        let key = format!("bench:S5:{}:r{round}", kind.name());
        match scenarios::annotated(node, &key, plan.s1_cycles).await {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("S5 {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S5   {:>6.2} s", started.elapsed().as_secs_f64());
}

/// S6 for the columns that have a batched watchdog (distlock); the others are n/a with why.
async fn held_locks(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for kind in Kind::ALL {
        let cell = results.cell(Scenario::S6, kind);
        if let Some(reason) = kind.no_watchdog() {
            cell.na = Some(reason.to_owned());
            continue;
        }
        let key = format!("bench:S6:{}:r{round}", kind.name());
        match scenarios::held_locks(node, &key, plan.s6_window).await {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("S6 {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S6   {:>6.2} s", started.elapsed().as_secs_f64());
}

/// S3x: for each column in turn (the first one rotating per round), two child processes of
/// this binary contend on one key.
async fn two_processes(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for i in 0..Kind::ALL.len() {
        let kind = Kind::ALL[(i + round) % Kind::ALL.len()];
        if let Some(why) = kind.skips(Scenario::S3x) {
            results.cell(Scenario::S3x, kind).na = Some(why.to_owned());
            continue;
        }
        let key = format!("bench:S3x:{}:r{round}", kind.name());
        let (url, duration) = (node.url(), plan.s3x_duration);
        let run = tokio::task::spawn_blocking(move || s3x::run(kind, &url, &key, duration)).await;
        let cell = results.cell(Scenario::S3x, kind);
        match run.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("S3x {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S3x  {:>6.2} s", started.elapsed().as_secs_f64());
}

/// S7's semaphores on the single node, warmed up (not measured); `Err` says why a column
/// has none.
async fn connect_semaphores(url: &str) -> semaphore::Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        let column = match semaphore::skips(kind) {
            Some(why) => Err(why.to_owned()),
            None => semaphore::connect(kind, url).await,
        };
        if let Ok(permits) = &column {
            let name = format!("bench:S7:warmup:{}", kind.name());
            for _ in 0..20 {
                let held = permits.acquire(&name, Duration::from_secs(10)).await;
                if let Err(e) = async { held?.release().await }.await {
                    eprintln!("S7 warm-up of {}: {e}", kind.name());
                    break;
                }
            }
        }
        columns.push((kind, column));
    }
    columns
}

/// One round of S7 for the columns that have a semaphore, the first one rotating per round.
async fn semaphore_round(
    plan: &Plan,
    columns: &semaphore::Columns,
    round: usize,
    results: &mut Results,
) {
    let started = Instant::now();
    let (mut kinds, mut entries) = (Vec::new(), Vec::new());
    for i in 0..columns.len() {
        let (kind, column) = &columns[(i + round) % columns.len()];
        match column {
            Ok(permits) => {
                kinds.push(*kind);
                entries.push(semaphore::SemEntry {
                    permits,
                    name: format!("bench:S7:{}:r{round}", kind.name()),
                });
            }
            Err(why) => results.cell(Scenario::S7, *kind).na = Some(why.clone()),
        }
    }
    let outcomes = semaphore::round(&entries, plan.s7_duration).await;
    for (kind, outcome) in kinds.into_iter().zip(outcomes) {
        let cell = results.cell(Scenario::S7, kind);
        match outcome {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("S7 {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S7   {:>6.2} s", started.elapsed().as_secs_f64());
}

/// S8, once after the rounds: distlock's leader failover; the other columns have no election.
async fn leader_failover(plan: &Plan, node: &RedisServer, results: &mut Results) {
    eprintln!("S8 leader failover");
    let started = Instant::now();
    for kind in Kind::ALL {
        if let Some(why) = failover::skips(kind) {
            results.cell(Scenario::S8, kind).na = Some(why.to_owned());
            continue;
        }
        let run = failover::run(&node.url(), "bench:S8", plan.s8_samples).await;
        let cell = results.cell(Scenario::S8, kind);
        match run {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("S8 {}: {e}", kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!("  S8   {:>6.2} s", started.elapsed().as_secs_f64());
}

/// One round of S6b, S6q (`held`), S10 (`herd`) or S11 (`memory`) for the columns that
/// have it; the others are n/a with why.
async fn at_scale(
    scenario: Scenario,
    plan: &Plan,
    deployments: &Deployments<'_>,
    single: &Columns,
    round: usize,
    results: &mut Results,
) {
    let started = Instant::now();
    let node = deployments.node;
    for (kind, column) in single {
        let why = match scenario {
            Scenario::S10 => herd::skips(*kind),
            Scenario::S11 => memory::skips(*kind),
            _ => kind.no_watchdog(),
        };
        if let Some(why) = why {
            results.cell(scenario, *kind).na = Some(why.to_owned());
            continue;
        }
        let key = format!("bench:{}:{}:r{round}", scenario.id(), kind.name());
        let run = match (scenario, column) {
            (_, Err(why)) => Err(why.clone()),
            (Scenario::S10, Ok(column)) => herd::run(*kind, column, node, &key).await,
            (Scenario::S11, Ok(_)) => memory::run(node, &key).await,
            (Scenario::S6q, Ok(_)) => {
                let nodes: Vec<&RedisServer> =
                    deployments.nodes.iter().take(held::S6Q_NODES).collect();
                match held::client(&nodes).await {
                    Ok(client) => {
                        held::hold_many(&client, &nodes, &key, held::S6Q_LOCKS, plan.s6_window)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            (_, Ok(_)) => match held::client(&[node]).await {
                Ok(client) => {
                    held::hold_many(&client, &[node], &key, held::S6B_LOCKS, plan.s6_window).await
                }
                Err(e) => Err(e),
            },
        };
        let cell = results.cell(scenario, *kind);
        match run {
            Ok(metrics) => cell.rounds.push(metrics),
            Err(e) => {
                eprintln!("{} {}: {e}", scenario.id(), kind.name());
                cell.errors.push(e);
            }
        }
    }
    eprintln!(
        "  {:<4} {:>6.2} s",
        scenario.id(),
        started.elapsed().as_secs_f64()
    );
}

/// The 1, 5 and 15 minute load averages: other work on the machine shows up here.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or("unknown")
        .trim()
        .to_owned()
}

/// `YYYY-MM-DD HH:MM:SS UTC` without a date crate (days-to-civil, H. Hinnant's algorithm).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}
