use distlock::write_lock;

// A count, not a string.
#[write_lock(key = "doc:<id>", replicas = "1")]
async fn edit(id: u64) -> Result<u64, distlock::Error> {
    Ok(id)
}

fn main() {}
