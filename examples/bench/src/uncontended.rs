//! S1, S2 and S4 (and S1c, S2c on the cluster): uncontended cycles, every column taking short
//! turns in an order drawn afresh every pass. S1 and S4: one task's sequential cycles, p50 and
//! p99; S2: 32 tasks on distinct keys, cycles/s. With the single node's URL the cost rows too
//! (`cost`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cost::Ledger;
use crate::scenarios::{
    micros, percentile, Entry, Metrics, TurnOrder, S2_SLICE, S2_TASKS, SLICE_CYCLES, WAIT,
};

/// Sequential acquire+release cycles, the columns taking turns of `SLICE_CYCLES`: p50/p99
/// per cycle, and with `metered` (the server's URL) the cost rows (`cost`).
pub async fn latency(
    entries: &[Entry<'_>],
    cycles: usize,
    metered: Option<String>,
) -> Vec<Result<Metrics, String>> {
    let mut samples: Vec<Result<Vec<Duration>, String>> = entries
        .iter()
        .map(|_| Ok(Vec::with_capacity(cycles)))
        .collect();
    let mut ledger = Ledger::new(metered, entries.len()).await;
    let mut order = TurnOrder::new(entries.len());
    for start in (0..cycles).step_by(SLICE_CYCLES) {
        let turn = SLICE_CYCLES.min(cycles - start);
        for i in order.next_pass() {
            let (entry, samples) = (&entries[i], &mut samples[i]);
            let failed = match samples {
                Ok(done) => {
                    ledger.start().await;
                    let run = sequential(entry, turn, done).await;
                    ledger.stop(i).await;
                    run.err()
                }
                Err(_) => None,
            };
            if let Some(e) = failed {
                *samples = Err(e);
            }
        }
    }
    samples
        .into_iter()
        .enumerate()
        .map(|(i, samples)| {
            let mut samples = samples?;
            samples.sort_unstable();
            let mut metrics = Metrics::from([
                ("p50_us", micros(percentile(&samples, 0.50))),
                ("p99_us", micros(percentile(&samples, 0.99))),
            ]);
            ledger.per_cycle(i, samples.len() as u64, &mut metrics);
            Ok(metrics)
        })
        .collect()
}

async fn sequential(
    entry: &Entry<'_>,
    cycles: usize,
    samples: &mut Vec<Duration>,
) -> Result<(), String> {
    for _ in 0..cycles {
        let started = Instant::now();
        entry
            .column
            .acquire(&entry.key, WAIT)
            .await?
            .release()
            .await?;
        samples.push(started.elapsed());
    }
    Ok(())
}

/// 32 tasks per column, each cycling on its own key, the columns taking turns of `S2_SLICE`:
/// all cycles over all the time the column's turns took, and with `metered` (the server's
/// URL) the cost rows (`cost`).
pub async fn throughput(
    entries: &[Entry<'_>],
    duration: Duration,
    metered: Option<String>,
) -> Vec<Result<Metrics, String>> {
    let turns = (duration.as_secs_f64() / S2_SLICE.as_secs_f64())
        .round()
        .max(1.0) as usize;
    let mut totals: Vec<Result<(u64, Duration), String>> =
        entries.iter().map(|_| Ok((0, Duration::ZERO))).collect();
    let mut ledger = Ledger::new(metered, entries.len()).await;
    let mut order = TurnOrder::new(entries.len());
    for _ in 0..turns {
        for i in order.next_pass() {
            let (entry, total) = (&entries[i], &mut totals[i]);
            let failed = match total {
                Ok((cycles, elapsed)) => {
                    ledger.start().await;
                    let run = distinct_keys(entry, S2_SLICE).await;
                    ledger.stop(i).await;
                    match run {
                        Ok((c, e)) => {
                            *cycles += c;
                            *elapsed += e;
                            None
                        }
                        Err(e) => Some(e),
                    }
                }
                Err(_) => None,
            };
            if let Some(e) = failed {
                *total = Err(e);
            }
        }
    }
    totals
        .into_iter()
        .enumerate()
        .map(|(i, total)| {
            let (cycles, elapsed) = total?;
            let mut metrics =
                Metrics::from([("cycles_per_s", cycles as f64 / elapsed.as_secs_f64())]);
            ledger.per_cycle(i, cycles, &mut metrics);
            Ok(metrics)
        })
        .collect()
}

/// One turn of S2: cycles done, and the time until the last task finished (cycles that ran
/// past the turn's end are counted, so their time is too).
async fn distinct_keys(entry: &Entry<'_>, duration: Duration) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..S2_TASKS)
        .map(|i| {
            let column = Arc::clone(entry.column);
            let key = s2_key(&entry.key, i);
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while Instant::now() < deadline {
                    column.acquire(&key, WAIT).await?.release().await?;
                    cycles += 1;
                }
                Ok::<_, String>(cycles)
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.map_err(|e| e.to_string())??;
    }
    Ok((total, started.elapsed()))
}

/// The key of S2's (and S2c's) task `i` in a run on `key`.
pub fn s2_key(key: &str, i: usize) -> String {
    format!("{key}:{i}")
}
