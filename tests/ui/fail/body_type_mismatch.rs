use distlock::distributed_lock;

// The error must blame the user's own expression, not the generated code.
#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> Result<u64, distlock::Error> {
    Ok("not a number")
}

fn main() {}
