//! One vocabulary across primitives (`docs/vocabulary.md`), on a real server: an election's
//! single attempt (`try_campaign`) answers as a lock's `try_acquire` does, and every
//! primitive's errors name what their name is the name of.

use crate::common;

use std::time::Duration;

use common::{as_other_owner, client};
use distlock::{Error, Primitive};
use distlock_testkit::RedisServer;

/// `try_campaign` is one attempt: `Busy` (naming the election) while another process leads,
/// whatever the election's own wait, and the lead once it is free; it leaves the election's
/// wait as it was, so `campaign` still waits.
#[tokio::test]
async fn try_campaign_is_busy_while_another_leads_and_leads_when_free() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let leader = theirs
        .election("e-try")
        .try_campaign()
        .await
        .expect("the election is free");
    let election = ours.election("e-try").wait(Duration::from_secs(60));
    let busy = election.try_campaign().await.unwrap_err();
    match &busy {
        Error::Busy { name } => {
            assert_eq!(name, "e-try");
            assert_eq!(name.primitive(), Primitive::Election);
        }
        other => panic!("expected Busy, got {other}"),
    }
    assert_eq!(
        busy.to_string(),
        "election `e-try` is held by another owner"
    );
    // The same election, waiting: it leads once the leader resigns.
    let waiting = tokio::spawn({
        let election = election.clone();
        async move { election.campaign().await }
    });
    let term = leader.term();
    leader.resign().await.expect("resign");
    let next = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiting campaign led")
        .expect("no panic")
        .expect("lead");
    assert!(next.term() > term);
    next.resign().await.expect("resign");
    let again = election.try_campaign().await.expect("free again");
    assert!(again.is_leader());
    again.resign().await.expect("resign");
}

/// Each primitive's errors say what the name names, from the server's own answers: a
/// semaphore's, a read lock's, a write lock's, a set's, an election's and a plain lock's busy
/// and timeout, and a name refused before anything is sent.
#[tokio::test]
async fn errors_name_the_primitive() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let zero = Duration::ZERO;

    let permit = locks
        .semaphore("pool", 1)
        .try_acquire()
        .await
        .expect("free");
    let busy = as_other_owner(locks.semaphore("pool", 1).try_acquire())
        .await
        .unwrap_err();
    assert_eq!(
        busy.to_string(),
        "semaphore `pool` is held by another owner"
    );
    let timeout = as_other_owner(
        locks
            .semaphore("pool", 1)
            .wait(Duration::from_millis(50))
            .acquire(),
    )
    .await
    .unwrap_err();
    assert!(
        timeout
            .to_string()
            .starts_with("semaphore `pool` still busy after waiting"),
        "{timeout}"
    );
    permit.release().await.expect("release");

    let writer = locks.write("doc").try_acquire().await.expect("free");
    let read = as_other_owner(locks.read("doc").try_acquire())
        .await
        .unwrap_err();
    assert_eq!(read.to_string(), "read lock `doc` is held by another owner");
    let write = as_other_owner(locks.write("doc").wait(zero).acquire())
        .await
        .unwrap_err();
    assert_eq!(
        write.to_string(),
        "write lock `doc` is held by another owner"
    );
    let set = as_other_owner(locks.write_many(["doc", "other"]).try_acquire())
        .await
        .unwrap_err();
    assert_eq!(
        set.to_string(),
        "write lock set `[doc, other]` is held by another owner"
    );
    writer.release().await.expect("release");

    let held = locks.lock("a").try_acquire().await.expect("free");
    let lock = as_other_owner(locks.lock("a").try_acquire())
        .await
        .unwrap_err();
    assert_eq!(lock.to_string(), "lock `a` is held by another owner");
    // A set shows its names in its fixed order, by Cluster slot: `b`'s is below `a`'s.
    let set = as_other_owner(locks.lock_many(["a", "b"]).try_acquire())
        .await
        .unwrap_err();
    assert_eq!(
        set.to_string(),
        "lock set `[b, a]` is held by another owner"
    );
    assert_eq!(set.name(), Some("[b, a]"));
    held.release().await.expect("release");

    let invalid = locks.semaphore("", 2).try_acquire().await.unwrap_err();
    assert_eq!(
        invalid.to_string(),
        "invalid semaphore name ``: the name is empty"
    );
    let invalid = locks.election("").try_campaign().await.unwrap_err();
    assert!(
        invalid.to_string().starts_with("invalid election name ``"),
        "{invalid}"
    );
}
