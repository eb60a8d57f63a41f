use distlock::read_lock;

struct MyError;

#[read_lock(key = "doc:<id>", mode = "redlock")]
async fn show(id: u64) -> Result<u64, MyError> {
    Ok(id)
}

fn main() {}
