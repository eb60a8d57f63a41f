use distlock::distributed_lock;

struct MyError;

#[distributed_lock(key = "order:<id>", tll = "10s")]
async fn pay(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
