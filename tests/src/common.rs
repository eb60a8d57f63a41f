//! Helpers of this project's own integration tests (`tests/tests/`): a client on a kit
//! server, the Redis keys and channels of a lock name, server capabilities, the `contender`
//! processes, and the checks every mode shares.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Observer, RedisServer};
use distlock::{Client, FencingToken, LockContext, LockRequest};

/// The `contender` executable (`tests/src/bin/contender.rs`), which Cargo builds beside the
/// integration tests of this package: `target/<profile>/contender`, next to the test's own
/// `deps/` directory.
///
/// # Panics
/// If the test's own path has no such parent.
pub fn contender() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>")
        .join("contender")
}

/// A client on `server`, with the default settings.
///
/// # Panics
/// If it cannot connect.
pub async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).await.expect("connect")
}

/// The raw key a lock named `name` lives at with the default prefix, as `distlock/src/key.rs`
/// lays it out (restated here, so that the tests check the documented layout). Its string is
/// also the lock's wake-up channel.
pub fn lock_key(name: &str) -> String {
    format!("distlock:{}", body(name))
}

/// How a name is written into its keys.
fn body(name: &str) -> String {
    let tagged = name
        .find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    match (tagged, name.chars().next()) {
        (true, Some('{' | '#')) => format!("#{name}"),
        (true, _) => name.to_owned(),
        (false, Some('{' | '}')) => format!("{{{{{name}}}"),
        (false, _) => format!("{{{name}}}"),
    }
}

/// The channel a lock's releases are announced on: its key's string.
pub fn channel(name: &str) -> String {
    lock_key(name)
}

/// The lock's fencing counter.
pub fn fence_key(name: &str) -> String {
    format!("distlock:#fence:{}", body(name))
}

/// A fencing counter far ahead of any a lock reaches on its own (their floor is the server's
/// clock, in microseconds since the epoch: about 1.8e15 now).
pub const FENCE_FAR_AHEAD: u64 = 4_000_000_000_000_000;

/// Takes `request` fenced, at once, gives it back and returns its token.
///
/// # Panics
/// If the lock is busy, or the hold has no token or cannot be given back.
pub async fn fenced_token(request: LockRequest<'_>) -> FencingToken {
    let guard = request.fencing(true).try_acquire().await.expect("free");
    let token = guard.fencing_token().expect("a token");
    guard.release().await.expect("release");
    token
}

/// A fenced set's one token is above each of its names' tokens: `names[1]`'s counter is raised
/// to [`FENCE_FAR_AHEAD`] through `conn` (a Cluster's routes it to the name's slot) and
/// `names[0]` takes a token alone (`one`) before the set does (`set`), whose token must be
/// above both. Returns the set's token.
///
/// # Panics
/// If it is not above both, or as [`fenced_token`].
pub async fn fenced_set_token<'c, C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    names: [&str; 2],
    one: impl Fn(&str) -> LockRequest<'c>,
    set: impl Fn([&str; 2]) -> LockRequest<'c>,
) -> FencingToken {
    let _: () = redis::cmd("SET")
        .arg(fence_key(names[1]))
        .arg(FENCE_FAR_AHEAD)
        .query_async(conn)
        .await
        .expect("SET");
    let before = fenced_token(one(names[0])).await;
    let token = fenced_token(set(names)).await;
    assert!(
        token > before && token.get() > FENCE_FAR_AHEAD,
        "the set's {token} after {before} and {FENCE_FAR_AHEAD}"
    );
    token
}

/// The setnx lock's waited-for mark.
pub fn waited_key(name: &str) -> String {
    format!("distlock:#waited:{}", body(name))
}

/// A read/write lock's readers: a sorted set of owners scored by their lease's end.
pub fn readers_key(name: &str) -> String {
    format!("distlock:#readers:{}", body(name))
}

/// A read/write lock's waiting writers: a sorted set of owners scored by their intent's end.
pub fn intents_key(name: &str) -> String {
    format!("distlock:#intents:{}", body(name))
}

/// A semaphore's permit slots.
pub fn slots_key(name: &str) -> String {
    format!("distlock:#slots:{}", body(name))
}

/// The lock key's remaining ttl in ms as the server sees it (-2: no key).
pub async fn pttl(server: &RedisServer, name: &str) -> i64 {
    use redis::AsyncCommands;
    server
        .async_connection()
        .await
        .pttl(lock_key(name))
        .await
        .expect("PTTL")
}

/// Connections subscribed to `channel` on `server` (`PUBSUB NUMSUB`): a waiter has parked
/// once its connection is subscribed to the lock's wake-up channel.
pub async fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut server.async_connection().await)
        .await
        .expect("PUBSUB NUMSUB");
    counts.first().map_or(0, |(_, n)| *n)
}

