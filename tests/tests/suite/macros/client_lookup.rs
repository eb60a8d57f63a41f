//! Finding the client: `client = ..`, the process defaults, and Redlock mode.

use super::*;

#[distributed_lock(key = "orphan:<id>")]
async fn orphan(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[distributed_lock(key = "orphan:<id>", wait = "0s")]
async fn orphan_once(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[distributed_lock(key = "maybe:<id>", client = locks)]
async fn maybe(locks: Option<&Client>, id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[tokio::test]
async fn no_client_is_an_error_through_the_fn_error_type() {
    // This process never sets a default client (see the module docs).
    let error = orphan(1).await.unwrap_err().lock();
    assert!(matches!(error, Error::NoClient), "{error}");
    let error = maybe(None, 1).await.unwrap_err().lock();
    assert!(matches!(error, Error::NoClient), "{error}");
    let server = RedisServer::start();
    let locks = client(&server).await;
    assert_eq!(maybe(Some(&locks), 2).await.expect("with a client"), 2);
}

const CHILD_DEFAULT: &str = "DISTLOCK_MACROS_CHILD_DEFAULT";

const CHILD_QUORUM: &str = "DISTLOCK_MACROS_CHILD_QUORUM";

#[tokio::test]
async fn the_default_client_is_used_without_client_argument() {
    let server = RedisServer::start();
    let nodes = RedisServers::start(3);
    let child = spawn_child(
        "client_lookup::child_default_client",
        &[
            (CHILD_DEFAULT, server.url()),
            (CHILD_QUORUM, nodes.urls().join(",")),
        ],
    );
    let said = finish_child(child);
    assert!(said.contains("DEFAULT OK"), "child said {said:?}");
}

/// A Redlock fn without `client = ..`: runs on the quorum default. Reports where its lock is
/// while the body runs: (how many quorum nodes hold it, whether the single-node default's
/// server does).
#[distributed_lock(key = "qd:<id>", mode = "redlock")]
async fn quorum_default(
    id: u32,
    quorum_nodes: &[redis::aio::MultiplexedConnection],
    single: &redis::aio::MultiplexedConnection,
) -> Result<(usize, bool), AppError> {
    let name = format!("qd:{id}");
    let mut on_quorum = 0;
    for node in quorum_nodes {
        on_quorum += usize::from(exists(node, &name).await);
    }
    Ok((on_quorum, exists(single, &name).await))
}

/// Run by `the_default_client_is_used_without_client_argument`; does nothing when run directly.
#[tokio::test]
#[ignore = "a child process of the_default_client_is_used_without_client_argument"]
async fn child_default_client() {
    let Ok(url) = std::env::var(CHILD_DEFAULT) else {
        return;
    };
    let locks = Client::connect(&url).await.expect("connect");
    distlock::set_default(locks.clone()).expect("first default");
    let conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    assert_eq!(orphan(5).await.expect("the default client"), 5);
    let held = locks.lock("orphan:6").try_acquire().await.expect("free");
    assert!(exists(&conn, "orphan:6").await);
    let busy = as_other_owner(orphan_once(6)).await.unwrap_err().lock();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    held.release().await.expect("release");

    // With only a single-node default, a Redlock fn gets the clear error, not a weaker lock.
    let quorum_urls = std::env::var(CHILD_QUORUM).expect("quorum urls");
    let mut quorum_nodes = Vec::new();
    for url in quorum_urls.split(',') {
        let node = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        quorum_nodes.push(node);
    }
    let refused = quorum_default(7, &quorum_nodes, &conn)
        .await
        .unwrap_err()
        .lock();
    assert!(matches!(refused, Error::InvalidConfig { .. }), "{refused}");
    // A quorum default beside the single-node one: Redlock fns use it, the others do not.
    // No restart guard: the parent just started these servers and restarts none of them.
    let quorum = Client::quorum_builder(quorum_urls.split(','))
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum");
    distlock::set_default(quorum).expect("first quorum default");
    let (on_quorum, on_single) = quorum_default(7, &quorum_nodes, &conn)
        .await
        .expect("redlock");
    // The call returns once a majority (2 of 3) granted it; the third may still be on its way.
    assert!(
        on_quorum >= 2 && !on_single,
        "redlock fn used the quorum default: {on_quorum}, {on_single}"
    );
    assert_eq!(orphan(8).await.expect("still the single-node default"), 8);
    println!("DEFAULT OK");
}

#[distributed_lock(key = "payout:<id>", client = locks, mode = "redlock")]
async fn payout(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn redlock_mode_on_a_single_node_client_is_a_config_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let error = payout(&locks, 1, &ran).await.unwrap_err().lock();
    match error {
        Error::InvalidConfig { ref reason } => assert_eq!(
            reason,
            "mode = \"redlock\" needs a quorum client (Client::quorum); this client has one node"
        ),
        other => panic!("expected InvalidConfig, got {other}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body ran on a single node");
    assert!(
        !exists(&redis(&server).await, "payout:1").await,
        "a single-node lock was taken"
    );
}

#[tokio::test]
async fn redlock_mode_runs_on_a_quorum_client() {
    let nodes = RedisServers::start(3);
    // No restart guard: the servers were just started and none restarts.
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum client");
    let ran = AtomicBool::new(false);
    assert_eq!(payout(&locks, 2, &ran).await.expect("quorum lock"), 2);
    assert!(ran.load(Ordering::SeqCst));
    // The release returns once a majority released it; the last node's release may still be
    // on its way.
    for node in &nodes {
        let conn = node.async_connection().await;
        let released = wait_until_async(Duration::from_secs(2), || async {
            !exists(&conn, "payout:2").await
        })
        .await;
        assert!(released, "released on every node");
    }
}
