use distlock::semaphore;

// Zero permits would admit no one.
#[semaphore(key = "export:<tenant>", permits = 0)]
async fn export(tenant: String) -> Result<(), distlock::Error> {
    let _ = tenant;
    Ok(())
}

fn main() {}
