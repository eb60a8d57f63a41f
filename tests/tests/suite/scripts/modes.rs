//! The scripts of each mode (setnx, reentrant, read/write, semaphore) and the quorum's and
//! the operators' scripts: every key declared, every argument a string.

use super::*;

#[tokio::test]
async fn setnx_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let acquire = script(&["fence.lua", "held_as.lua", "setnx/acquire.lua"]);
    let release = script(&["setnx/release.lua"]);
    let extend = script(&["setnx/extend.lua"]);
    let (lock, fence, waited) = (
        "distlock:{s}",
        "distlock:#fence:{s}",
        "distlock:#waited:{s}",
    );
    // A day and more: a ttl that Redis 7.2.0-7.2.4 would spell `1e+08` as a number.
    let long = "100000000";
    // Taken with a token on a new counter (the clock's floor), then again (INCR).
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &[lock, fence],
        &["a", long, "0", "1", "", "", "1"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let first = second(&r);
    let r = run(
        &mut c,
        "retried acquire",
        &acquire,
        &[lock, fence],
        &["a", long, "1", "1", "", "", "1"],
    )
    .await;
    // Its own hold, and a token of its own above the first: the first never reached the
    // caller, and a counter read back could have gone back since.
    assert_eq!(int(&r), 1);
    assert!(second(&r) > first, "{r:?}");
    // Busy: a waiter marks the lock, with and without a token asked for.
    let r = run(
        &mut c,
        "fenced waiter",
        &acquire,
        &[lock, fence, waited],
        &["b", "1000", "0", "1", "", "", "1", "1"],
    )
    .await;
    assert_eq!(int(&r), 0);
    let r = run(
        &mut c,
        "waiter",
        &acquire,
        &[lock, waited],
        &["b", "1000", "0", "1", "", "", "0", "1"],
    )
    .await;
    assert_eq!(int(&r), 0);
    assert_eq!(
        int(&run(&mut c, "extend", &extend, &[lock], &["a", long, ""]).await),
        100_000_000
    );
    // The mark makes the release publish (sharded, as on a Cluster; a single node has it too).
    let r = run(
        &mut c,
        "release",
        &release,
        &[lock, waited],
        &["a", "", "w1", "s", "1"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &[lock, fence],
        &["c", "1000", "0", "0", "", "", "1"],
    )
    .await;
    assert!(second(&r) > first);
    let r = run(&mut c, "release", &release, &[lock, waited], &["c"]).await;
    assert_eq!(int(&r), 1);
}

#[tokio::test]
async fn reentrant_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let acquire = script(&["fence.lua", "reentrant/acquire.lua"]);
    let release = script(&["reentrant/release.lua"]);
    let extend = script(&["reentrant/extend.lua"]);
    let (lock, fence) = ("distlock:{r}", "distlock:#fence:{r}");
    let long = "100000000";
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &[lock, fence],
        &["o:1", long, "0", "0", "n1", "h", "1"],
    )
    .await;
    let token = second(&r);
    let r = run(
        &mut c,
        "re-entry",
        &acquire,
        &[lock, fence],
        &["o:1", long, "0", "0", "n2", "h", "1"],
    )
    .await;
    assert_eq!(second(&r), token, "re-entry keeps the token");
    let stored: String = redis::cmd("HGET")
        .arg(lock)
        .arg("fence")
        .query_async(&mut c)
        .await
        .expect("HGET");
    assert_eq!(
        stored,
        token.to_string(),
        "the token is stored as its exact decimal"
    );
    assert_eq!(
        int(&run(
            &mut c,
            "busy",
            &acquire,
            &[lock],
            &["o:2", "1000", "0", "0", "n3", "h", "0"]
        )
        .await),
        0
    );
    assert!(
        int(&run(&mut c, "extend", &extend, &[lock], &["o:1", long, "n1"]).await) >= 100_000_000
    );
    assert_eq!(
        int(&run(&mut c, "release", &release, &[lock], &["o:1", "n2"]).await),
        1
    );
    assert_eq!(
        int(&run(
            &mut c,
            "release",
            &release,
            &[lock],
            &["o:1", "n1", "", "s"]
        )
        .await),
        1
    );
    // A tenure taken without a token mints one at the first re-entry that asks.
    run(
        &mut c,
        "acquire",
        &acquire,
        &[lock],
        &["o:1", long, "0", "0", "n4", "h", "0"],
    )
    .await;
    let r = run(
        &mut c,
        "fenced re-entry",
        &acquire,
        &[lock, fence],
        &["o:1", long, "0", "0", "n5", "h", "1"],
    )
    .await;
    assert!(second(&r) > token);
}

