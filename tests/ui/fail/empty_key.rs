use distlock::distributed_lock;

struct MyError;

#[distributed_lock(key = "")]
async fn pay(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
