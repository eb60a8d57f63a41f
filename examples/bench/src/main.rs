//! `bench`: distlock against rslock, redlock, distributed-lock-redis and the bare redis-rs
//! minimum (`limit`), on redis-server processes of its own.
//!
//! ```text
//! cargo run --release -p distlock-bench -- [--quick] [--out DIR]
//! ```
//!
//! Every column runs in every round, interleaved (round → scenario → column), so machine
//! noise lands on all columns alike; the report gives medians across rounds.

mod chart;
mod columns;
mod report;
mod s3x;
mod scenarios;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock_testkit::{RedisServer, RedisServers};

use columns::{Column, Kind};
use report::{Meta, Results};
use scenarios::{Entry, Plan, Scenario};

const USAGE: &str = "usage: bench [--quick] [--out DIR]   (default DIR: target/bench)";

/// Columns connected to one deployment; `Err` says why a column cannot run there.
type Columns = Vec<(Kind, Result<Arc<dyn Column>, String>)>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // One of S3x's two processes (see `s3x`): no servers, no report.
    if args.get(1).map(String::as_str) == Some(s3x::CHILD_FLAG) {
        return s3x::child(&args[2..]);
    }
    let (quick, out) = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan::new(quick);
    // Servers start on this thread: the kit ties their lifetime to the spawning thread.
    let node = RedisServer::start();
    let nodes = RedisServers::start(5);
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
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut results = Results::new(meta);
    runtime.block_on(run_all(&plan, &node, &nodes, &mut results));
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

fn parse_args() -> Result<(bool, PathBuf), String> {
    let (mut quick, mut out) = (false, PathBuf::from("target/bench"));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--out" => out = args.next().ok_or("--out needs a directory")?.into(),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok((quick, out))
}

async fn connect_all(urls: &[String]) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        columns.push((kind, kind.connect(urls).await));
    }
    columns
}

async fn run_all(plan: &Plan, node: &RedisServer, nodes: &RedisServers, results: &mut Results) {
    let single = connect_all(&[node.url()]).await;
    let quorum = connect_all(&nodes.urls()).await;

    // Warm-up, not measured: connections opened, scripts loaded, code paths paged in.
    for (columns, cycles) in [
        (&single, plan.warmup_cycles),
        (&quorum, plan.warmup_cycles / 4),
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
        for scenario in Scenario::ALL {
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
            let columns = if scenario.quorum() { &quorum } else { &single };
            let mut kinds = Vec::new();
            let mut entries = Vec::new();
            // Rotate the starting column so no column always runs first (or last).
            for i in 0..columns.len() {
                let (kind, column) = &columns[(i + round) % columns.len()];
                match column {
                    Ok(column) => {
                        kinds.push(*kind);
                        entries.push(Entry {
                            column,
                            key: format!("bench:{}:{}:r{round}", scenario.id(), kind.name()),
                        });
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

    eprintln!("MONITOR pass");
    for (kind, column) in &single {
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
