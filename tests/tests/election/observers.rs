//! Observers hear resignations and new leaders; a dead leader is seen gone at its lease's end; a
//! leader learns of its loss first; a quorum's term; an election through Sentinel.

use super::*;

// ---------------------------------------------------------------------------------------------
// Observers, in-process leaders.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_hear_resignations_and_new_leaders_by_their_messages() {
    let server = RedisServer::start();
    let name = "e-events";
    // Three clients, as three processes: a leader's release publishes for another client's
    // observer only because the observer marked the lock.
    let (a, b, watcher) = (
        connect(&server.url()).await,
        connect(&server.url()).await,
        connect(&server.url()).await,
    );
    // A lease of a minute: what comes within EVENT_LIMIT came by a message, not by the
    // lease running out.
    let ttl = Duration::from_secs(60);
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    assert_eq!(*leader.borrow(), None);

    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    assert!(first.is_leader());
    let now = seen(&mut leader, "the leader", |l| term(l) == Some(first.term()))
        .await
        .expect("a leader");
    assert_eq!(now.holder.pid, Some(std::process::id()));
    assert!(now.holder.host.is_some(), "{:?}", now.holder);
    assert!(
        now.holder
            .site
            .as_deref()
            .is_some_and(|s| s.contains("election.rs")),
        "{:?}",
        now.holder
    );

    // Someone else leads: a bounded campaign times out; the leader's own task is refused.
    let busy = b
        .election(name)
        .ttl(ttl)
        .wait(Duration::from_millis(200))
        .campaign()
        .await
        .expect_err("someone leads");
    assert!(matches!(busy, Error::Timeout { .. }), "{busy}");
    let again = a
        .election(name)
        .campaign()
        .await
        .expect_err("this task leads");
    assert!(matches!(again, Error::Reentrant { .. }), "{again}");

    // A candidate waits, in the observer's client; the leader resigns: the candidate leads
    // at once (its own sleep is capped by the leader's minute-long lease: the observer took
    // neither its wake-up nor its turn), and the observer sees it.
    // Its attempt (the fenced acquire script) found the lock busy once the server ran it;
    // nothing else runs a script meanwhile (the observer reads only on messages now).
    let scripts = || {
        tokio::task::block_in_place(|| server.commandstats().get("evalsha").copied()).unwrap_or(0)
    };
    let before = scripts();
    let candidate = {
        let watcher = watcher.clone();
        tokio::spawn(async move { watcher.election(name).ttl(ttl).campaign().await })
    };
    let waiting = wait_until_async(EVENT_LIMIT, || async { scripts() > before }).await;
    assert!(waiting, "the candidate never attempted");
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate was woken by the resignation")
        .expect("task")
        .expect("lead");
    assert!(
        second.term() > now.term,
        "terms {} then {}",
        now.term,
        second.term()
    );
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;

    // Nobody waits: the resignation alone tells the observer.
    second.resign().await.expect("resign");
    seen(&mut leader, "the resignation", Option::is_none).await;
    assert_eq!(pttl(&server, name).await, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_seen_gone_when_its_lease_ends() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let name = "e-dead";
    let ttl = Duration::from_millis(1500);
    let mut candidates = Candidates::start(1, &server.url(), &observer_server.url(), name, ttl);
    let (only, t) = candidates.next_leader().await;
    let watcher = connect(&server.url()).await;
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    seen(&mut leader, "the leader", |l| term(l) == Some(t)).await;
    candidates.kill(only).await;
    let killed_at = Instant::now();
    seen(&mut leader, "the dead leader gone", Option::is_none).await;
    // Its lease had at least two thirds of the ttl left (renewed every third): gone by its
    // expiry, not before.
    assert!(
        killed_at.elapsed() >= ttl / 3,
        "seen gone {:?} after the kill",
        killed_at.elapsed()
    );
    assert_eq!(pttl(&server, name).await, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_of_its_loss_before_its_servers_lease_ends() {
    let mut server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let name = "e-frozen";
    // The drift allowance is 1 % of the ttl + 2 ms: 202 ms between the leader's deadline and
    // the server's lease end, room for resuming the server and asking it on a loaded machine.
    let ttl = Duration::from_secs(20);
    let leadership = locks
        .election(name)
        .ttl(ttl)
        .campaign()
        .await
        .expect("lead");
    let mut raw = server.async_connection().await;
    server.pause();
    let lost = tokio::time::timeout(2 * ttl, leadership.lost())
        .await
        .expect("lost() fires while the server is silent");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!leadership.is_leader());
    server.resume();
    let left: i64 = redis::cmd("PTTL")
        .arg(lock_key(name))
        .query_async(&mut raw)
        .await
        .expect("PTTL");
    assert!(
        left > 0,
        "the server's lease had ended ({left}) when the leader learned of its loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_election_reports_the_quorums_term_and_outlives_a_frozen_node() {
    let mut servers = RedisServers::start(3);
    let url = servers.urls().join(",");
    let name = "e-quorum-events";
    let ttl = Duration::from_secs(30);
    let (a, b, watcher) = (
        connect(&url).await,
        connect(&url).await,
        connect(&url).await,
    );
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    let t1 = first.term();
    seen(&mut leader, "the leader", |l| term(l) == Some(t1)).await;

    servers[2].pause();
    let candidate = {
        let b = b.clone();
        tokio::spawn(async move { b.election(name).ttl(ttl).campaign().await })
    };
    first.resign().await.expect("resign on a majority");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate was woken by the resignation")
        .expect("task")
        .expect("lead");
    assert!(second.term() > t1, "terms {t1} then {}", second.term());
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;
    second.resign().await.expect("resign");
    seen(&mut leader, "the resignation", Option::is_none).await;
    servers[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_through_sentinel() {
    let deployment = RedisSentinel::start();
    let (urls, master) = (deployment.sentinel_urls(), deployment.master_name());
    let client = || async {
        Client::sentinel(urls.clone(), master)
            .await
            .expect("connect through the sentinels")
    };
    let (a, b, watcher) = (client().await, client().await, client().await);
    let name = "e-sentinel";
    let ttl = Duration::from_secs(30);
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    let t1 = first.term();
    seen(&mut leader, "the leader", |l| term(l) == Some(t1)).await;
    let candidate = {
        let b = b.clone();
        tokio::spawn(async move { b.election(name).ttl(ttl).campaign().await })
    };
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate leads after the resignation")
        .expect("task")
        .expect("lead");
    assert!(second.term() > t1, "terms {t1} then {}", second.term());
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;
    drop(second);
    seen(&mut leader, "the dropped leadership", Option::is_none).await;
}
