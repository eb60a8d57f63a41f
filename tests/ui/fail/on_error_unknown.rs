use distlock::distributed_lock;

#[distributed_lock(key = "job", on_error = "panic")]
async fn job() {}

fn main() {}
