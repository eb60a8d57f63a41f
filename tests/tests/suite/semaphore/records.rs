//! Fencing tokens per permit, inspection, and the refusals: other modes on the name, a quorum
//! client.

use super::*;

/// Every holder's fenced permit gets a token of its own, each above every token minted
/// before for the name (the counter beside the semaphore, in its slot).
#[tokio::test]
async fn fencing_tokens_are_per_permit_and_increase() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut last = distlock::FencingToken::new(0);
    let mut held = Vec::new();
    for _ in 0..3 {
        let guard = locks
            .semaphore("fenced", 3)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let token = guard.fencing_token().expect("fencing(true)");
        assert!(token > last, "{token} after {last}");
        last = token;
        held.push(guard);
    }
    // Without fencing: no token, and the order of the tokens is left alone.
    held.remove(0).release().await.expect("release");
    let plain = locks
        .semaphore("fenced", 3)
        .try_acquire()
        .await
        .expect("free");
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.expect("release");
    let next = locks
        .semaphore("fenced", 3)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(next.fencing_token().expect("fencing(true)") > last);
    let counter: u64 = server
        .async_connection()
        .await
        .get(fence_key("fenced"))
        .await
        .expect("GET");
    assert_eq!(
        Some(counter),
        next.fencing_token().map(distlock::FencingToken::get)
    );
    next.release().await.expect("release");
    for guard in held {
        guard.release().await.expect("release");
    }
}

#[tokio::test]
async fn inspect_shows_the_permits_and_their_holders() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let free = locks.inspect("shown").await.expect("inspect");
    assert!(!free.is_held() && free.permits.is_none() && free.permit_holders.is_empty());
    let a = locks
        .semaphore("shown", 4)
        .ttl(Duration::from_secs(20))
        .try_acquire()
        .await
        .expect("free");
    let b = locks
        .semaphore("shown", 4)
        .ttl(Duration::from_secs(60))
        .try_acquire()
        .await
        .expect("free");
    let info = locks.inspect("shown").await.expect("inspect");
    assert!(info.is_held());
    assert_eq!(info.mode, Some(LockMode::Semaphore));
    assert_eq!(info.permits, Some(4));
    assert_eq!(info.hold_count, 2);
    assert_eq!(info.permit_holders.len(), 2);
    assert!(info.holder.is_none(), "no single holder");
    // Earliest lease end first; each with its own remaining lease and who took it.
    let (first, second) = (&info.permit_holders[0], &info.permit_holders[1]);
    assert!(
        first.remaining <= Duration::from_secs(20) && first.remaining > Duration::from_secs(10)
    );
    assert!(second.remaining > Duration::from_secs(50));
    for permit in &info.permit_holders {
        assert_eq!(permit.holder.pid, Some(std::process::id()));
        let site = permit.holder.site.as_deref().expect("the call site");
        assert!(site.contains("semaphore/records.rs"), "{site}");
        assert!(permit.holder.acquired_at.is_some());
    }
    assert_ne!(first.holder.owner, second.holder.owner);
    assert!(info.remaining.expect("the key's lease") > Duration::from_secs(50));
    a.release().await.expect("release");
    b.release().await.expect("release");
    assert!(!locks.inspect("shown").await.expect("inspect").is_held());
}

/// One name is one lock of one mode: a semaphore found by another mode, or another mode's
/// lock found by a semaphore, is a mode conflict (not the application's data), and nothing
/// is changed; a sorted set that is not a semaphore is the application's.
#[tokio::test]
async fn a_semaphore_and_the_other_modes_report_each_other_as_mode_conflicts() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks
        .semaphore("shared-name", 2)
        .try_acquire()
        .await
        .expect("free");
    let before = members(&server, "shared-name").await;
    // setnx three ways: the plain `SET .. NX PX .. GET`, a waiter's `SET .. NX PX` and its
    // script, the fencing script.
    for (mode, request, waits) in [
        (LockMode::SetNx, locks.lock("shared-name"), false),
        (LockMode::SetNx, locks.lock("shared-name"), true),
        (
            LockMode::SetNx,
            locks.lock("shared-name").fencing(true),
            false,
        ),
        (LockMode::Reentrant, locks.reentrant("shared-name"), false),
        (LockMode::Read, locks.read("shared-name"), false),
        (LockMode::Write, locks.write("shared-name"), false),
    ] {
        let err = as_other_owner(async {
            if waits {
                request.wait(EVENT_LIMIT).acquire().await
            } else {
                request.try_acquire().await
            }
        })
        .await
        .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ModeConflict { held_as: LockMode::Semaphore, requested, .. }
                    if *requested == mode
            ),
            "{mode}: {err}"
        );
    }
    assert_eq!(members(&server, "shared-name").await, before);
    held.release().await.expect("release");

    for (name, held_as) in [
        ("n-setnx", LockMode::SetNx),
        ("n-re", LockMode::Reentrant),
        ("n-read", LockMode::Read),
        ("n-write", LockMode::Write),
    ] {
        let guard = match held_as {
            LockMode::SetNx => locks.lock(name).try_acquire().await,
            LockMode::Reentrant => locks.reentrant(name).try_acquire().await,
            LockMode::Read => locks.read(name).try_acquire().await,
            _ => locks.write(name).try_acquire().await,
        }
        .expect("free");
        let err = as_other_owner(locks.semaphore(name, 2).try_acquire())
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ModeConflict { held_as: found, requested: LockMode::Semaphore, .. }
                    if *found == held_as
            ),
            "{held_as}: {err}"
        );
        guard.release().await.expect("release");
    }

    let mut raw = server.async_connection().await;
    let _: () = raw.zadd(lock_key("app"), "x", 1).await.expect("ZADD");
    let _: () = raw.pexpire(lock_key("app"), 60_000).await.expect("PEXPIRE");
    for attempt in [
        locks.semaphore("app", 2).try_acquire(),
        locks.lock("app").try_acquire(),
        locks.reentrant("app").try_acquire(),
        locks.write("app").try_acquire(),
    ] {
        let err = attempt.await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{err}");
    }
    let left: Vec<(String, f64)> = raw
        .zrange_withscores(lock_key("app"), 0, -1)
        .await
        .expect("ZRANGE");
    assert_eq!(
        left,
        [("x".to_owned(), 1.0)],
        "the application's data is untouched"
    );
}

/// A Redlock quorum cannot bound the holders by the limit: the request is refused, and
/// nothing reaches the nodes.
#[tokio::test]
async fn a_quorum_client_refuses_a_semaphore() {
    let nodes = RedisServers::start(3);
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect to the quorum");
    let err = locks.semaphore("q", 2).try_acquire().await.unwrap_err();
    match &err {
        Error::InvalidConfig { reason } => {
            assert!(reason.contains("not on a Redlock quorum"), "{reason}");
            assert!(reason.contains("does not bound the holders"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other}"),
    }
    for node in nodes.iter() {
        assert_eq!(node.commandstats().get("evalsha"), None, "nothing was sent");
    }
}