/// `(major, minor)` of `server`'s `redis_version` (Valkey gives the Redis version it is
/// compatible with: 7.2 for Valkey 8). The matrix (`tests/matrix.sh`) runs these tests on
/// Redis 6.2, 7.0 and Valkey 8.1; a test whose subject a server lacks asserts what
/// `docs/deployments.md` documents for it.
pub fn server_version(server: &RedisServer) -> (u32, u32) {
    let info = server.info("server");
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or_else(|| panic!("no redis_version in INFO server of {}", server.addr()));
    let mut parts = version.trim().split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Whether `server` has sharded pub/sub (`SSUBSCRIBE`, `PUBSUB SHARDNUMSUB`: Redis 7.0 and
/// later, Valkey). Without it (Redis 6.2), a Cluster's waiters are not woken: they poll, with
/// backoff, capped by the holder's lease.
pub fn has_sharded_pub_sub(server: &RedisServer) -> bool {
    server_version(server) >= (7, 0)
}

/// Whether `server` takes `SET .. NX .. GET` (7.0 and later): before, a setnx lock for a caller
/// that does not wait is taken with the acquire script instead of the plain `SET`.
pub fn has_set_nx_get(server: &RedisServer) -> bool {
    server_version(server) >= (7, 0)
}

/// Whether `server` has `SET .. IFEQ` (Valkey 8.1, Redis 8.4), read as the client reads it
/// (`COMMAND DOCS SET` lists the option): there the watchdog renews a setnx lease with it
/// instead of the extend script.
pub fn has_set_ifeq(server: &RedisServer) -> bool {
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("SET")
        .query(&mut server.connection())
        .unwrap_or(redis::Value::Nil);
    format!("{docs:?}").contains("\"IFEQ\"")
}

/// The commands `server` ran that may renew a lease: `(native, scripts)`, its `SET` calls
/// (`SET .. IFEQ`, where it has the command; acquisitions are `SET`s too) and its script calls
/// (`EVALSHA`, `EVAL`: the extend script, and every other script).
pub fn renewal_calls(server: &RedisServer) -> (u64, u64) {
    let stats = server.commandstats();
    let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
    (calls("set"), calls("evalsha") + calls("eval"))
}

/// On a Cluster without sharded pub/sub, where a waiter polls instead of listening on its
/// shard channel: stands in for the wait until it listens, giving it time to find the lock
/// busy and start polling. True, as that wait's answer.
pub async fn polling_started() -> bool {
    tokio::time::sleep(Duration::from_millis(500)).await;
    true
}

/// Runs `f` as an owner distinct from the calling task.
pub async fn as_other_owner<F: std::future::Future>(f: F) -> F::Output {
    LockContext::new().scope(f).await
}

/// Spawns a task that waits up to `wait` for the setnx lock `name` as another owner, releases
/// it once it has it, and returns when it got it.
pub fn spawn_waiter(
    locks: &Client,
    name: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<std::time::Instant, distlock::Error>> {
    let locks = locks.clone();
    tokio::spawn(as_other_owner(async move {
        let g = locks.lock(name).wait(wait).acquire().await?;
        let at = std::time::Instant::now();
        g.release().await.map(|()| at)
    }))
}

/// Starts `processes` contender processes with the same arguments and returns the count each
/// printed after `DONE`.
pub fn run_contenders(processes: usize, args: &[&str]) -> Vec<u64> {
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            Command::new(contender())
                .args(args)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn contender")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("contender finishes");
            assert!(out.status.success(), "contender failed: {out:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .strip_prefix("DONE ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected contender output {text:?}"))
        })
        .collect()
}

/// Starts a contender that takes the lock and holds it until killed; returns the process and
/// the fencing token it printed.
pub fn spawn_holder(kind: &str, url: &str, name: &str, ttl_ms: u64) -> (Child, u64) {
    let mut holder = Command::new(contender())
        .args(["hold", kind, url, name, &ttl_ms.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read holder output");
    let token = line
        .trim()
        .strip_prefix("HELD ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("holder said {line:?}"));
    (holder, token)
}

/// Two contender processes x four tasks take the `kind` lock at `url` (comma-separated URLs
/// for a quorum) until the observer counts `target` critical sections; then every process
/// must have had the lock and the observer must have seen no overlap, no lost update and no
/// fencing token that failed to increase.
pub async fn contend_across_processes(kind: &str, url: &str, target: u64) {
    let observer_server = RedisServer::start();
    let name = format!("mx-{kind}");
    let per_process = run_contenders(
        2,
        &[
            "mutex",
            kind,
            url,
            &observer_server.url(),
            &name,
            "4",
            &target.to_string(),
        ],
    );
    let total: u64 = per_process.iter().sum();
    assert!(total >= target, "only {total} critical sections ran");
    assert!(
        per_process.iter().all(|&n| n > 0),
        "every process got the lock: {per_process:?}"
    );
    assert_safe(&Observer::connect(&observer_server.url(), &name).await).await;
}

/// The safety checks every contention test ends with.
pub async fn assert_safe(observer: &Observer) {
    assert_eq!(observer.violations().await, 0, "two holders at once");
    assert_eq!(observer.max_occupancy().await, 1);
    assert_eq!(
        observer.counter().await,
        observer.acked().await,
        "lost updates"
    );
    assert_eq!(
        observer.stale_tokens().await,
        0,
        "a fencing token did not increase"
    );
}

/// The ACL rules the operations guide gives a locking service (after `on >password`). `INFO`
/// is filed under `@dangerous`: the client reads the server's eviction policy with it.
pub const ACL_RULES: &str =
    "~distlock:* resetchannels &distlock:* +@connection +@scripting +@read +@write +@pubsub +time -@dangerous +info";

/// Creates (or replaces) the user `locker`, password `s3cret`, with `rules` on `server`, and
/// returns its URL there. ACLs are per server: a deployment needs it on every server.
pub fn add_locker(server: &RedisServer, rules: &str) -> String {
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(">s3cret");
    for rule in rules.split_whitespace() {
        setuser.arg(rule);
    }
    setuser.exec(&mut server.connection()).expect("ACL SETUSER");
    format!("redis://locker:s3cret@127.0.0.1:{}/", server.port())
}

/// Every mode once, waits and wake-ups included, on locks named `<prefix>-..`: setnx with a
/// waiter woken by the release, a reentrant re-entry and extension, readers sharing and a
/// writer woken when they leave, a semaphore's permits with a waiter woken by a release.
pub async fn every_mode_works(locks: &Client, prefix: &str) {
    // setnx (the plain SET acquire) with a waiter (the fencing script) woken by the release,
    // then a fenced holder and a fenced waiter: tokens grow.
    let held = locks
        .lock(format!("{prefix}-setnx"))
        .try_acquire()
        .await
        .expect("setnx");
    assert_eq!(held.fencing_token(), None);
    let fenced_waiter = || {
        let (locks, prefix) = (locks.clone(), prefix.to_owned());
        tokio::spawn(async move {
            locks
                .lock(format!("{prefix}-setnx"))
                .wait(Duration::from_secs(30))
                .fencing(true)
                .acquire()
                .await
        })
    };
    let waiter = fenced_waiter();
    tokio::task::yield_now().await;
    held.release().await.expect("release");
    let next = waiter.await.expect("task").expect("the waiter gets it");
    let first = next.fencing_token().expect("fencing(true)");
    let waiter = fenced_waiter();
    tokio::task::yield_now().await;
    next.release().await.expect("release");
    let last = waiter.await.expect("task").expect("the waiter gets it");
    assert!(last.fencing_token().expect("fencing(true)") > first);
    last.release().await.expect("release");

    // reentrant with a re-entry, and an extension.
    let mut outer = locks
        .reentrant(format!("{prefix}-re"))
        .try_acquire()
        .await
        .expect("reentrant");
    let inner = locks
        .reentrant(format!("{prefix}-re"))
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    outer.extend(Duration::from_secs(20)).await.expect("extend");
    inner.release().await.expect("release");
    outer.release().await.expect("release");

    // read/write: readers share, a writer waits for them and is woken.
    let r1 = locks
        .read(format!("{prefix}-rw"))
        .try_acquire()
        .await
        .expect("read");
    let r2 = as_other_owner(locks.read(format!("{prefix}-rw")).try_acquire())
        .await
        .expect("readers share");
    let writer = {
        let (locks, prefix) = (locks.clone(), prefix.to_owned());
        tokio::spawn(async move {
            locks
                .write(format!("{prefix}-rw"))
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = writer.await.expect("task").expect("the writer gets in");
    w.release().await.expect("release");

    // semaphore: two permits held (fenced: tokens grow), a third waits and is woken by a
    // release.
    let name = format!("{prefix}-sem");
    let p1 = locks
        .semaphore(&name, 2)
        .fencing(true)
        .try_acquire()
        .await
        .expect("semaphore");
    let mut p2 = locks
        .semaphore(&name, 2)
        .fencing(true)
        .try_acquire()
        .await
        .expect("a second permit");
    assert!(p2.fencing_token() > p1.fencing_token());
    p2.extend(Duration::from_secs(20)).await.expect("extend");
    let waiter = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .semaphore(&name, 2)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    p1.release().await.expect("release");
    let p3 = waiter
        .await
        .expect("task")
        .expect("the waiter gets a permit");
    p2.release().await.expect("release");
    p3.release().await.expect("release");
}
