use distlock::distributed_lock;

struct MyError;

impl From<distlock::Error> for MyError {
    fn from(_: distlock::Error) -> Self {
        MyError
    }
}

struct Account;

#[distributed_lock(key = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: Account) -> Result<(), MyError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
