// Jobs without a `Result`: every lock outcome has somewhere to go (busy: skipped; errors:
// logged), so the fn may return `()` or any type with a default.
use distlock::distributed_lock;

#[distributed_lock(
    key = "daily-report",
    wait = "0s",
    min_hold = "5m",
    on_busy = "skip",
    on_error = "log"
)]
async fn daily_report() {}

#[distributed_lock(key = "count:<shard>", on_error = "log", record_name = true)]
async fn count(shard: u32) -> Option<u64> {
    Some(u64::from(shard))
}

#[distributed_lock(key = "rows", min_hold = "1s", on_busy = "skip")]
async fn rows() -> Result<Vec<u32>, distlock::Error> {
    Ok(vec![1])
}

fn main() {
    let _ = (daily_report(), count(1), rows());
}
