use distlock::distributed_lock;

#[distributed_lock(key = "user:<id>", record_name = "yes")]
async fn touch(id: u64) -> Result<(), distlock::Error> {
    let _ = id;
    Ok(())
}

fn main() {}
