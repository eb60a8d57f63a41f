use distlock::distributed_lock;

// 5 ms is below the shortest lease the runtime accepts.
#[distributed_lock(key = "order:<id>", ttl = "5ms")]
async fn pay(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
