//! `bench`: distlock against rslock, redlock, distributed-lock-redis and the bare redis-rs
//! minimum (`limit`), on redis-server processes of its own.
//!
//! ```text
//! cargo run --release -p distlock-bench -- [--quick] [--out DIR] [--only S1,S1c,...]
//! ```
//!
//! Every column runs in every round, interleaved (round → scenario → column), so machine
//! noise lands on all columns alike; the report gives medians across rounds.

mod annotated;
mod chart;
mod child;
mod columns;
mod contended;
mod cost;
mod deployments;
mod failover;
mod fenced_writes;
mod held;
mod herd;
mod memory;
mod own_rounds;
mod report;
mod results;
mod rounds;
mod rwmix;
mod s3x;
mod scenarios;
mod semaphore;
mod uncontended;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use distlock_testkit::{PostgresServer, RedisCluster, RedisServer, RedisServers};

use columns::Kind;
use deployments::{
    Deployments, SlotMap, CLUSTER_MASTERS, CLUSTER_NODE_TIMEOUT_MS, CLUSTER_REPLICAS,
};
use results::{ClusterMeta, Meta, Results};
use scenarios::{Plan, Scenario};

const USAGE: &str = "usage: bench [--quick] [--rounds N] [--out DIR] [--only IDS] [--no-native]
  --rounds N  rounds instead of the plan's (7; 3 with --quick)
  --out DIR   where bench.{md,json,svg} go (default: target/bench)
  --no-native the single node's `COMMAND` renamed away, so that the client does not find the
              server's native `SET .. IFEQ` (Valkey 8.1+, Redis 8.4+) and renews setnx leases
              with the extend script: the same server with and without the native renewal
  --only IDS  run only these scenarios, comma-separated (e.g. S1,S1c,S2c); the MONITOR pass
              runs only with S3, the Redis Cluster starts only with S1c or S2c; S8 (leader
              failover) runs once after the rounds (about 2 minutes, 1 with --quick); S10 (herd)
              takes about 15 s a round, S6b, S6q and S11 about 10 s each, S12 about 6 s, S13
              (fenced writes; starts a PostgreSQL of its own) about 15 s";

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
    let Args {
        quick,
        rounds,
        out,
        only,
        no_native,
    } = match parse_args() {
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
    let node = if no_native {
        RedisServer::start_with(&["--rename-command", "COMMAND", "\"\""])
    } else {
        RedisServer::start()
    };
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
    // S13's private PostgreSQL, or why there is none (S13's PostgreSQL rows are n/a then).
    let postgres = scenarios
        .contains(&Scenario::S13)
        .then(|| PostgresServer::try_start_with(fenced_writes::POSTGRES_SETTINGS));
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
        postgres: postgres.as_ref(),
    };
    runtime.block_on(rounds::run_all(
        &plan,
        &scenarios,
        &deployments,
        &mut results,
    ));
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
struct Args {
    quick: bool,
    rounds: Option<usize>,
    out: PathBuf,
    only: Option<Vec<Scenario>>,
    no_native: bool,
}

fn parse_args() -> Result<Args, String> {
    let (mut quick, mut out, mut only) = (false, PathBuf::from("target/bench"), None);
    let (mut rounds, mut no_native) = (None, false);
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
            "--no-native" => no_native = true,
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
    Ok(Args {
        quick,
        rounds,
        out,
        only,
        no_native,
    })
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
