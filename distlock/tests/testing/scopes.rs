//! Inspection helpers and scoped servers: each test's locked fns on its own server.

use super::*;

#[tokio::test]
async fn lock_state_tells_mode_token_holders_and_waiters() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let free = lock_state(&locks, "s").await.unwrap();
    assert!(!free.is_held());
    assert_eq!((free.mode(), free.holders(), free.waiters()), (None, 0, 0));

    let guard = locks.write("s").fencing(true).acquire().await.unwrap();
    let other = locks.clone();
    let waiter = tokio::spawn(async move {
        let g = other.write("s").wait(PATIENCE).acquire().await?;
        g.release().await
    });
    assert!(wait_for_waiters(&locks, "s", 1, PATIENCE).await.unwrap());
    let state = lock_state(&locks, "s").await.unwrap();
    assert_eq!(state.mode(), Some(LockMode::Write));
    assert!(state.is_held_by(&guard));
    assert_eq!(state.fencing_token(), guard.fencing_token());
    assert_eq!(state.holders(), 1);
    assert_eq!(state.waiters(), 1);
    assert_eq!(state.waiting_writers(), 1);
    guard.release().await.unwrap();
    waiter.await.unwrap().expect("the waiter got it");
    assert_eq!(lock_state(&locks, "s").await.unwrap().waiters(), 0);
}

#[tokio::test]
async fn a_quorum_keeps_a_majority_and_refuses_without_one() {
    let mut nodes = TestQuorum::start(3).await.unwrap();
    assert_eq!(nodes.len(), 3);
    let locks = nodes
        .client_builder()
        .node_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    nodes[0].kill();
    let guard = locks.lock("q").acquire().await.expect("2 of 3");
    guard.release().await.unwrap();
    nodes[1].pause().unwrap();
    let e = locks
        .lock("q")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::QuorumNotReached { .. }), "{e}");
    nodes[1].resume().unwrap();
}

/// Holds `shared:<id>` (not waiting if it is taken) from `entered` until `leave`.
#[distributed_lock(key = "shared:<id>", wait = "0s")]
async fn hold_while(
    id: u64,
    entered: tokio::sync::oneshot::Sender<()>,
    leave: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Error> {
    let _ = entered.send(());
    let _ = leave.await;
    Ok(())
}

/// A test of its own: a server, a locked fn run against it through `scope_default`, held
/// while the test looks at the server.
async fn locked_fn_on_own_server() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let (entered, has_entered) = tokio::sync::oneshot::channel();
    let (leave, left) = tokio::sync::oneshot::channel();
    let call = tokio::spawn(distlock::scope_default(
        locks.clone(),
        hold_while(1, entered, left),
    ));
    has_entered.await.expect("the body ran");
    assert!(lock_state(&locks, "shared:1").await.unwrap().is_held());
    leave.send(()).unwrap();
    call.await.unwrap().expect("not busy: a server of its own");
}

// Two tests the harness runs in parallel (threads of one process, one process default),
// taking the same lock name with no wait: each on its own server, neither is busy.
#[tokio::test]
async fn parallel_test_a_runs_its_locked_fn_on_its_own_server() {
    locked_fn_on_own_server().await;
}

#[tokio::test]
async fn parallel_test_b_runs_its_locked_fn_on_its_own_server() {
    locked_fn_on_own_server().await;
}

