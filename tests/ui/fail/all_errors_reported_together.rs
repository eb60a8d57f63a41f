use distlock::write_lock;

struct MyError;

// One build reports every problem, not just the first.
#[write_lock(key = "doc:<doc>", ttl = "1x", on_busy = "wait", wiat = "1s")]
async fn save(doc_id: u64) -> Result<u64, MyError> {
    Ok(doc_id)
}

fn main() {}
