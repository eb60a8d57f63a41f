use distlock::semaphore;

#[semaphore(key = "export:<tenant>", permits = 4, mode = "redlock")]
async fn export(tenant: String) -> Result<(), distlock::Error> {
    let _ = tenant;
    Ok(())
}

fn main() {}
