//! The rounds of the scenarios that do not run every column alike: S5 and S6 (distlock only),
//! S3x (child processes), S7 (the semaphores), S8 (once, after the rounds), S6b, S6q, S10 and
//! S11 (at scale). Each sets the columns without the scenario to n/a, with why.

use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

use crate::columns::Kind;
use crate::deployments::{Columns, Deployments};
use crate::results::Results;
use crate::scenarios::{Plan, Scenario};
use crate::{annotated, failover, held, herd, memory, s3x, semaphore};

/// S5 for the column with lock attributes (distlock); the peers have none.
pub async fn annotated(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for kind in Kind::ALL {
        let cell = results.cell(Scenario::S5, kind);
        if let Some(why) = Scenario::S5.skips(kind) {
            cell.na = Some(why.to_owned());
            continue;
        }
        if kind != Kind::Distlock {
            cell.na = Some("no attribute macro".to_owned());
            continue;
        }
        let key = format!("bench:S5:{}:r{round}", kind.name());
        match annotated::run(node, &key, plan.s1_cycles).await {
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
pub async fn held_locks(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for kind in Kind::ALL {
        let cell = results.cell(Scenario::S6, kind);
        if let Some(reason) = kind.no_watchdog() {
            cell.na = Some(reason.to_owned());
            continue;
        }
        let key = format!("bench:S6:{}:r{round}", kind.name());
        match held::held_locks(node, &key, plan.s6_window).await {
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
pub async fn two_processes(plan: &Plan, node: &RedisServer, round: usize, results: &mut Results) {
    let started = Instant::now();
    for i in 0..Kind::ALL.len() {
        let kind = Kind::ALL[(i + round) % Kind::ALL.len()];
        if let Some(why) = Scenario::S3x.skips(kind) {
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
pub async fn connect_semaphores(url: &str) -> semaphore::Columns {
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
pub async fn semaphore_round(
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
pub async fn leader_failover(plan: &Plan, node: &RedisServer, results: &mut Results) {
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
pub async fn at_scale(
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
