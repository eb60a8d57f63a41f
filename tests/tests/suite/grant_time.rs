//! When a hold was granted, as operators read it (`Holder::acquired_at`, the CLI's
//! "acquired at"): the time of the attempt the server granted, not the start of a wait or of
//! an outage the acquisition waited through.

use crate::common;

use std::time::{Duration, SystemTime};

use common::client;
use distlock::Client;
use distlock_testkit::RedisServer;

/// Slack for the clocks of one machine: the description's time is the granted attempt's send
/// time, read through a per-thread reading at most a second old moved on by the monotonic
/// clock (`identity::unix_ms_at`).
const SLACK: Duration = Duration::from_millis(50);

async fn acquired_at(locks: &Client, name: &str) -> SystemTime {
    let info = locks.inspect(name).await.expect("inspect");
    let at = info.holder.as_ref().and_then(|h| h.acquired_at);
    at.unwrap_or_else(|| panic!("{name} has a holder with a time: {info:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_after_a_wait_says_when_it_was_granted() {
    let server = RedisServer::start();
    let (first, second) = (client(&server).await, client(&server).await);
    for (name, reentrant) in [("granted:setnx", false), ("granted:reentrant", true)] {
        let take = move |locks: Client| async move {
            let request = if reentrant {
                locks.reentrant(name)
            } else {
                locks.lock(name)
            };
            request.wait(Duration::from_secs(10)).acquire().await
        };
        let held = take(first.clone()).await.expect("free");
        let waiting = tokio::spawn(take(second.clone()));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let released_at = SystemTime::now();
        held.release().await.expect("release");
        let guard = waiting
            .await
            .expect("no panic")
            .expect("taken after the release");
        let at = acquired_at(&second, name).await;
        assert!(
            at + SLACK >= released_at,
            "{name}: acquired at {at:?}, released by the first holder at {released_at:?}"
        );
        guard.release().await.expect("release");
    }
}

/// A leader elected once Redis is back says so: not when its campaign began, during the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_elected_after_an_outage_says_when_redis_granted_it() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    server.kill();
    let campaign = {
        let election = locks.election("granted:leader");
        tokio::spawn(async move { election.campaign().await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let back_at = SystemTime::now();
    server.restart();
    let leadership = tokio::time::timeout(Duration::from_secs(15), campaign)
        .await
        .expect("elected once Redis is back")
        .expect("no panic")
        .expect("leads");
    let at = acquired_at(&locks, "granted:leader").await;
    assert!(
        at + SLACK >= back_at,
        "acquired at {at:?}, Redis back at {back_at:?}"
    );
    leadership.resign().await.expect("resign");
}

/// The CLI's report of a held lock: when, in UTC and as an age, not unix milliseconds.
#[tokio::test]
async fn the_cli_shows_the_grant_time_and_its_age() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let guard = locks.lock("granted:cli").acquire().await.expect("free");
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        server.url(),
        "inspect".into(),
        "granted:cli".into(),
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("acquired at: "))
        .unwrap_or_else(|| panic!("no grant time: {out}"));
    let shown = line.trim_start().trim_start_matches("acquired at: ");
    // `2026-11-29T07:12:03.120Z (0 s ago)`
    let (time, age) = shown.split_once(' ').expect("a time and an age");
    assert_eq!(time.len(), 24, "{line}");
    assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{line}");
    assert!(
        age == "(0 s ago)" || age == "(1 s ago)",
        "a lock just taken: {line}"
    );
    assert!(!out.contains("unix ms"), "{out}");
    guard.release().await.expect("release");
}
