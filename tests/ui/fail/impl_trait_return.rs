use distlock::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> impl std::fmt::Debug {
    id
}

fn main() {}
