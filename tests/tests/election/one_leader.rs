//! One leader at a time, with strictly increasing terms, through kills, stops and
//! resignations of candidate processes: on one node, a quorum and a Redis Cluster.

use super::*;

/// Three candidate processes on `url` with leases of `ttl`: the leader is killed (`kill -9`),
/// the next stopped (`SIGSTOP`) until the third took over and acted, then resumed (it must
/// report the loss, and never act while the other leads), then the leader resigns and the
/// resumed one takes over. An observer in this process follows it all. Exactly one leader
/// acts at a time (the observer server refuses no action as stale), and terms increase.
async fn one_leader_at_a_time(url: &str, ttl: Duration, name: &str) {
    let observer_server = RedisServer::start();
    let observer = Observer::connect(&observer_server.url(), name).await;
    let watcher = connect(url).await;
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    // Every leader the observer reports, in order.
    let history = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let (mut leader, history) = (leader.clone(), history.clone());
        tokio::spawn(async move {
            loop {
                if let Some(now) = &*leader.borrow_and_update() {
                    history.lock().expect("history").push(now.term);
                }
                if leader.changed().await.is_err() {
                    return;
                }
            }
        })
    };
    let mut candidates = Candidates::start(3, url, &observer_server.url(), name, ttl);

    let (first, t1) = candidates.next_leader().await;
    acts_of(&observer, t1).await;
    seen(&mut leader, "the first leader", |l| term(l) == Some(t1)).await;

    // A leader killed: the next one leads once its lease ran out.
    candidates.kill(first).await;
    let killed_at = Instant::now();
    let (second, t2) = candidates.next_leader().await;
    assert!(t2 > t1, "terms {t1} then {t2}");
    assert!(
        killed_at.elapsed() >= ttl / 3,
        "the next leader took over {:?} after the kill, before the lease could end",
        killed_at.elapsed()
    );
    acts_of(&observer, t2).await;
    seen(&mut leader, "the second leader", |l| term(l) == Some(t2)).await;

    // A leader stopped past its lease: the third takes over, and the stopped one, resumed,
    // reports the loss.
    candidates.signal(second, libc::SIGSTOP);
    let (third, t3) = candidates.next_leader().await;
    assert_ne!(third, second);
    assert!(t3 > t2, "terms {t2} then {t3}");
    acts_of(&observer, t3).await;
    candidates.signal(second, libc::SIGCONT);
    let (_, lost) = candidates
        .expect("the resumed leader's loss", |i, l| {
            i == second && l.starts_with("LOST ")
        })
        .await;
    assert_eq!(term_in(&lost), t2);
    // It acted no more: the third still leads and acts.
    let acts = observer.acts().await;
    assert!(wait_until_async(EVENT_LIMIT, || async { observer.acts().await > acts + 10 }).await);
    assert_eq!(observer.terms().await.last(), Some(&t3));

    // A resignation: the resumed candidate takes over.
    candidates.send(third, "resign").await;
    candidates
        .expect("the resignation", |i, l| {
            i == third && l == format!("RESIGNED {t3}")
        })
        .await;
    let (fourth, t4) = candidates.next_leader().await;
    assert_eq!(fourth, second);
    assert!(t4 > t3, "terms {t3} then {t4}");
    acts_of(&observer, t4).await;
    seen(&mut leader, "the fourth leader", |l| term(l) == Some(t4)).await;

    assert_eq!(observer.stale_terms().await, 0, "two leaders acted at once");
    assert_eq!(observer.terms().await, [t1, t2, t3, t4]);
    assert!(
        candidates.unexpected_from(second).is_empty(),
        "{:?}",
        candidates.unexpected_from(second)
    );
    eprintln!(
        "{name}: terms {t1} {t2} {t3} {t4}, {} actions, {} refused as late",
        observer.acts().await,
        observer.late().await
    );
    recorder.abort();
    let observed = history.lock().expect("history").clone();
    assert!(
        observed.windows(2).all(|w| w[0] <= w[1]) && observed.last() == Some(&t4),
        "the observer's terms went back: {observed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_one_node() {
    let server = RedisServer::start();
    one_leader_at_a_time(&server.url(), Duration::from_millis(1000), "e-node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_a_quorum() {
    let servers = RedisServers::start(3);
    one_leader_at_a_time(
        &servers.urls().join(","),
        Duration::from_millis(1500),
        "e-quorum",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_a_cluster() {
    let cluster = RedisCluster::start();
    let url = format!("cluster:{}", cluster.urls().join(","));
    one_leader_at_a_time(&url, Duration::from_millis(1500), "e-cluster").await;
}
