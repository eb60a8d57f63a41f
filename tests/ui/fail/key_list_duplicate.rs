use distlock::distributed_lock;

struct MyError;

#[distributed_lock(key = ["account:<from>", "account:<from>"], ttl = "10s")]
async fn transfer(from: u64, to: u64) -> Result<(), MyError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
