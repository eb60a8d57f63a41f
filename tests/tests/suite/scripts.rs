//! What the scripts touch, and how they behave on servers that differ from the one they were
//! written on.
//!
//! * Every key a script reads or writes is declared in its KEYS (Redis Cluster and ACL key
//!   patterns rely on the declaration; Redis 7.0 does not enforce it, so a checking wrapper
//!   around `redis.call` does, on a real server).
//! * Every argument a script passes to `redis.call` is a string: Redis 7.2.0 to 7.2.4 turn a
//!   Lua number into text as `1.8e+15`, after which the counter (or the ttl) is refused.
//! * A release whose `PUBLISH` fails (`SPUBLISH` on a Redis 6 Cluster) still frees the lock and
//!   says so; publishing is best-effort.
//! * A server that refuses `SET .. NX .. GET` (Redis 6) changes how the acquisitions on that
//!   server are sent, not those of other clients on other servers.

use crate::common;

use std::time::Duration;

use common::{as_other_owner, client};
use distlock::Client;
use distlock_testkit::RedisServer;
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A script's source as the library composes it: the files under `distlock/src`, in order.
pub(crate) fn script(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|part| {
            let path = format!("{}/../distlock/src/{part}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Put in front of a script, this `redis` shadows Redis's own: every command the script runs
/// goes through it, and it fails the script (with `SHIM:` in the error) when an argument is
/// not a string or a key the command touches is not one of the script's KEYS.
const CHECKED: &str = r#"
local real = redis
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end
local keyless = {time = true, publish = true, spublish = true}
local function fault(cmd, ...)
  local n = select('#', ...)
  local args = {...}
  local name = string.lower(cmd)
  local last = 1
  if keyless[name] then last = 0 end
  if name == 'del' or name == 'exists' then last = n end
  for i = 1, math.min(last, n) do
    if not declared[args[i]] then
      return cmd .. ' touches `' .. tostring(args[i]) .. '`, which is not among the KEYS'
    end
  end
  for i = 1, n do
    if type(args[i]) ~= 'string' then
      return 'argument ' .. i .. ' of ' .. cmd .. ' is a ' .. type(args[i]) .. ' (' .. tostring(args[i]) .. ')'
    end
  end
  return nil
end
local redis = setmetatable({
  call = function(cmd, ...)
    local bad = fault(cmd, ...)
    if bad then error('SHIM: ' .. bad) end
    return real.call(cmd, ...)
  end,
  pcall = function(cmd, ...)
    local bad = fault(cmd, ...)
    if bad then error('SHIM: ' .. bad) end
    return real.pcall(cmd, ...)
  end,
}, {__index = real})
"#;

/// Runs `source` behind [`CHECKED`] on `server`; a failure of the check fails the test.
pub(crate) async fn run(
    conn: &mut redis::aio::MultiplexedConnection,
    what: &str,
    source: &str,
    keys: &[&str],
    args: &[&str],
) -> Value {
    let mut eval = redis::cmd("EVAL");
    eval.arg(format!("{CHECKED}\n{source}")).arg(keys.len());
    for k in keys {
        eval.arg(*k);
    }
    for a in args {
        eval.arg(*a);
    }
    match eval.query_async::<Value>(conn).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::Array(items) => int(&items[0]),
        other => panic!("not a number: {other:?}"),
    }
}

/// A read/write lock helper key (`readers`, `intents`) beside the lock key `lock` (whose
/// prefix is `distlock`): what inspect and force unlock declare for any name.
fn rw_helper(lock: &str, kind: &str) -> String {
    lock.replacen("distlock:", &format!("distlock:#{kind}:"), 1)
}

/// The second item of a `{status, value}` reply.
fn second(v: &Value) -> i64 {
    match v {
        Value::Array(items) => int(&items[1]),
        other => panic!("not a pair: {other:?}"),
    }
}

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
        &[
            lock,
            fence,
            forced,
            readers,
            intents,
            &rw_helper(lock, "slots"),
        ],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, readers, intents, &rw_helper(lock, "slots")],
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
    let slots = rw_helper(lock, "slots");
    run(
        &mut c,
        "inspect",
        &inspect,
        &[lock, fence, forced, &readers, &intents, &slots],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, &readers, &intents, &slots],
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
    let slots = rw_helper(lock, "slots");
    let slots = slots.as_str();
    // Two of two permits, the first fenced (a new counter: the clock's floor) and in permit
    // slot 0.
    let r = run(
        &mut c,
        "fenced acquire",
        &acquire,
        &[lock, slots, fence],
        &["t1\th", long, "0", "1", "", "", "1", "0", "2"],
    )
    .await;
    assert_eq!(int(&r), 1);
    let token = second(&r);
    assert!(token > 1_000_000_000_000_000, "the clock's floor: {token}");
    assert_eq!(
        r,
        Value::Array(vec![Value::Int(1), Value::Int(token), Value::Int(0)])
    );
    let r = run(
        &mut c,
        "acquire",
        &acquire,
        &[lock, slots],
        &["t2\th", "1000", "0", "1", "", "", "0", "1", "2"],
    )
    .await;
    assert_eq!(int(&r), 1);
    // Full: busy, with the time until the first lease ends; another number is refused.
    let r = run(
        &mut c,
        "busy",
        &acquire,
        &[lock, slots],
        &["t3\th", "1000", "0", "1", "", "", "0", "1", "2"],
    )
    .await;
    assert_eq!(int(&r), 0);
    assert!((1..=1000).contains(&second(&r)), "{r:?}");
    let r = run(
        &mut c,
        "another limit",
        &acquire,
        &[lock, slots],
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
    assert!(
        int(&run(
            &mut c,
            "extend",
            &extend,
            &[lock, slots],
            &["t2\th", long, ""]
        )
        .await)
            > 0
    );
    assert_eq!(
        int(&run(
            &mut c,
            "release",
            &release,
            &[lock, slots],
            &["t2\th", "", "", "s"]
        )
        .await),
        1
    );
    assert_eq!(
        int(&run(
            &mut c,
            "released twice",
            &release,
            &[lock, slots],
            &["t2\th"]
        )
        .await),
        0
    );
    let inspect = script(&["inspect/inspect.lua"]);
    let force = script(&["inspect/force_unlock.lua"]);
    let (readers, intents) = (rw_helper(lock, "readers"), rw_helper(lock, "intents"));
    run(
        &mut c,
        "inspect",
        &inspect,
        &[lock, fence, forced, &readers, &intents, slots],
        &[],
    )
    .await;
    let r = run(
        &mut c,
        "force unlock",
        &force,
        &[lock, forced, &readers, &intents, slots],
        &["why", "host=h\tpid=1", "604800000", ""],
    )
    .await;
    assert_eq!(int(&r), 1);
}

/// A server that refuses `PUBLISH` (as a Redis 6 Cluster refuses `SPUBLISH`, unknown there):
/// the release frees the lock, says so, and the waiter gets the lock by its fallback (capped
/// by the holder's lease). Failed on the code whose release ran the publish unprotected: the
/// lock was deleted and the release reported a Redis error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_publish_is_refused_still_reports_the_lock_freed() {
    let server = RedisServer::start_with(&["--rename-command", "publish", ""]);
    let locks = client(&server).await;
    let held = locks
        .lock("p")
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    let others = client(&server).await;
    let waiter = tokio::spawn(async move {
        others
            .lock("p")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    // The waiter marked the lock once it listens (its subscription follows its busy attempt).
    let parked = distlock_testkit::wait_until_async(Duration::from_secs(10), || async {
        let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut server.async_connection().await)
            .await
            .expect("PUBSUB CHANNELS");
        !channels.is_empty()
    })
    .await;
    assert!(parked);
    held.release()
        .await
        .expect("the release freed the lock, whatever became of its wake-up");
    let g = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    g.release().await.expect("release");
    // Reentrant and read/write releases publish on every release.
    let g = locks.reentrant("r").try_acquire().await.expect("free");
    g.release().await.expect("reentrant release");
    let g = locks.write("w").try_acquire().await.expect("free");
    g.release().await.expect("write release");
    let g = locks.read("w").try_acquire().await.expect("free");
    g.release().await.expect("read release");
    let g = locks.semaphore("s", 2).try_acquire().await.expect("free");
    g.release().await.expect("semaphore release");
    let g = locks.lock("f").try_acquire().await.expect("free");
    assert!(locks.force_unlock("f", "test").await.expect("force unlock"));
    drop(g);
}

/// Forwards connections to `upstream`, answering as a Redis 6 server would: `SET .. GET` is a
/// syntax error there. Each command is rewritten whole (`GET` becomes `GETX`, an option the
/// real server refuses with the same error), so pipelined answers keep their order.
async fn redis6_front(upstream: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut buf = vec![0; 64 * 1024];
                loop {
                    let n = match from_client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    let mut out = Vec::new();
                    while let Some((command, used)) = parse_command(&pending) {
                        out.extend(encode(&refuse_set_get(command)));
                        pending.drain(..used);
                    }
                    if to_server.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}/")
}

/// One whole RESP array of bulk strings from the front of `buf`, and its length in bytes.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, next) = line(buf, at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        args.push(buf[next..next + len].to_vec());
        at = next + len + 2;
    }
    Some((args, at))
}

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).bytes());
        out.extend(a);
        out.extend(b"\r\n");
    }
    out
}

