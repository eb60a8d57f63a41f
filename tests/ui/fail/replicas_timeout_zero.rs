use distlock::distributed_lock;

// WAIT with a zero timeout blocks forever.
#[distributed_lock(key = "order:<id>", replicas = 1, replicas_timeout = "0ms")]
async fn pay(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
