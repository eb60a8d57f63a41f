//! `key = [..]`: several names at once, with placeholders, fields, hash tags, a quorum and every
//! argument an exclusive lock takes.
use std::time::Duration;

use distlock::{distributed_lock, Client};

#[derive(Debug)]
#[allow(dead_code)]
enum AppError {
    Lock(distlock::Error),
    Insufficient,
}

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        AppError::Lock(error)
    }
}

struct Transfer {
    from: u64,
    to: u64,
    amount: u64,
}

/// The classic transfer: both accounts, or neither.
#[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "10s")]
async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, AppError> {
    if amount == 0 {
        return Err(AppError::Insufficient);
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(from + to + amount)
}

#[distributed_lock(
    key = ["ledger:{<t.from>}", "ledger:{<t.to>}", "audit"],
    ttl = "1m",
    wait = "0s",
    watchdog = "5s",
    on_busy = "skip",
    on_lost = "continue",
    max_hold = "10m",
    fencing = true,
    record_name = true,
    client = locks,
)]
async fn post(locks: &Client, t: &Transfer) -> Result<Option<u64>, AppError> {
    let lease = distlock::lease().expect("inside a locked fn");
    Ok(lease.fencing_token().map(|token| token.get() + t.amount))
}

#[distributed_lock(key = ["payout:<id>", "payout:all"], mode = "redlock", watchdog = false, ttl = "5s")]
async fn payout(id: u64) -> Result<(), distlock::Error> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = ["only:<id>"], on_error = "log")]
async fn one_name(id: u64) {
    let _ = id;
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    // Building the futures proves they type-check and are `Send`; nothing runs.
    assert_send(&transfer(1, 2, 3));
    let t = Transfer {
        from: 1,
        to: 2,
        amount: 3,
    };
    let locks: Option<Client> = None;
    if let Some(locks) = &locks {
        assert_send(&post(locks, &t));
    }
    assert_send(&payout(1));
    assert_send(&one_name(1));
}