fn refuse_set_get(mut args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let is_set = args.first().is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
    let nx = args.iter().any(|a| a.eq_ignore_ascii_case(b"NX"));
    if is_set && nx && args.len() > 3 {
        for a in &mut args[3..] {
            if a.eq_ignore_ascii_case(b"GET") {
                *a = b"GETX".to_vec();
            }
        }
    }
    args
}

fn count(server: &RedisServer, command: &str) -> u64 {
    server.commandstats().get(command).copied().unwrap_or(0)
}

/// Script calls a server ran for locks: `EVALSHA` and `EVAL`, less the writes of the process
/// record (`nodes/record.lua`, one script call and one `HSET` each, which no lock script
/// sends), made before a call site's first hold on a server.
fn lock_scripts(server: &RedisServer) -> u64 {
    count(server, "evalsha") + count(server, "eval") - count(server, "hset")
}

/// One client meets a server that refuses `SET .. NX .. GET`: it takes that server's locks
/// with the acquire script. Another client, on a server that accepts it, keeps sending the
/// plain command. Failed on the code that kept the refusal in one flag for the whole process:
/// the second client sent the script too.
#[tokio::test]
async fn a_server_refusing_set_get_changes_only_the_acquisitions_sent_to_it() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let old_locks = Client::connect(&redis6_front(old.addr()).await)
        .await
        .expect("connect through the front");
    let g = old_locks.lock("a").try_acquire().await.expect("free");
    assert!(
        count(&old, "evalsha") + count(&old, "eval") >= 1,
        "the refusal sent the acquisition to the script: {:?}",
        old.commandstats()
    );
    g.release().await.expect("release");
    let new_locks = client(&new).await;
    // The first release loads its script (`NOSCRIPT`, then `EVAL`): counted apart.
    let g = new_locks.lock("b").try_acquire().await.expect("free");
    g.release().await.expect("release");
    let before = lock_scripts(&new);
    for _ in 0..3 {
        let g = as_other_owner(new_locks.lock("b").try_acquire())
            .await
            .expect("free");
        g.release().await.expect("release");
    }
    let scripts = lock_scripts(&new) - before;
    // Each cycle: the plain `SET .. GET` and the release script.
    assert_eq!(
        scripts,
        3,
        "acquisitions on the other server went to the script: {:?}",
        new.commandstats()
    );
    // The old server still gets the script, every time.
    let g = old_locks.lock("a").try_acquire().await.expect("free");
    g.release().await.expect("release");
}
