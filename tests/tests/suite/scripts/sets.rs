//! The scripts of a set of names (`lock_many`, `write_many`): every key declared, every
//! argument a string.

use super::*;

/// A set of names (`lock_many`): every path of its scripts, with the counters and marks of
/// each name declared after the lock keys, and the quorum's and the Cluster's raise of the
/// counters.
#[tokio::test]
async fn lock_many_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let acquire = script(&["fence.lua", "held_as.lua", "many/acquire.lua"]);
    let release = script(&["many/release.lua"]);
    let extend = script(&["many/extend.lua"]);
    let raise = script(&["fence.lua", "nodes/raise_fence.lua"]);
    let locks = ["distlock:{m1}", "distlock:{m2}"];
    let fences = ["distlock:#fence:{m1}", "distlock:#fence:{m2}"];
    let marks = ["distlock:#waited:{m1}", "distlock:#waited:{m2}"];
    let all = |parts: &[&[&'static str]]| parts.concat();
    let long = "100000000";
    // Fenced: both taken, one token, each counter raised to it.
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &all(&[&locks, &fences]),
        &["a", long, "0", "1", "", "", "1"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let token = second(&r);
    // Retried after a lost reply: its own hold, and a token of its own.
    let r = run(
        &mut c,
        "retried acquire",
        &acquire,
        &all(&[&locks, &fences]),
        &["a", long, "1", "1", "", "", "1"],
    )
    .await;
    assert_eq!(int(&r), 1);
    assert!(second(&r) > token, "{r:?}");
    // The counters are at the retry's token now (a millisecond later the clock floor is
    // above `token + 10`: raising to that would change nothing).
    let token = second(&r);
    // A waiter finds the first busy and marks it.
    let r = run(
        &mut c,
        "fenced waiter",
        &acquire,
        &all(&[&locks, &fences, &marks]),
        &["b", "1000", "0", "1", "", "", "1", "1"],
    )
    .await;
    match &r {
        Value::Array(items) => assert_eq!((int(&items[0]), int(&items[2])), (0, 1), "{r:?}"),
        other => panic!("not an answer: {other:?}"),
    }
    let r = run(
        &mut c,
        "waiter",
        &acquire,
        &all(&[&locks, &marks]),
        &["b", "1000", "0", "1", "", "", "0", "1"],
    )
    .await;
    assert_eq!(int(&r), 0);
    assert_eq!(
        int(&run(&mut c, "extend", &extend, &locks, &["a", long, ""]).await),
        100_000_000
    );
    let r = run(
        &mut c,
        "raise",
        &raise,
        &fences,
        &[&(token + 10).to_string()],
    )
    .await;
    assert_eq!(int(&r), token + 10);
    let r = run(
        &mut c,
        "release",
        &release,
        &all(&[&locks, &marks]),
        &["a", "", "w1", "s", "1"],
    )
    .await;
    assert_eq!(int(&r), 1);
    // One name held by another: busy, and the free one is left free.
    let _: () = redis::cmd("SET")
        .arg(locks[1])
        .arg("other")
        .arg("PX")
        .arg("5000")
        .query_async(&mut c)
        .await
        .expect("SET");
    let r = run(
        &mut c,
        "busy",
        &acquire,
        &locks,
        &["c", "1000", "0", "0", "", "", "0"],
    )
    .await;
    assert_eq!(int(&r), 0);
    let free: bool = redis::cmd("EXISTS")
        .arg(locks[0])
        .query_async(&mut c)
        .await
        .expect("EXISTS");
    assert!(!free, "nothing taken in part");
    let r = run(&mut c, "release", &release, &all(&[&locks, &marks]), &["c"]).await;
    assert_eq!(int(&r), 0);
}

/// A write set (`write_many`): every path of its scripts, with each name's readers, intents
/// and counter declared after the lock hashes, kind by kind; a waiting set's intents on each
/// name, its give-up, a retry after a lost reply, a re-entry into a name the owner writes,
/// and the refusal of a name the owner only reads.
#[tokio::test]
async fn write_many_scripts_touch_only_declared_keys_and_pass_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let set_script = |body: &str| {
        script(&[
            "fence.lua",
            "rwlock/prelude.lua",
            "rwlock/write.lua",
            "many/write_head.lua",
            body,
        ])
    };
    let (acquire, release, extend) = (
        set_script("many/write_acquire.lua"),
        set_script("many/write_release.lua"),
        set_script("many/write_extend.lua"),
    );
    let one = |body: &str| script(&["fence.lua", "rwlock/prelude.lua", "rwlock/write.lua", body]);
    let write = one("rwlock/write_acquire.lua");
    let read = script(&["fence.lua", "rwlock/prelude.lua", "rwlock/read_acquire.lua"]);
    let locks = ["distlock:{s1}", "distlock:{s2}"];
    let readers = ["distlock:#readers:{s1}", "distlock:#readers:{s2}"];
    let intents = ["distlock:#intents:{s1}", "distlock:#intents:{s2}"];
    let fences = ["distlock:#fence:{s1}", "distlock:#fence:{s2}"];
    let keys: Vec<&str> = [&locks[..], &readers, &intents].concat();
    let fenced: Vec<&str> = [&keys[..], &fences].concat();
    let long = "100000000";
    // Fenced: both taken, one token; retried after a lost reply, its own hold.
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &fenced,
        &["w:1", long, "0", "0", "n1", "h", "1"],
    )
    .await;
    assert_eq!(int(&r), 1, "{r:?}");
    let token = second(&r);
    let r = run(
        &mut c,
        "retried acquire",
        &acquire,
        &fenced,
        &["w:1", long, "1", "0", "n1", "h", "1"],
    )
    .await;
    assert_eq!(int(&r), 1, "{r:?}");
    assert!(second(&r) > token, "{r:?}");
    // Another owner waits: busy at the first name, its intents registered.
    let r = run(
        &mut c,
        "waiting set",
        &acquire,
        &keys,
        &["w:2", "1000", "0", "0", "n2", "h", "0", "1"],
    )
    .await;
    match &r {
        Value::Array(items) => assert_eq!((int(&items[0]), int(&items[2])), (0, 1), "{r:?}"),
        other => panic!("not an answer: {other:?}"),
    }
    assert!(int(&run(&mut c, "extend", &extend, &keys, &["w:1", long, "n1"]).await) > 0);
    assert_eq!(
        int(&run(
            &mut c,
            "extend, not ours",
            &extend,
            &keys,
            &["w:2", long, "n2"]
        )
        .await),
        0
    );
    // The waiter gives up: its release withdraws its intents.
    assert_eq!(
        int(&run(&mut c, "withdraw", &release, &keys, &["w:2", "n2", "", "s"]).await),
        0
    );
    assert_eq!(
        int(&run(&mut c, "release", &release, &keys, &["w:1", "n1", "", "s"]).await),
        1
    );
    assert_eq!(
        int(&run(&mut c, "retried release", &release, &keys, &["w:1", "n1"]).await),
        0
    );
    // The owner writes the first name alone, then takes the set: a re-entry there, which its
    // release leaves held.
    let r = run(
        &mut c,
        "single write",
        &write,
        &[locks[0], readers[0], intents[0]],
        &["w:3", long, "0", "0", "n3", "h", "0"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let r = run(
        &mut c,
        "re-entering set",
        &acquire,
        &keys,
        &["w:3", long, "0", "0", "n4", "h", "0"],
    )
    .await;
    assert_eq!(int(&r), 1, "{r:?}");
    assert_eq!(
        int(&run(&mut c, "release", &release, &keys, &["w:3", "n4"]).await),
        1
    );
    let held: bool = redis::cmd("HEXISTS")
        .arg(locks[0])
        .arg("writer")
        .query_async(&mut c)
        .await
        .expect("HEXISTS");
    assert!(held, "the outer write hold stays");
    // An owner reading the second name only: refused at once, nothing taken.
    let r = run(
        &mut c,
        "read",
        &read,
        &[locks[1], readers[1], intents[1]],
        &["w:4", long, "0", "0", "n5", "h", "0"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let r = run(
        &mut c,
        "upgrade",
        &acquire,
        &keys,
        &["w:4", long, "0", "0", "n6", "h", "0", "1"],
    )
    .await;
    match &r {
        Value::Array(items) => assert_eq!((int(&items[0]), int(&items[2])), (-2, 2), "{r:?}"),
        other => panic!("not an answer: {other:?}"),
    }
    // A setnx lock on a name: another mode, named by its place.
    let _: () = redis::cmd("SET")
        .arg("distlock:{s3}")
        .arg("x")
        .arg("PX")
        .arg("5000")
        .query_async(&mut c)
        .await
        .expect("SET");
    let keys3 = [
        "distlock:{s3}",
        "distlock:#readers:{s3}",
        "distlock:#intents:{s3}",
    ];
    let r = run(
        &mut c,
        "setnx name",
        &acquire,
        &keys3,
        &["w:5", long, "0", "0", "n7", "h", "0"],
    )
    .await;
    match &r {
        Value::Array(items) => assert_eq!((int(&items[0]), int(&items[2])), (-3, 1), "{r:?}"),
        other => panic!("not an answer: {other:?}"),
    }
}
