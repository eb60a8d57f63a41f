//! Generic fns with where-clauses, `impl Trait` arguments, lifetimes, and bindings inside
//! destructuring patterns.
use std::fmt::Display;
use std::sync::Arc;

use distlock::{distributed_lock, read_lock, Client};

#[derive(Clone, Copy)]
struct Point {
    x: i32,
    y: i32,
}

struct Wrapper<T>(T);

#[distributed_lock(key = "item:<id>", client = locks)]
async fn generic<T, C>(locks: &Client, id: T, cache: C) -> Result<String, distlock::Error>
where
    T: Display + Send + Sync,
    C: Clone + Send,
{
    let _ = cache.clone();
    Ok(id.to_string())
}

#[distributed_lock(key = "name:<name>", client = locks)]
async fn impl_arg(
    locks: Arc<Client>,
    name: impl Display + Send + Sync,
) -> Result<(), distlock::Error> {
    let _ = name.to_string();
    Ok(())
}

#[read_lock(key = "borrowed:<text>", client = locks)]
async fn borrowed<'a>(locks: &Client, text: &'a str) -> Result<&'a str, distlock::Error> {
    Ok(text)
}

#[distributed_lock(key = "grid:<x>:<y>:<first>:<inner>", client = locks)]
async fn patterns(
    locks: &Client,
    Point { x, y }: Point,
    (first, _second): (u8, u8),
    Wrapper(inner): Wrapper<u64>,
    mut counter: u32,
) -> Result<u32, distlock::Error> {
    counter += u32::from(first);
    Ok(counter + x as u32 + y as u32 + inner as u32)
}

#[distributed_lock(key = "tuple:<pair.0>:<point.x>", client = locks)]
async fn fields(
    locks: &Client,
    pair: (u8, String),
    point: Point,
) -> Result<String, distlock::Error> {
    // The key was built before the body took `pair` by value.
    let (_, owned) = pair;
    Ok(format!("{owned}{}", point.y))
}

fn assert_send<T: Send>(_: &T) {}

#[allow(dead_code)]
fn check(locks: Client) {
    assert_send(&generic(&locks, 1u8, vec![1]));
    assert_send(&impl_arg(Arc::new(locks.clone()), "x"));
    assert_send(&borrowed(&locks, "x"));
    assert_send(&patterns(
        &locks,
        Point { x: 1, y: 2 },
        (1, 2),
        Wrapper(3),
        0,
    ));
    assert_send(&fields(&locks, (1, String::new()), Point { x: 1, y: 2 }));
}

fn main() {}
