//! A job that every instance of a service runs on its own timer, and exactly one of them runs
//! per period (ShedLock's use case). Start it twice: one instance runs each report, the other
//! skips it. Stops on Ctrl-C.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --example scheduled_job
//! ```

use std::time::Duration;

use distlock::{distributed_lock, Client};

/// Every instance's timer fires once a minute.
const PERIOD: Duration = Duration::from_secs(60);

/// The report, once per period across all instances:
/// - `wait = "0s"` + `on_busy = "skip"`: an instance that finds the lock taken does not queue,
///   it skips this period (the call returns `false`, `bool::default()`);
/// - `min_hold = "50s"`: the lock stays taken for most of the period even though the report
///   takes a moment, so an instance whose timer fires a few seconds later skips too;
/// - `on_error = "log"`: a lock error (Redis down) is logged, and the call returns `false`.
#[distributed_lock(
    key = "job:daily-report",
    ttl = "10s",
    wait = "0s",
    min_hold = "50s",
    on_busy = "skip",
    on_error = "log"
)]
async fn report() -> bool {
    // ... the job ...
    tokio::time::sleep(Duration::from_millis(200)).await;
    true
}

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locks = Client::connect(&url).await?;
    // The client the attribute uses when it names none.
    distlock::set_default(locks).expect("the first default client");

    let mut timer = tokio::time::interval(PERIOD);
    // One Ctrl-C listener for the whole loop, polled first: a Ctrl-C during a report is
    // seen once it returns.
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => {
                println!("stopping");
                return Ok(());
            }
            _ = timer.tick() => {
                let ran = report().await;
                println!("{}", if ran { "ran the report" } else { "skipped: another instance has it" });
            }
        }
    }
}
