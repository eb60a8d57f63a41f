use distlock::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) {
    println!("{id}");
}

fn main() {}
