use distlock::distributed_lock;

struct Order {
    id: u64,
}

// `Order` has no `Display`, so it cannot be formatted into the key.
#[distributed_lock(key = "order:<order>")]
async fn pay(order: Order) -> Result<u64, distlock::Error> {
    Ok(order.id)
}

fn main() {}
