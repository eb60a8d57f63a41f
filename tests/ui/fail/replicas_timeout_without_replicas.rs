use distlock::read_lock;

// A timeout for a wait nobody asked for.
#[read_lock(key = "doc:<id>", replicas_timeout = "100ms")]
async fn show(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
