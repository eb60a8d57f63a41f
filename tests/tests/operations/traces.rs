//! Tracing spans and events, and metrics, of a contended acquire, a forced unlock and a failed
//! renewal.

use super::*;

// ---------------------------------------------------------------------------------------------
// Tracing and metrics.

#[tokio::test]
async fn a_contended_acquire_is_traced_and_measured_by_template_not_by_name() {
    metrics_on();
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let holder = locks
        .lock("order:7")
        .label("traced-order:<id>")
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    assert_eq!(
        gauge(
            "distlock_locks_held",
            &[("mode", "setnx"), ("label", "traced-order:<id>")]
        ),
        1.0
    );
    let err = as_other_owner(
        locks
            .lock("order:7")
            .label("traced-order:<id>")
            .wait(Duration::from_millis(150))
            .acquire(),
    )
    .await
    .expect_err("held");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let busy = as_other_owner(
        locks
            .lock("order:7")
            .label("traced-order:<id>")
            .try_acquire(),
    )
    .await
    .expect_err("held");
    assert!(matches!(busy, Error::Busy { .. }), "{busy:?}");
    holder.release().await.expect("release");

    let spans = trace.spans("distlock.acquire");
    let outcomes: Vec<&str> = spans.iter().filter_map(|s| s.get("outcome")).collect();
    assert_eq!(outcomes, ["acquired", "timeout", "busy"], "{spans:#?}");
    let acquired = &spans[0];
    assert_eq!(acquired.level, Level::INFO);
    assert_eq!(acquired.get("mode"), Some("setnx"));
    assert_eq!(acquired.get("label"), Some("traced-order:<id>"));
    assert!(acquired
        .get("fencing_token")
        .is_some_and(|t| t.parse::<u64>().is_ok()));
    assert_eq!(acquired.get("attempts"), Some("1"));
    let timeout = &spans[1];
    assert!(timeout.get("attempts").unwrap().parse::<u32>().unwrap() >= 1);
    assert!(timeout.get("waited_ms").unwrap().parse::<u64>().unwrap() >= 150);
    // The rendered name never appears unless asked for.
    for c in trace.all() {
        assert!(
            !c.fields
                .values()
                .chain(c.scope.values())
                .any(|v| v.contains("order:7")),
            "the rendered name leaked: {c:?}"
        );
    }
    let waited = trace.events("still busy after waiting");
    assert_eq!(waited.len(), 1);
    assert_eq!(waited[0].level, Level::INFO);
    let released = trace.events("lock released");
    assert_eq!(released.len(), 1);
    assert!(released[0].get("held_ms").is_some());

    let l = |outcome| {
        histogram(
            "distlock_acquire_seconds",
            &[
                ("mode", "setnx"),
                ("label", "traced-order:<id>"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(l("acquired").len(), 1);
    let timeouts = l("timeout");
    assert_eq!(timeouts.len(), 1);
    assert!(timeouts[0] >= 0.15, "{timeouts:?}");
    assert_eq!(l("busy").len(), 1);
    let held = histogram(
        "distlock_hold_seconds",
        &[("mode", "setnx"), ("label", "traced-order:<id>")],
    );
    assert_eq!(held.len(), 1);
    assert_eq!(
        gauge(
            "distlock_locks_held",
            &[("mode", "setnx"), ("label", "traced-order:<id>")]
        ),
        0.0
    );

    // Opting in records the name.
    let g = locks
        .lock("order:8")
        .label("traced-order:<id>")
        .record_name(true)
        .acquire()
        .await
        .expect("free");
    g.release().await.expect("release");
    let last = trace.spans("distlock.acquire").pop().unwrap();
    assert_eq!(last.get("name"), Some("order:8"));
}

#[tokio::test]
async fn a_forced_unlock_and_the_lease_loss_it_causes_are_warned_and_counted() {
    metrics_on();
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = "forced-job";
    let guard = locks
        .reentrant(name)
        .label("forced-job")
        .ttl(Duration::from_secs(2))
        .renew_every(Duration::from_millis(100))
        .acquire()
        .await
        .expect("free");
    // A waiter in another task: the forced unlock wakes it long before the 2 s lease could end.
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let started = Instant::now();
            let g = locks
                .reentrant(name)
                .wait(EVENT_LIMIT)
                .acquire()
                .await
                .expect("the waiter gets the lock");
            let waited = started.elapsed();
            g.release().await.expect("release");
            waited
        }
    });
    let err = locks
        .force_unlock(name, "  ")
        .await
        .expect_err("a reason is required");
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    assert!(locks
        .force_unlock(name, "holder stuck, ticket 42")
        .await
        .expect("forced"));
    tokio::time::timeout(EVENT_LIMIT, guard.lost())
        .await
        .expect("the holder learns it lost the lock");
    assert!(!guard.is_held());
    waiter.await.expect("waiter");
    drop(guard);

    let forced = trace.events("forcibly unlocked");
    assert_eq!(forced.len(), 1, "{:#?}", trace.all());
    assert_eq!(forced[0].level, Level::WARN);
    assert_eq!(forced[0].get("reason"), Some("holder stuck, ticket 42"));
    assert_eq!(forced[0].get("mode"), Some("reentrant"));
    let lost = trace.events("lease lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    assert_eq!(lost[0].get("label"), Some("forced-job"));

    assert_eq!(
        counter("distlock_forced_unlocks_total", &[("mode", "reentrant")]),
        1
    );
    assert_eq!(
        counter(
            "distlock_leases_lost_total",
            &[("mode", "reentrant"), ("label", "forced-job")]
        ),
        1
    );
    let info = locks.inspect(name).await.expect("inspect");
    let record = info.last_forced_unlock.expect("the record is kept");
    assert_eq!(record.reason, "holder stuck, ticket 42");
    assert_eq!(record.mode, Some(distlock::LockMode::Reentrant));
    assert!(record.by.contains(&format!("pid={}", std::process::id())));
    assert!(SystemTime::now().duration_since(record.at).unwrap() < Duration::from_secs(60));
    // Nothing to unlock now.
    assert!(!locks.force_unlock(name, "again").await.expect("nothing"));
}

#[tokio::test]
async fn a_failed_renewal_is_warned_and_counted() {
    metrics_on();
    let (trace, _guard) = capture();
    let mut server = RedisServer::start();
    let locks = distlock::Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let guard = locks
        .lock("renew-fails")
        .label("renew-fails")
        .ttl(Duration::from_millis(1500))
        .renew_every(Duration::from_millis(100))
        .acquire()
        .await
        .expect("free");
    server.pause();
    tokio::time::timeout(EVENT_LIMIT, guard.lost())
        .await
        .expect("the lease runs out while the server is frozen");
    server.resume();
    assert!(!trace.events("renewal failed").is_empty());
    assert!(trace
        .events("renewal failed")
        .iter()
        .all(|e| e.level == Level::WARN));
    assert_eq!(trace.events("lease lost").len(), 1);
    assert!(
        counter(
            "distlock_renewals_failed_total",
            &[("mode", "setnx"), ("label", "renew-fails")]
        ) >= 1
    );
    drop(guard);
}
