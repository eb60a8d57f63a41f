use distlock::distributed_lock;

#[derive(Debug)]
struct MyError;

// `MyError` has no `From<distlock::Error>`, and no `map_err` is given.
#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
