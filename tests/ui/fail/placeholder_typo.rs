use distlock::read_lock;

struct MyError;

#[read_lock(key = "user:<usr_id>")]
async fn profile(user_id: u64) -> Result<u64, MyError> {
    Ok(user_id)
}

fn main() {}
