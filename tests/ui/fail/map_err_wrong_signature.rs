use distlock::distributed_lock;

#[derive(Debug)]
struct AppError(String);

impl AppError {
    // Takes a `String`, not a `distlock::Error`.
    fn from_text(text: String) -> Self {
        AppError(text)
    }
}

#[distributed_lock(key = "order:<id>", map_err = AppError::from_text)]
async fn pay(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
