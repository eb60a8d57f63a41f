//! Nesting in one task: reentrant calls re-enter, setnx ones fail at once.

use super::*;

#[distributed_lock(key = "job:<id>", client = locks, mode = "reentrant", fencing = true)]
async fn reentrant_outer(
    locks: &Client,
    id: u32,
    conn: &redis::aio::MultiplexedConnection,
) -> Result<distlock::FencingToken, AppError> {
    let outer = distlock::lease()
        .expect("outer")
        .fencing_token()
        .expect("fencing = true");
    let inner = reentrant_inner(locks, id).await?;
    assert_eq!(outer, inner, "re-entry keeps the tenure's fencing token");
    // The inner release only took one level off the count.
    assert!(
        exists(conn, &format!("job:{id}")).await,
        "the outer hold was released by the inner one"
    );
    let busy = as_other_owner(locks.reentrant(format!("job:{id}")).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    Ok(outer)
}

#[distributed_lock(
    key = "job:<id>",
    client = locks,
    mode = "reentrant",
    wait = "0s",
    fencing = true
)]
async fn reentrant_inner(locks: &Client, id: u32) -> Result<distlock::FencingToken, AppError> {
    let lease = distlock::lease().expect("inner");
    Ok(lease.fencing_token().expect("fencing = true"))
}

#[distributed_lock(key = "tree:<id>", client = locks, mode = "reentrant", wait = "0s")]
async fn depth(locks: &Client, id: u32, levels: u32) -> Result<u32, AppError> {
    if levels == 0 {
        return Ok(0);
    }
    Ok(1 + Box::pin(depth(locks, id, levels - 1)).await?)
}

#[tokio::test]
async fn reentrant_mode_lets_nested_calls_in_one_task_re_enter() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    reentrant_outer(&locks, 9, &conn)
        .await
        .expect("nested calls");
    assert!(
        !exists(&conn, "job:9").await,
        "released after the outermost call"
    );
    assert_eq!(depth(&locks, 1, 5).await.expect("recursion"), 5);
    assert!(!exists(&conn, "tree:1").await);
}

#[distributed_lock(key = "order:<id>", client = locks, wait = "5s")]
async fn setnx_outer(locks: &Client, id: u32) -> Result<(Error, Duration), AppError> {
    let started = Instant::now();
    let inner = setnx_inner(locks, id).await.unwrap_err().lock();
    Ok((inner, started.elapsed()))
}

#[distributed_lock(key = "order:<id>", client = locks, wait = "5s", on_busy = "skip")]
async fn setnx_inner(locks: &Client, id: u32) -> Result<(), AppError> {
    panic!("the inner body ran while the outer call holds the lock");
}

#[tokio::test]
async fn setnx_nesting_fails_at_once_with_reentrant() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let (inner, took) = setnx_outer(&locks, 4).await.expect("outer call");
    // Not a 5 s wait on itself, and not skipped either: nesting a non-reentrant lock is a bug.
    assert!(
        matches!(inner, Error::Reentrant { ref name } if name == "order:4"),
        "{inner}"
    );
    assert!(took < Duration::from_secs(2), "waited {took:?}");
}
