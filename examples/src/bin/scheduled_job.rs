//! A job that every instance of a service starts on its own timer, run by exactly one of them
//! per period (ShedLock's use case, seed 003's "lottery").
//!
//! Each instance calls `nightly_report()` when its timer fires. The first to get there runs
//! it; `min_hold` keeps the lock for the whole period even though the run takes a moment, so
//! an instance whose timer fires a little later skips instead of running the job again.
//! The fn returns nothing: a busy lock skips the call and lock errors are logged
//! (`on_error = "log"`), so no `Result` is needed.
//!
//! `scheduled_job <redis-url> <period>` runs one instance for one timer tick, prints `ran` or
//! `skipped`, and counts the runs of that period in Redis (`runs:<period>`), which the test
//! (examples/tests/scheduled_job.rs) reads after starting three instances at once:
//!
//! ```text
//! cargo run -p distlock-examples --bin scheduled_job -- redis://127.0.0.1:6379 2026-11-22
//! ```

use std::time::Duration;

use distlock::{distributed_lock, Client};
use redis::AsyncCommands;

/// Once per period across every instance. `wait = "0s"`: an instance that finds the lock
/// taken does not queue for it, it just skips this period. A `min_hold` above the ttl (the
/// usual shape: a short lease renewed by the watchdog, a period of minutes) is exact: the
/// lease is extended to it when the body returns, so it holds even after this process exits.
#[distributed_lock(
    key = "job:nightly-report",
    ttl = "2s",
    wait = "0s",
    min_hold = "3s",
    on_busy = "skip",
    on_error = "log"
)]
async fn nightly_report(redis_url: &str, period: &str) -> bool {
    // The job itself: here it counts its runs so the test can check there was exactly one.
    let client = redis::Client::open(redis_url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: i64 = conn.incr(format!("runs:{period}"), 1).await.expect("INCR");
    tokio::time::sleep(Duration::from_millis(100)).await;
    true
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(period)) = (args.next(), args.next()) else {
        eprintln!("usage: scheduled_job <redis-url> <period>");
        std::process::exit(2);
    };
    let locks = Client::connect(&url).await.unwrap_or_else(|e| {
        eprintln!("scheduled_job: {e}");
        std::process::exit(1);
    });
    distlock::set_default(locks).expect("the first default client");
    let ran = nightly_report(&url, &period).await;
    println!("{}", if ran { "ran" } else { "skipped" });
}