#[tokio::test]
async fn read_write_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let with_prelude = |body: &str| script(&["fence.lua", "rwlock/prelude.lua", body]);
    let write_side =
        |body: &str| script(&["fence.lua", "rwlock/prelude.lua", "rwlock/write.lua", body]);
    let (read, write) = (
        with_prelude("rwlock/read_acquire.lua"),
        write_side("rwlock/write_acquire.lua"),
    );
    let (read_release, write_release) = (
        with_prelude("rwlock/read_release.lua"),
        write_side("rwlock/write_release.lua"),
    );
    let extend = with_prelude("rwlock/extend.lua");
    let (lock, readers, intents, fence) = (
        "distlock:{rw}",
        "distlock:#readers:{rw}",
        "distlock:#intents:{rw}",
        "distlock:#fence:{rw}",
    );
    let long = "100000000";
    let r = run(
        &mut c,
        "fenced write",
        &write,
        &[lock, readers, intents, fence],
        &["w:1", long, "0", "0", "n1", "h", "1"],
    )
    .await;
    let token = second(&r);
    // The writer reads too (a downgrade), fenced: it gets the write's token.
    let r = run(
        &mut c,
        "fenced read",
        &read,
        &[lock, readers, intents, fence],
        &["w:1", long, "0", "0", "n2", "h", "1"],
    )
    .await;
    assert_eq!(second(&r), token);
    // Another writer waits: its intent.
    assert_eq!(
        int(&run(
            &mut c,
            "busy write",
            &write,
            &[lock, readers, intents],
            &["w:2", "1000", "0", "0", "n3", "h", "0", "1"]
        )
        .await),
        0
    );
    assert!(
        int(&run(
            &mut c,
            "extend",
            &extend,
            &[lock, readers, intents],
            &["w:1", long, "n1"]
        )
        .await)
            > 0
    );
    // The waiting writer gives up: its release withdraws the intent.
    assert_eq!(
        int(&run(
            &mut c,
            "withdraw",
            &write_release,
            &[lock, readers, intents],
            &["w:2", "n3", "", "s"]
        )
        .await),
        0
    );
    assert_eq!(
        int(&run(
            &mut c,
            "write release",
            &write_release,
            &[lock, readers, intents],
            &["w:1", "n1", "", "s"]
        )
        .await),
        1
    );
    assert_eq!(
        int(&run(
            &mut c,
            "read release",
            &read_release,
            &[lock, readers, intents],
            &["w:1", "n2"]
        )
        .await),
        1
    );
    let r = run(
        &mut c,
        "fenced write",
        &write,
        &[lock, readers, intents, fence],
        &["w:2", long, "0", "0", "n4", "h", "1"],
    )
    .await;
    assert!(second(&r) > token);
    // A reader of another owner waits behind it, and an operator looks and then forces.
    let _ = run(
        &mut c,
        "busy read",
        &read,
        &[lock, readers, intents],
        &["w:3", "1000", "0", "0", "n5", "h", "0", "1"],
    )
    .await;
    let forced = "distlock:#forced:{rw}";
    let (inspect, force) = (
        script(&["inspect/inspect.lua"]),
        script(&["inspect/force_unlock.lua"]),
    );
    run(
        &mut c,
        "inspect",
        &inspect,
        &[lock, fence, forced, readers, intents],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, readers, intents],
        &["why", "host=h\tpid=1", "604800000", "s"],
    )
    .await;
    assert_eq!(int(&r), 1);
}

