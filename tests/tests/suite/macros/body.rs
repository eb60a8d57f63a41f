//! Control flow and errors of the body, keys from fields, the lease inside.

use super::*;

#[distributed_lock(key = "parse:<id>", client = locks)]
async fn parse(locks: &Client, id: u32, input: &str) -> Result<u32, AppError> {
    if input.is_empty() {
        return Ok(0);
    }
    let n: u32 = input.parse().map_err(|_| AppError::Body("not a number"))?;
    Ok(n + id)
}

#[tokio::test]
async fn question_mark_early_return_and_body_errors_all_release_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    assert_eq!(parse(&locks, 1, "").await.expect("early return"), 0);
    assert!(!exists(&conn, "parse:1").await);
    assert!(matches!(
        parse(&locks, 1, "x").await,
        Err(AppError::Body("not a number"))
    ));
    assert!(!exists(&conn, "parse:1").await);
    assert_eq!(parse(&locks, 1, "41").await.expect("value"), 42);
    assert!(!exists(&conn, "parse:1").await);
}

/// An error type without `From<distlock::Error>`.
#[derive(Debug, PartialEq)]
struct Plain(String);

fn plain(error: Error) -> Plain {
    Plain(format!("lock: {error}"))
}

#[distributed_lock(key = "plain:<id>", client = locks, wait = "0s", map_err = plain)]
async fn mapped(locks: &Client, id: u32) -> Result<u32, Plain> {
    Ok(id)
}

#[tokio::test]
async fn map_err_converts_lock_errors() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = as_other_owner(locks.lock("plain:1").try_acquire())
        .await
        .expect("free");
    assert_eq!(
        mapped(&locks, 1).await,
        Err(Plain(
            "lock: lock `plain:1` is held by another owner".into()
        ))
    );
    held.release().await.expect("release");
    assert_eq!(mapped(&locks, 1).await, Ok(1));
}

struct Tenant {
    name: String,
    locks: Client,
}

struct Order {
    id: (u32, u64),
}

impl Tenant {
    #[distributed_lock(key = "{<self.name>}:order:<order.id.1>", client = self.locks)]
    async fn place(
        &self,
        order: Order,
        conn: &redis::aio::MultiplexedConnection,
    ) -> Result<u64, AppError> {
        // The key was built before the body took `order`.
        let Order { id: (_, number) } = order;
        // A name with its own hash tag keeps it (with a `#` in front, for one that starts
        // with `{`: see `distlock/src/key.rs`): `distlock:#{acme}:order:77`.
        assert_eq!(
            raw_exists(conn, &format!("distlock:#{{{}}}:order:{number}", self.name)).await,
            1
        );
        Ok(number)
    }
}

#[tokio::test]
async fn keys_come_from_self_fields_and_parameter_fields() {
    let server = RedisServer::start();
    let conn = redis(&server).await;
    let tenant = Tenant {
        name: "acme".into(),
        locks: client(&server).await,
    };
    let order = Order { id: (1, 77) };
    assert_eq!(tenant.place(order, &conn).await.expect("placed"), 77);
    assert_eq!(
        raw_exists(&conn, "distlock:#{acme}:order:77").await,
        0,
        "released"
    );
}

#[tokio::test]
async fn lease_is_only_there_inside_a_locked_fn_and_ends_with_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    assert!(distlock::lease().is_none());
    let kept = keep_lease(&locks).await.expect("call");
    assert!(
        !kept.is_held(),
        "a lease kept after the call still claims the lock"
    );
    tokio::time::timeout(Duration::from_secs(1), kept.lost())
        .await
        .expect("lost() of an ended hold resolves");
    let next = keep_lease(&locks).await.expect("call");
    assert!(next.fencing_token().expect("fencing = true") > kept.fencing_token().unwrap());
}

#[distributed_lock(key = "keep", client = locks, fencing = true)]
async fn keep_lease(locks: &Client) -> Result<distlock::Lease, AppError> {
    let lease = distlock::lease().expect("inside");
    assert!(lease.is_held());
    Ok(lease)
}

/// Without `fencing = true` the body's lease has no token and no counter is written; with it,
/// the same lock's next call has one.
#[tokio::test]
async fn fencing_is_off_unless_the_attribute_asks() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = server.async_connection().await;
    let unfenced = unfenced_lease(&locks).await.expect("call");
    assert_eq!(unfenced.fencing_token(), None);
    let counter: bool = redis::cmd("EXISTS")
        .arg(fence_key("keep"))
        .query_async(&mut conn.clone())
        .await
        .expect("EXISTS");
    assert!(
        !counter,
        "a fencing counter was written without fencing = true"
    );
    let fenced = keep_lease(&locks).await.expect("call");
    assert!(fenced.fencing_token().is_some());
}

#[distributed_lock(key = "keep", client = locks)]
async fn unfenced_lease(locks: &Client) -> Result<distlock::Lease, AppError> {
    Ok(distlock::lease().expect("inside"))
}

#[distributed_lock(key = "counter:<id>", client = locks, wait = "10s")]
async fn increment(locks: &Client, id: u32, count: &AtomicU32) -> Result<(), AppError> {
    let seen = count.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    count.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generic_caller_sees_no_lost_updates() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let count = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (locks, count) = (locks.clone(), count.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    increment(&locks, 1, &count).await.expect("increment");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(count.load(Ordering::SeqCst), 60);
}
