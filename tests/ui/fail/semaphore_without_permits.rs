use distlock::semaphore;

// How many holders a semaphore admits is no default to guess.
#[semaphore(key = "export:<tenant>", ttl = "30s")]
async fn export(tenant: String) -> Result<(), distlock::Error> {
    let _ = tenant;
    Ok(())
}

fn main() {}
