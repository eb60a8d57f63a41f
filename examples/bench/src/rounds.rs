//! The rounds: every round runs every selected scenario for every column, interleaved
//! (round → scenario → column), the starting column rotating per round; S8 and the MONITOR
//! pass run once after the rounds.

use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

use crate::columns::Kind;
use crate::deployments::{connect_all, connect_cluster, Deployments, CLUSTER_MASTERS};
use crate::own_rounds::{
    annotated, at_scale, connect_semaphores, held_locks, leader_failover, semaphore_round,
    two_processes,
};
use crate::results::Results;
use crate::scenarios::{self, Entry, Metrics, Plan, Scenario};
use crate::{contended, fenced_writes, rwmix, uncontended};

pub async fn run_all(
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
    let mut fenced_stores = if scenarios.contains(&Scenario::S13) {
        Some(fenced_writes::connect(node, deployments.postgres).await)
    } else {
        None
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
            if scenario == Scenario::S13 {
                match &mut fenced_stores {
                    Some(Ok(stores)) => {
                        fenced_writes::round(stores, plan.s1_cycles, round, results).await
                    }
                    Some(Err(e)) => {
                        for kind in [Kind::DistlockFenced, Kind::Limit] {
                            results.cell(scenario, kind).errors.push(e.clone());
                        }
                    }
                    None => {}
                }
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
                if let Some(why) = scenario.skips(*kind) {
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
            let outcomes = run_round(scenario, &entries, plan, node).await;
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
        if Scenario::S3.skips(*kind).is_some() {
            continue;
        }
        let cell = results.accounting.entry(kind.name()).or_default();
        match column {
            Err(reason) => cell.na = Some(reason.clone()),
            Ok(column) => {
                let key = format!("bench:monitor:{}", kind.name());
                match contended::count_requests(column, &key, plan.accounting_duration, node).await
                {
                    Ok(metrics) => cell.rounds.push(metrics),
                    Err(e) => cell.errors.push(e),
                }
            }
        }
    }
}

/// One round of `scenario` for all `entries`, in their order; results in the same order.
async fn run_round(
    scenario: Scenario,
    entries: &[Entry<'_>],
    plan: &Plan,
    server: &RedisServer,
) -> Vec<Result<Metrics, String>> {
    match scenario {
        // The cost rows only where every column's server is the single node.
        Scenario::S1 => uncontended::latency(entries, plan.s1_cycles, Some(server.url())).await,
        Scenario::S1c => uncontended::latency(entries, plan.s1_cycles, None).await,
        Scenario::S4 => uncontended::latency(entries, plan.s4_cycles, None).await,
        Scenario::S2 => {
            uncontended::throughput(entries, plan.s2_duration, Some(server.url())).await
        }
        Scenario::S2c => uncontended::throughput(entries, plan.s2c_duration, None).await,
        // Only distlock has a batched watchdog and the attributes, and S3x runs in processes
        // of its own; `rounds` runs them on their own (`annotated`, `held_locks`,
        // `two_processes`).
        Scenario::S3x
        | Scenario::S5
        | Scenario::S6
        | Scenario::S7
        | Scenario::S8
        | Scenario::S6b
        | Scenario::S6q
        | Scenario::S10
        | Scenario::S11
        | Scenario::S12
        | Scenario::S13 => entries
            .iter()
            .map(|_| Err("S3x and S5 to S13 run on their own".to_owned()))
            .collect(),
        // Whole runs: fairness and hand-off need one long stretch of contention.
        Scenario::S3 | Scenario::S3b => {
            let hold = if scenario == Scenario::S3 {
                scenarios::S3_HOLD
            } else {
                scenarios::S3B_HOLD
            };
            contended::round(entries, hold, plan.s3_duration, server).await
        }
    }
}
