use distlock::distributed_lock;

struct Report {
    pages: u32,
}

// With `on_error = "log"` a call whose lock failed returns `Default::default()`; `Report` has
// none.
#[distributed_lock(key = "report", on_error = "log")]
async fn build() -> Report {
    Report { pages: 1 }
}

fn main() {}
