use distlock::distributed_lock;

struct Order {
    id: u64,
}

// `<order.idd>`: the field does not exist.
#[distributed_lock(key = "order:<order.idd>")]
async fn pay(order: Order) -> Result<u64, distlock::Error> {
    Ok(order.id)
}

fn main() {}
