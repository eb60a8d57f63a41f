use distlock::distributed_lock;

fn convert(_: distlock::Error) -> String {
    String::new()
}

// Logged errors are never converted: `map_err` would do nothing.
#[distributed_lock(key = "job", on_error = "log", map_err = convert)]
async fn job() -> Option<u32> {
    Some(1)
}

fn main() {}
