use distlock::{distributed_lock, read_lock, semaphore};

struct MyError;

#[read_lock(key = ["account:<from>", "account:<to>"])]
async fn balances(from: u64, to: u64) -> Result<(), MyError> {
    let _ = (from, to);
    Ok(())
}

#[distributed_lock(key = ["account:<from>", "account:<to>"], mode = "reentrant")]
async fn nested(from: u64, to: u64) -> Result<(), MyError> {
    let _ = (from, to);
    Ok(())
}

#[semaphore(key = ["export:<a>", "export:<b>"], permits = 2)]
async fn export(a: u64, b: u64) -> Result<(), MyError> {
    let _ = (a, b);
    Ok(())
}

fn main() {}
