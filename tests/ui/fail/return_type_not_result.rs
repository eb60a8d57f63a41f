use distlock::distributed_lock;

// A lock error has nowhere to go in a plain `u64`.
#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> u64 {
    id
}

fn main() {}
