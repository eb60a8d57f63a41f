use distlock::distributed_lock;

struct MyError;

#[distributed_lock(key = "order:<id>", mode = "redlok")]
async fn pay(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
