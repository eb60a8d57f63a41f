use distlock::distributed_lock;

// A `None` would format as a key every `None` caller shares.
#[distributed_lock(key = "user:<user_id>")]
async fn charge(user_id: Option<u64>) -> Result<(), distlock::Error> {
    let _ = user_id;
    Ok(())
}

fn main() {}
