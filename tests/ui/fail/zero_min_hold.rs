use distlock::distributed_lock;

#[distributed_lock(key = "job", min_hold = "0s", on_busy = "skip", on_error = "log")]
async fn job() {}

fn main() {}
