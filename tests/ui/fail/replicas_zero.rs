use distlock::distributed_lock;

// Zero replicas would confirm nothing: leave the argument out instead.
#[distributed_lock(key = "order:<id>", replicas = 0)]
async fn pay(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
