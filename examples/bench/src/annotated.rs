//! S5: a fn with the lock attribute against the same lock taken by hand, on one client.

use std::time::Instant;

use distlock_testkit::RedisServer;

use crate::scenarios::{micros, percentile, Metrics, SLICE_CYCLES, WAIT};

/// The lock S5 takes through the attribute: the same settings as the hand-written cycle
/// (ttl 10 s, wait 10 s, the watchdog at its default period), an empty body.
#[distlock::distributed_lock(key = "<key>", client = client, ttl = "10s", wait = "10s")]
async fn annotated_cycle(client: &distlock::Client, key: &str) -> Result<(), distlock::Error> {
    Ok(())
}

/// S5: sequential cycles of the annotated fn and of the same lock taken by hand, taking
/// turns of `SLICE_CYCLES` on one client: p50/p99 of each, and their ratio in this round.
pub async fn run(server: &RedisServer, key: &str, cycles: usize) -> Result<Metrics, String> {
    let client = distlock::Client::connect(&server.url())
        .await
        .map_err(|e| e.to_string())?;
    let by_hand_key = format!("{key}:hand");
    let mut annotated = Vec::with_capacity(cycles);
    let mut by_hand = Vec::with_capacity(cycles);
    for start in (0..cycles).step_by(SLICE_CYCLES) {
        for _ in start..(start + SLICE_CYCLES).min(cycles) {
            let started = Instant::now();
            annotated_cycle(&client, key)
                .await
                .map_err(|e| e.to_string())?;
            annotated.push(started.elapsed());
        }
        for _ in start..(start + SLICE_CYCLES).min(cycles) {
            let started = Instant::now();
            let guard = client
                .lock(&by_hand_key)
                .ttl(crate::columns::TTL)
                .wait(WAIT)
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            guard.release().await.map_err(|e| e.to_string())?;
            by_hand.push(started.elapsed());
        }
    }
    annotated.sort_unstable();
    by_hand.sort_unstable();
    let (a50, h50) = (percentile(&annotated, 0.50), percentile(&by_hand, 0.50));
    Ok(Metrics::from([
        ("annotated_p50_us", micros(a50)),
        ("annotated_p99_us", micros(percentile(&annotated, 0.99))),
        ("by_hand_p50_us", micros(h50)),
        ("by_hand_p99_us", micros(percentile(&by_hand, 0.99))),
        ("ratio_p50", a50.as_secs_f64() / h50.as_secs_f64()),
    ]))
}
