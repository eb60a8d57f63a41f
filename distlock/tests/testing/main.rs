//! The `testing` feature's own tests: each server and fault does what it says, observed
//! through the public API and on the server itself.

use std::time::{Duration, Instant};

use distlock::testing::{
    end_lease, lock_state, wait_for_waiters, FaultProxy, TestCluster, TestQuorum, TestServer,
};
use distlock::{distributed_lock, Client, Error, LockMode};

const PATIENCE: Duration = Duration::from_secs(5);

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The scheduler state of `pid` (`T`: stopped by a signal), from `/proc`.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The server's own answer to `EXISTS`, on a connection of the test's own.
async fn exists(server: &TestServer, key: &str) -> bool {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap()
        == 1
}

#[tokio::test]
async fn a_server_starts_answers_and_leaves_no_process_or_file() {
    let server = TestServer::start().await.expect("server");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    let locks = server.client().await.unwrap();
    let guard = locks.lock("a").acquire().await.unwrap();
    assert!(exists(&server, "distlock:{a}").await);
    guard.release().await.unwrap();
    let pid = server.pid();
    let dir = server.log_path().parent().unwrap().to_owned();
    assert!(process_exists(pid) && dir.exists());
    drop(server);
    // Killed and reaped: no process, not even a zombie; its directory gone.
    assert!(!process_exists(pid));
    assert!(!dir.exists());
}

#[test]
fn a_server_starts_without_a_runtime_too() {
    let mut server = TestServer::builder().start_blocking().expect("server");
    assert!(server.is_running());
    server.restart_blocking().expect("restart");
    assert!(server.is_running());
}

#[tokio::test]
async fn a_missing_binary_is_one_line() {
    let e = TestServer::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("/nonexistent/redis-server"), "{e}");
}

#[tokio::test]
async fn parallel_servers_are_distinct() {
    let (a, b) = tokio::join!(TestServer::start(), TestServer::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.port(), b.port());
    let (la, lb) = (a.client().await.unwrap(), b.client().await.unwrap());
    // The same name on both: two locks, one per server.
    let ga = la.lock("same").acquire().await.unwrap();
    let gb = lb.lock("same").acquire().await.unwrap();
    assert!(ga.is_held() && gb.is_held());
}

#[tokio::test]
async fn pause_silences_without_closing_and_resume_answers_again() {
    let mut server = TestServer::start().await.unwrap();
    let locks = server
        .client_builder()
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    server.pause().unwrap();
    assert!(server.is_paused() && server.is_running());
    assert_eq!(process_state(server.pid()), Some('T'), "stopped by SIGSTOP");
    // The kernel still accepts connections: nothing is closed, nothing answers.
    let raw = std::net::TcpStream::connect(server.addr());
    assert!(raw.is_ok());
    let e = locks
        .lock("p")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    server.resume().unwrap();
    assert_ne!(process_state(server.pid()), Some('T'));
    let guard = locks.lock("p").acquire().await.expect("answers again");
    guard.release().await.unwrap();
    // Twice over: each pause and resume waits for its own state change.
    server.pause().unwrap();
    server.resume().unwrap();
    assert!(!server.is_paused());
}

#[tokio::test]
async fn restart_is_empty_and_on_the_same_port() {
    let mut server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let guard = locks.lock("r").acquire().await.unwrap();
    let (port, pid) = (server.port(), server.pid());
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert!(!process_exists(pid));
    assert!(
        !exists(&server, "distlock:{r}").await,
        "the restarted server is empty"
    );
    // The holder finds out at its next renewal; the lock is free meanwhile.
    drop(guard);
    let again = locks.lock("r").acquire().await.expect("reconnects");
    again.release().await.unwrap();
}

#[tokio::test]
async fn kill_stops_the_server_and_the_client_reports_it() {
    let mut server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let pid = server.pid();
    server.kill();
    assert!(!server.is_running());
    assert!(!process_exists(pid));
    let e = locks
        .lock("k")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    server.kill(); // again: nothing to do
}

#[tokio::test]
async fn end_lease_is_seen_by_the_guard_at_once() {
    let server = TestServer::start().await.unwrap();
    // A long lease: without end_lease's renewal now, the loss would take 20 s to show.
    let locks = server.client().await.unwrap();
    let guard = locks
        .lock("e")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert!(lock_state(&locks, "e").await.unwrap().is_held_by(&guard));
    let started = Instant::now();
    assert!(end_lease(&locks, "e").await.unwrap());
    let lost = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("lost in time");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!guard.is_held());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!exists(&server, "distlock:{e}").await);
    assert!(!lock_state(&locks, "e").await.unwrap().is_held());
    // Nothing held: nothing ended.
    assert!(!end_lease(&locks, "free").await.unwrap());
}

#[tokio::test]
async fn end_lease_ends_write_and_read_holds() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let writer = locks
        .write("w")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    end_lease(&locks, "w").await.unwrap();
    tokio::time::timeout(PATIENCE, writer.lost())
        .await
        .expect("writer lost");
    let reader = locks
        .read("w")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert_eq!(lock_state(&locks, "w").await.unwrap().holders(), 1);
    end_lease(&locks, "w").await.unwrap();
    tokio::time::timeout(PATIENCE, reader.lost())
        .await
        .expect("reader lost");
}

#[distributed_lock(key = "body:<id>", ttl = "60s")]
async fn long_body(id: u64, reached: tokio::sync::mpsc::Sender<&'static str>) -> Result<(), Error> {
    reached.send("started").await.ok();
    // Waits for ever: only the lease's loss ends it.
    std::future::pending::<()>().await;
    reached.send("finished").await.ok();
    Ok(())
}