#[tokio::test]
async fn quorum_and_operator_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let raise = script(&["fence.lua", "nodes/raise_fence.lua"]);
    let (lock, fence, forced) = (
        "distlock:{q}",
        "distlock:#fence:{q}",
        "distlock:#forced:{q}",
    );
    // A token with trailing zeros: Redis 7.2.0-7.2.4 wrote the number as `1.712345678901e+15`,
    // and every INCR of the counter failed from then on.
    let token = "1712345678901000";
    assert_eq!(
        run(&mut c, "raise", &raise, &[fence], &[token]).await,
        Value::Int(1_712_345_678_901_000)
    );
    let stored: String = redis::cmd("GET")
        .arg(fence)
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(stored, token);
    let next: i64 = redis::cmd("INCR")
        .arg(fence)
        .query_async(&mut c)
        .await
        .expect("INCR");
    assert_eq!(next, 1_712_345_678_901_001);
    let inspect = script(&["inspect/inspect.lua"]);
    let force = script(&["inspect/force_unlock.lua"]);
    let _: () = redis::cmd("SET")
        .arg(lock)
        .arg("t\tx")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut c)
        .await
        .expect("SET");
    let (readers, intents) = (rw_helper(lock, "readers"), rw_helper(lock, "intents"));
    run(
        &mut c,
        "inspect",
        &inspect,
        &[lock, fence, forced, &readers, &intents],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, &readers, &intents],
        &["why", "host=h\tpid=1", "604800000", "s"],
    )
    .await;
    assert_eq!(int(&r), 1);
}

#[tokio::test]
async fn semaphore_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let with_prelude = |body: &str| script(&["fence.lua", "semaphore/prelude.lua", body]);
    let (acquire, release, extend) = (
        with_prelude("semaphore/acquire.lua"),
        with_prelude("semaphore/release.lua"),
        with_prelude("semaphore/extend.lua"),
    );
    let (lock, fence, forced) = (
        "distlock:{sem}",
        "distlock:#fence:{sem}",
        "distlock:#forced:{sem}",
    );
    let long = "100000000";
    // Two of two permits, the first fenced (a new counter: the clock's floor).
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &[lock, fence],
        &["t1\th", long, "0", "1", "", "", "1", "0", "2"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let token = second(&r);
    assert!(token > 1_000_000_000_000_000, "the clock's floor: {token}");
    let r = run(
        &mut c,
        "acquire",
        &acquire,
        &[lock],
        &["t2\th", "1000", "0", "1", "", "", "0", "1", "2"],
    )
    .await;
    assert_eq!(int(&r), 1);
    // Full: busy, with the time until the first lease ends; another number is refused.
    let r = run(
        &mut c,
        "busy",
        &acquire,
        &[lock],
        &["t3\th", "1000", "0", "1", "", "", "0", "1", "2"],
    )
    .await;
    assert_eq!(int(&r), 0);
    assert!((1..=1000).contains(&second(&r)), "{r:?}");
    let r = run(
        &mut c,
        "another limit",
        &acquire,
        &[lock],
        &["t3\th", "1000", "0", "1", "", "", "0", "1", "3"],
    )
    .await;
    assert_eq!(
        r,
        Value::Array(vec![Value::Int(-4), Value::Int(2), Value::Int(3)])
    );
    // The limit and the leases as exact decimals.
    let scores: Vec<(String, String)> = redis::cmd("ZRANGE")
        .arg(lock)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut c)
        .await
        .expect("ZRANGE");
    assert_eq!(scores[0], ("permits".to_owned(), "-2".to_owned()));
    assert!(scores.iter().all(|(_, s)| !s.contains('e')), "{scores:?}");
    assert!(int(&run(&mut c, "extend", &extend, &[lock], &["t2\th", long, ""]).await) > 0);
    assert_eq!(
        int(&run(
            &mut c,
            "release",
            &release,
            &[lock],
            &["t2\th", "", "", "s"]
        )
        .await),
        1
    );
    assert_eq!(
        int(&run(&mut c, "released twice", &release, &[lock], &["t2\th"]).await),
        0
    );
    let inspect = script(&["inspect/inspect.lua"]);
    let force = script(&["inspect/force_unlock.lua"]);
    let (readers, intents) = (rw_helper(lock, "readers"), rw_helper(lock, "intents"));
    run(
        &mut c,
        "inspect",
        &inspect,
        &[lock, fence, forced, &readers, &intents],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, &readers, &intents],
        &["why", "host=h\tpid=1", "604800000", ""],
    )
    .await;
    assert_eq!(int(&r), 1);
}
