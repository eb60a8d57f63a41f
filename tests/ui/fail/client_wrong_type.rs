use distlock::distributed_lock;

struct App {
    redis_url: String,
}

// A URL is not a client: connect once at start-up and keep the `distlock::Client`.
#[distributed_lock(key = "order:<id>", client = app.redis_url)]
async fn pay(app: &App, id: u64) -> Result<u64, distlock::Error> {
    let _ = &app.redis_url;
    Ok(id)
}

fn main() {}
