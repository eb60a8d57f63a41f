use distlock::distributed_lock;

struct Receipt {
    id: u64,
}

// A skipped call returns `Ok(Default::default())`; `Receipt` has no default.
#[distributed_lock(key = "order:<id>", on_busy = "skip")]
async fn pay(id: u64) -> Result<Receipt, distlock::Error> {
    Ok(Receipt { id })
}

fn main() {}
