//! Servers, clusters and quorums: they start, answer, stop, restart, and go silent on demand.

use super::*;

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
