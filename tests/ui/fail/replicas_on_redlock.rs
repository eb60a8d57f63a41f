use distlock::distributed_lock;

// A Redlock quorum's nodes are independent masters: there are no replicas to wait for.
#[distributed_lock(key = "order:<id>", mode = "redlock", replicas = 1)]
async fn pay(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
