//! Free fns: `?`, early `return`, the default client, a fixed key, every argument.
use std::time::Duration;

use distlock::{distributed_lock, read_lock, semaphore, write_lock};

#[derive(Debug)]
#[allow(dead_code)]
enum AppError {
    Lock(distlock::Error),
    Parse(std::num::ParseIntError),
}

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        AppError::Lock(error)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(error: std::num::ParseIntError) -> Self {
        AppError::Parse(error)
    }
}

type AppResult<T> = Result<T, AppError>;

#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s")]
async fn pay(id: u64, amount: &str) -> Result<u64, AppError> {
    if id == 0 {
        return Ok(0);
    }
    let amount: u64 = amount.parse()?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(id * amount)
}

#[distributed_lock(key = "nightly-report", wait = "0s", on_busy = "skip")]
async fn nightly_report() -> AppResult<()> {
    Ok(())
}

#[distributed_lock(
    key = "{tenant:<tenant>}:job:<job>",
    ttl = "1m",
    wait = "0s",
    mode = "reentrant",
    watchdog = "5s",
    on_busy = "skip",
    on_lost = "continue",
    max_hold = "10m",
    fencing = true,
    map_err = AppError::Lock,
)]
async fn job(tenant: &str, job: u32) -> Result<Option<u32>, AppError> {
    let lease = distlock::lease().expect("inside a locked fn");
    if !lease.is_held() {
        return Ok(None);
    }
    Ok(lease.fencing_token().map(|token| job + token.get() as u32))
}

#[distributed_lock(key = "payout:<id>", mode = "redlock", watchdog = false, ttl = "5s")]
async fn payout(id: u64) -> Result<(), distlock::Error> {
    let _ = id;
    Ok(())
}

#[read_lock(key = "doc:<id>")]
async fn show(id: u64) -> Result<String, AppError> {
    Ok(format!("doc {id}"))
}

#[write_lock(key = "doc:<id>", on_lost = "cancel")]
async fn edit(id: u64, text: String) -> Result<usize, AppError> {
    Ok(text.len() + id as usize)
}

#[semaphore(key = "export:<tenant>", permits = 4, ttl = "30s", wait = "10s")]
async fn export(tenant: &str) -> AppResult<usize> {
    Ok(tenant.len())
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    // Building the futures proves they type-check and are `Send`; nothing runs.
    assert_send(&pay(1, "2"));
    assert_send(&nightly_report());
    assert_send(&job("acme", 7));
    assert_send(&payout(1));
    assert_send(&show(1));
    assert_send(&edit(1, String::new()));
    assert_send(&export("acme"));
}
