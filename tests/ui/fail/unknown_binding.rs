use distlock::distributed_lock;

struct MyError;
struct Path<T>(T);

// `id` is bound inside the `Path(id)` pattern, so it is listed as a binding.
#[distributed_lock(key = "order:<order_id>")]
async fn pay(Path(id): Path<u64>, amount: u64) -> Result<u64, MyError> {
    Ok(id + amount)
}

fn main() {}
