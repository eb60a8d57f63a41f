use distlock::distributed_lock;

struct MyError;

#[distributed_lock(key = "order:<id>")]
#[distlock::write_lock(key = "doc:<id>")]
async fn pay(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
