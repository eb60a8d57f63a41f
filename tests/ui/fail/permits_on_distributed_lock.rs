use distlock::distributed_lock;

// A lock admits one holder: a limit of several is `#[semaphore]`.
#[distributed_lock(key = "export:<tenant>", permits = 4)]
async fn export(tenant: String) -> Result<(), distlock::Error> {
    let _ = tenant;
    Ok(())
}

fn main() {}