#[tokio::test]
async fn end_lease_cancels_a_locked_body() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let call = tokio::spawn(distlock::scope_default(locks.clone(), long_body(1, tx)));
    assert_eq!(rx.recv().await, Some("started"));
    end_lease(&locks, "body:1").await.unwrap();
    let result = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("cancelled in time")
        .unwrap();
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    // The body was dropped where it waited: it never reached its end.
    assert_eq!(rx.recv().await, None);
}

#[tokio::test]
async fn lost_replies_are_sent_again_and_counted_once() {
    let server = TestServer::start().await.unwrap();
    let proxy = FaultProxy::in_front_of(&server).unwrap();
    let locks = Client::connect(&proxy.url()).await.unwrap();
    proxy.drop_next_replies(2);
    let guard = locks
        .lock("d")
        .fencing(true)
        .acquire()
        .await
        .expect("retried");
    assert_eq!(proxy.replies_dropped(), 2);
    let state = lock_state(&locks, "d").await.unwrap();
    assert!(state.is_held_by(&guard));
    assert_eq!(state.fencing_token(), guard.fencing_token());
    // The next reply passes.
    guard.release().await.unwrap();
    assert_eq!(proxy.replies_dropped(), 2);
}

#[tokio::test]
async fn a_blackholed_proxy_is_silent_and_comes_back() {
    let server = TestServer::start().await.unwrap();
    let proxy = FaultProxy::in_front_of(&server).unwrap();
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    proxy.blackhole(true);
    let e = locks
        .lock("b")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    proxy.blackhole(false);
    let guard = locks.lock("b").acquire().await.expect("answers again");
    guard.release().await.unwrap();
}

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
async fn a_bad_argument_is_reported_with_what_the_server_said() {
    let e = TestServer::builder()
        .arg("--no-such-option")
        .arg("1")
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such-option"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[tokio::test]
async fn stop_shuts_down_a_server_started_with_a_config_file() {
    let dir = std::env::temp_dir().join(format!("distlock-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("redis.conf");
    std::fs::write(&conf, "hz 42\n").unwrap();
    let mut server = TestServer::builder()
        .config_file(&conf)
        .start()
        .await
        .unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let hz: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hz")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(hz, ["hz", "42"]);
    assert!(server.log_path().exists());
    let pid = server.pid();
    server.stop();
    assert!(!server.is_running());
    assert!(!process_exists(pid));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_cluster_forms_serves_locks_and_one_node_can_go_silent() {
    let mut cluster = TestCluster::start(3).await.expect("cluster");
    assert_eq!(cluster.len(), 3);
    let locks = cluster
        .client_builder()
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    // Two names on two different masters.
    let names: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
    let a = &names[0];
    let node_a = cluster.node_of(&locks, a).unwrap();
    let b = names
        .iter()
        .find(|n| cluster.node_of(&locks, n.as_str()).unwrap() != node_a)
        .expect("a name on another node");
    let guard = locks.lock(a.as_str()).acquire().await.unwrap();
    // The lock's keys are on the node node_of names.
    assert!(exists(&cluster[node_a], &format!("distlock:{{{a}}}")).await);
    guard.release().await.unwrap();

    cluster[node_a].pause().unwrap();
    let e = locks
        .lock(a.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    // The other masters still serve their locks.
    let other = locks
        .lock(b.as_str())
        .acquire()
        .await
        .expect("another master");
    other.release().await.unwrap();
    cluster[node_a].resume().unwrap();
}

#[distributed_lock(key = "ledger:<id>", mode = "redlock", wait = "0s")]
async fn redlock_job(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[tokio::test]
async fn a_redlock_fn_runs_on_the_scoped_quorum() {
    let mut nodes = TestQuorum::start(3).await.unwrap();
    let locks = nodes
        .client_builder()
        .node_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let ran = distlock::scope_default(locks.clone(), redlock_job(5)).await;
    assert_eq!(ran.unwrap(), 5);
    // Without a majority the fn does not run, and says why.
    nodes[0].kill();
    nodes[1].kill();
    let refused = distlock::scope_default(locks.clone(), redlock_job(5)).await;
    assert!(
        matches!(refused, Err(Error::QuorumNotReached { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_cluster_with_replicas_forms_without_a_runtime() {
    let cluster = TestCluster::builder()
        .masters(3)
        .replicas(1)
        .start_blocking()
        .expect("cluster");
    assert_eq!(cluster.len(), 6);
    for (i, node) in cluster.into_servers().iter().enumerate() {
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .unwrap();
        let role = if i < 3 { "role:master" } else { "role:slave" };
        assert!(info.contains(role), "node {i}: {info}");
    }
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

#[tokio::test]
async fn end_lease_lets_a_sleeping_waiter_in_now() {
    let server = TestServer::start().await.unwrap();
    let locks = server.client().await.unwrap();
    let other = server.client().await.unwrap();
    let guard = locks
        .lock("w8")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .lock("w8")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    assert!(wait_for_waiters(&other, "w8", 1, PATIENCE).await.unwrap());
    let started = Instant::now();
    end_lease(&locks, "w8").await.unwrap();
    // Not at the holder's lease's end, 60 s away: now.
    let next = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("woken now")
        .unwrap()
        .expect("the waiter holds it");
    assert!(started.elapsed() < PATIENCE);
    assert!(lock_state(&other, "w8").await.unwrap().is_held_by(&next));
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the old holder knows");
}
