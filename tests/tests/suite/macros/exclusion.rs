//! Mutual exclusion: concurrent calls in one process and across processes.

use super::*;

/// One critical section, checked by the observer's occupancy probe, its non-atomic counter and
/// its fence (the fencing token comes from `distlock::lease()`).
#[distributed_lock(
    key = "mutex:<name>",
    client = locks,
    ttl = "5s",
    wait = "30s",
    fencing = true
)]
async fn section(
    locks: &Client,
    name: &str,
    observer: &Observer,
) -> Result<distlock::FencingToken, AppError> {
    let fence = distlock::lease()
        .expect("inside a locked fn")
        .fencing_token()
        .expect("fencing = true");
    observer.enter().await;
    assert!(observer.fence(fence).await, "fencing token went backwards");
    observer.bump(Duration::from_micros(200)).await;
    observer.exit().await;
    Ok(fence)
}

/// `tasks` tasks calling `section` `calls` times each; returns the calls made.
async fn contend(locks: &Client, observer: &Observer, tasks: usize, calls: usize) -> usize {
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locks, observer) = (locks.clone(), observer.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..calls {
                section(&locks, observer.name(), &observer)
                    .await
                    .expect("section");
            }
        }));
    }
    for handle in handles {
        handle.await.expect("contender task");
    }
    tasks * calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_exclude_each_other() {
    let (server, probe) = (RedisServer::start(), RedisServer::start());
    let locks = client(&server).await;
    let observer = Observer::connect(&probe.url(), "tasks").await;
    let calls = contend(&locks, &observer, 8, 25).await;
    assert_safe(&observer).await;
    assert_eq!(observer.acked().await, calls as u64);
    assert!(!exists(&redis(&server).await, "mutex:tasks").await);
}

/// Environment of the child processes this binary starts (see `child_contender`).
const CHILD_LOCKS: &str = "DISTLOCK_MACROS_CHILD_LOCKS";
const CHILD_PROBE: &str = "DISTLOCK_MACROS_CHILD_PROBE";
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_exclude_each_other() {
    let (server, probe) = (RedisServer::start(), RedisServer::start());
    let locks = client(&server).await;
    let observer = Observer::connect(&probe.url(), "processes").await;
    let envs = [(CHILD_LOCKS, server.url()), (CHILD_PROBE, probe.url())];
    let children: Vec<_> = (0..2)
        .map(|_| spawn_child("exclusion::child_contender", &envs))
        .collect();
    // This process contends too, so the sections interleave across three processes.
    let here = contend(&locks, &observer, 4, 20).await;
    for child in children {
        let said = finish_child(child);
        assert!(said.contains("CALLS 80"), "child said {said:?}");
    }
    assert_safe(&observer).await;
    assert_eq!(observer.acked().await, (here + 2 * 80) as u64);
}

/// The second process of `two_processes_exclude_each_other`; does nothing when run directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a child process of two_processes_exclude_each_other"]
async fn child_contender() {
    let (Ok(url), Ok(probe)) = (std::env::var(CHILD_LOCKS), std::env::var(CHILD_PROBE)) else {
        return;
    };
    let locks = Client::connect(&url).await.expect("connect");
    let observer = Observer::connect(&probe, "processes").await;
    let calls = contend(&locks, &observer, 4, 20).await;
    println!("CALLS {calls}");
}
