use distlock::distributed_lock;

#[distributed_lock(key = "order:<id>", fencing = "yes")]
async fn pay(id: u64) -> Result<(), distlock::Error> {
    let _ = id;
    Ok(())
}

fn main() {}