#[tokio::test]
async fn two_locked_fns_hold_the_same_name_on_two_servers_at_once() {
    let (a, b) = tokio::join!(TestServer::start(), TestServer::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    let (la, lb) = (a.client().await.unwrap(), b.client().await.unwrap());
    let (ea, a_entered) = tokio::sync::oneshot::channel();
    let (eb, b_entered) = tokio::sync::oneshot::channel();
    let (leave_a, left_a) = tokio::sync::oneshot::channel();
    let (leave_b, left_b) = tokio::sync::oneshot::channel();
    let call_a = tokio::spawn(distlock::scope_default(
        la.clone(),
        hold_while(1, ea, left_a),
    ));
    let call_b = tokio::spawn(distlock::scope_default(
        lb.clone(),
        hold_while(1, eb, left_b),
    ));
    // Both bodies run at once, each holding `shared:1` on its own server.
    a_entered.await.expect("a ran");
    b_entered.await.expect("b ran");
    assert!(exists(&a, "distlock:{shared:1}").await);
    assert!(exists(&b, "distlock:{shared:1}").await);
    leave_a.send(()).unwrap();
    leave_b.send(()).unwrap();
    call_a.await.unwrap().unwrap();
    call_b.await.unwrap().unwrap();
    // Outside a scope (and with no process default in this test binary): no client.
    let (e, _) = tokio::sync::oneshot::channel();
    let (_, l) = tokio::sync::oneshot::channel();
    assert!(matches!(hold_while(1, e, l).await, Err(Error::NoClient)));
}

#[tokio::test]
async fn scopes_nest_and_spawned_tasks_do_not_inherit_them() {
    let (a, b) = tokio::join!(TestServer::start(), TestServer::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    let (la, lb) = (a.client().await.unwrap(), b.client().await.unwrap());
    distlock::scope_default(la.clone(), async {
        let (entered, has_entered) = tokio::sync::oneshot::channel();
        let (leave, left) = tokio::sync::oneshot::channel();
        // The inner scope wins.
        let inner = distlock::scope_default(lb.clone(), hold_while(2, entered, left));
        let check = async {
            has_entered.await.unwrap();
            assert!(exists(&b, "distlock:{shared:2}").await);
            assert!(!exists(&a, "distlock:{shared:2}").await);
            leave.send(()).unwrap();
        };
        let (result, ()) = tokio::join!(inner, check);
        result.unwrap();
        // A task spawned inside a scope is outside it.
        let (e, _) = tokio::sync::oneshot::channel();
        let (_, l) = tokio::sync::oneshot::channel();
        let spawned = tokio::spawn(hold_while(3, e, l)).await.unwrap();
        assert!(matches!(spawned, Err(Error::NoClient)));
    })
    .await;
}

/// The startup cost of a throwaway server: `cargo test -p distlock --features testing
/// --release --test testing -- --ignored --nocapture startup_cost`.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn startup_cost() {
    const N: u32 = 20;
    let started = Instant::now();
    for _ in 0..N {
        let server = TestServer::start().await.unwrap();
        drop(server);
    }
    let each = started.elapsed() / N;
    let started = Instant::now();
    for _ in 0..N {
        let server = TestServer::start().await.unwrap();
        let locks = server.client().await.unwrap();
        drop(locks);
    }
    let with_client = started.elapsed() / N;
    println!(
        "start + stop: {each:?} per server; with a client connected: {with_client:?} ({N} each)"
    );
    let started = Instant::now();
    for _ in 0..5 {
        drop(TestQuorum::start(3).await.unwrap());
    }
    println!("a quorum of 3: {:?} (5 in a row)", started.elapsed() / 5);
    let started = Instant::now();
    for _ in 0..3 {
        drop(TestCluster::start(3).await.unwrap());
    }
    println!(
        "a cluster of 3 masters, formed: {:?} (3 in a row)",
        started.elapsed() / 3
    );
}

#[tokio::test]
async fn is_held_by_knows_each_mode_and_tells_guards_apart() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let other = server.client().await.unwrap();
    let setnx = locks.lock("m:setnx").acquire().await.unwrap();
    let reentrant = locks.reentrant("m:reentrant").acquire().await.unwrap();
    let read = locks.read("m:read").acquire().await.unwrap();
    let permit = locks.semaphore("m:sem", 2).acquire().await.unwrap();
    let other_permit = other.semaphore("m:sem", 2).acquire().await.unwrap();
    for (name, guard, mode) in [
        ("m:setnx", &setnx, LockMode::SetNx),
        ("m:reentrant", &reentrant, LockMode::Reentrant),
        ("m:read", &read, LockMode::Read),
        ("m:sem", &permit, LockMode::Semaphore),
    ] {
        let state = lock_state(&locks, name).await.unwrap();
        assert!(state.is_held_by(guard), "{name}");
        assert_eq!(state.mode(), Some(mode), "{name}");
        // Another lock's guard is not this lock's holder.
        assert!(
            !lock_state(&locks, "m:setnx")
                .await
                .unwrap()
                .is_held_by(&reentrant),
            "{name}"
        );
    }
    let sem = lock_state(&locks, "m:sem").await.unwrap();
    assert_eq!(sem.holders(), 2);
    assert!(sem.is_held_by(&other_permit));
}
