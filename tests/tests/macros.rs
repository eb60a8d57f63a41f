//! The lock attributes (`#[distributed_lock]`, `#[read_lock]`, `#[write_lock]`) against real
//! redis-server processes: what a user sees from an annotated fn.
//!
//! Each test starts its own server. No test here calls `distlock::set_default`: the process
//! default can be set once per process, so the one test that uses it runs in a child process
//! (this test binary re-executed), and so does the second process of the cross-process test.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{as_other_owner, assert_safe, client, fence_key, lock_key};
use distlock::{distributed_lock, read_lock, write_lock, Client, Error};
use distlock_testkit::{wait_until_async, Observer, RedisServer, RedisServers};
use tokio::sync::{Barrier, Notify};

/// A typical application error: lock errors convert into it with `From`.
#[derive(Debug)]
enum AppError {
    Lock(Error),
    Body(&'static str),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

impl AppError {
    fn lock(self) -> Error {
        match self {
            AppError::Lock(error) => error,
            AppError::Body(what) => panic!("expected a lock error, got the body's error {what:?}"),
        }
    }
}

async fn redis(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    server.async_connection().await
}

async fn raw_exists(conn: &redis::aio::MultiplexedConnection, key: &str) -> u32 {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn.clone())
        .await
        .expect("EXISTS")
}

/// Whether the lock named `name` (without a hash tag of its own) is held by anyone.
async fn exists(conn: &redis::aio::MultiplexedConnection, name: &str) -> bool {
    raw_exists(conn, &lock_key(name)).await == 1
}

async fn delete(conn: &redis::aio::MultiplexedConnection, name: &str) {
    let n: u32 = redis::cmd("DEL")
        .arg(lock_key(name))
        .query_async(&mut conn.clone())
        .await
        .expect("DEL");
    assert_eq!(n, 1, "{name} was not held");
}

/// Sets a flag when dropped: tells a body that was cancelled from one that finished.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion.

/// One critical section, checked by the observer's occupancy probe, its non-atomic counter and
/// its fence (the fencing token comes from `distlock::lease()`).
#[distributed_lock(
    key = "mutex:<name>",
    client = locks,
    ttl = "5s",
    wait = "30s",
    fencing = true
)]
async fn section(locks: &Client, name: &str, observer: &Observer) -> Result<u64, AppError> {
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

fn spawn_child(test: &str, envs: &[(&str, String)]) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a child test process")
}

fn finish_child(child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("child finishes");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_exclude_each_other() {
    let (server, probe) = (RedisServer::start(), RedisServer::start());
    let locks = client(&server).await;
    let observer = Observer::connect(&probe.url(), "processes").await;
    let envs = [(CHILD_LOCKS, server.url()), (CHILD_PROBE, probe.url())];
    let children: Vec<_> = (0..2)
        .map(|_| spawn_child("child_contender", &envs))
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

// ---------------------------------------------------------------------------------------------
// A busy lock.

#[distributed_lock(key = "busy:<id>", client = locks, wait = "0s")]
async fn once(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[distributed_lock(key = "busy:<id>", client = locks, wait = "300ms")]
async fn patient(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn busy_lock_returns_busy_or_timeout_and_never_runs_the_body() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let held = as_other_owner(locks.lock("busy:1").try_acquire())
        .await
        .expect("free");

    let busy = once(&locks, 1, &ran).await.unwrap_err().lock();
    assert!(
        matches!(busy, Error::Busy { ref name } if name == "busy:1"),
        "{busy}"
    );

    let started = Instant::now();
    let timeout = patient(&locks, 1, &ran).await.unwrap_err().lock();
    assert!(matches!(timeout, Error::Timeout { .. }), "{timeout}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!ran.load(Ordering::SeqCst), "a body ran without the lock");

    held.release().await.expect("release");
    assert_eq!(once(&locks, 1, &ran).await.expect("free again"), 1);
    assert!(ran.load(Ordering::SeqCst));
}

#[distributed_lock(key = "report:<day>", client = locks, wait = "0s", on_busy = "skip")]
async fn report(locks: &Client, day: u32, ran: &AtomicBool) -> Result<Option<u32>, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(Some(day))
}

#[distributed_lock(key = "report:<day>", client = locks, wait = "200ms", on_busy = "skip")]
async fn report_unit(locks: &Client, day: u32, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn busy_lock_with_skip_returns_the_default_without_running_the_body() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let held = as_other_owner(locks.lock("report:7").try_acquire())
        .await
        .expect("free");
    assert_eq!(report(&locks, 7, &ran).await.expect("skipped"), None);
    let started = Instant::now();
    report_unit(&locks, 7, &ran)
        .await
        .expect("skipped after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "waited first"
    );
    assert!(!ran.load(Ordering::SeqCst), "a skipped body ran");

    held.release().await.expect("release");
    assert_eq!(report(&locks, 7, &ran).await.expect("ran"), Some(7));
    assert!(ran.load(Ordering::SeqCst));
}

// ---------------------------------------------------------------------------------------------
// Losing the lease while the body runs.

#[distributed_lock(key = "lost:<id>", client = locks, ttl = "600ms")]
async fn long_job(
    locks: &Client,
    id: u32,
    started: &Notify,
    dropped: Arc<AtomicBool>,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    let _flag = DropFlag(dropped);
    started.notify_one();
    tokio::time::sleep(Duration::from_secs(10)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn lost_lease_cancels_the_body_and_returns_lease_lost() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, dropped, finished) = (
        Notify::new(),
        Arc::new(AtomicBool::new(false)),
        AtomicBool::new(false),
    );
    let call = long_job(&locks, 1, &started, dropped.clone(), &finished);
    let deleter = async {
        started.notified().await;
        delete(&conn, "lost:1").await;
        Instant::now()
    };
    let (result, deleted_at) = tokio::join!(call, deleter);
    let noticed_after = deleted_at.elapsed();
    let lost = result.unwrap_err().lock();
    assert!(
        matches!(lost, Error::LeaseLost { ref name, .. } if name == "lost:1"),
        "{lost}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the body was not dropped");
    assert!(!finished.load(Ordering::SeqCst));
    // The watchdog renews every ttl/3 = 200 ms; its refused renewal is the signal.
    assert!(
        noticed_after < Duration::from_secs(3),
        "noticed after {noticed_after:?}"
    );
}

#[distributed_lock(key = "cont:<id>", client = locks, ttl = "600ms", on_lost = "continue")]
async fn cooperative(
    locks: &Client,
    id: u32,
    started: &Notify,
    finished: &AtomicBool,
) -> Result<u32, AppError> {
    let lease = distlock::lease().expect("inside a locked fn");
    assert!(lease.is_held());
    started.notify_one();
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the body saw the loss");
    assert!(!lease.is_held());
    assert!(!distlock::lease().expect("still inside").is_held());
    finished.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn lost_lease_with_continue_lets_the_body_finish_and_observe_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, finished) = (Notify::new(), AtomicBool::new(false));
    let deleter = async {
        started.notified().await;
        delete(&conn, "cont:1").await;
    };
    let (result, ()) = tokio::join!(cooperative(&locks, 1, &started, &finished), deleter);
    assert!(finished.load(Ordering::SeqCst), "the body was cut short");
    // The body returned Ok, but not under the lock: the caller is told.
    let lost = result.unwrap_err().lock();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
}

#[distributed_lock(key = "fixed:<id>", client = locks, ttl = "300ms", watchdog = false)]
async fn fixed_lease(locks: &Client, id: u32) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[distributed_lock(key = "capped:<id>", client = locks, ttl = "300ms", max_hold = "700ms")]
async fn capped(locks: &Client, id: u32) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[tokio::test]
async fn fixed_lease_and_max_hold_end_the_hold_on_time() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let started = Instant::now();
    let lost = fixed_lease(&locks, 1).await.unwrap_err().lock();
    let took = started.elapsed();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(
        took < Duration::from_secs(2),
        "a fixed 300 ms lease ended after {took:?}"
    );

    let started = Instant::now();
    let lost = capped(&locks, 1).await.unwrap_err().lock();
    let took = started.elapsed();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    // Renewed past the 300 ms ttl, then let run out after the 700 ms cap.
    assert!(
        took > Duration::from_millis(600),
        "renewal stopped early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the cap was not applied: {took:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Nesting in one task.

#[distributed_lock(key = "job:<id>", client = locks, mode = "reentrant", fencing = true)]
async fn reentrant_outer(
    locks: &Client,
    id: u32,
    conn: &redis::aio::MultiplexedConnection,
) -> Result<u64, AppError> {
    let outer = distlock::lease()
        .expect("outer")
        .fencing_token()
        .expect("fencing = true");
    let inner = reentrant_inner(locks, id).await?;
    assert_eq!(outer, inner, "re-entry keeps the tenure's fencing token");
    // The inner release only took one level off the count.
    assert!(
        exists(conn, &format!("job:{id}")).await,
        "the outer hold was released by the inner one"
    );
    let busy = as_other_owner(locks.reentrant(format!("job:{id}")).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    Ok(outer)
}

#[distributed_lock(
    key = "job:<id>",
    client = locks,
    mode = "reentrant",
    wait = "0s",
    fencing = true
)]
async fn reentrant_inner(locks: &Client, id: u32) -> Result<u64, AppError> {
    let lease = distlock::lease().expect("inner");
    Ok(lease.fencing_token().expect("fencing = true"))
}

#[distributed_lock(key = "tree:<id>", client = locks, mode = "reentrant", wait = "0s")]
async fn depth(locks: &Client, id: u32, levels: u32) -> Result<u32, AppError> {
    if levels == 0 {
        return Ok(0);
    }
    Ok(1 + Box::pin(depth(locks, id, levels - 1)).await?)
}

#[tokio::test]
async fn reentrant_mode_lets_nested_calls_in_one_task_re_enter() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    reentrant_outer(&locks, 9, &conn)
        .await
        .expect("nested calls");
    assert!(
        !exists(&conn, "job:9").await,
        "released after the outermost call"
    );
    assert_eq!(depth(&locks, 1, 5).await.expect("recursion"), 5);
    assert!(!exists(&conn, "tree:1").await);
}

#[distributed_lock(key = "order:<id>", client = locks, wait = "5s")]
async fn setnx_outer(locks: &Client, id: u32) -> Result<(Error, Duration), AppError> {
    let started = Instant::now();
    let inner = setnx_inner(locks, id).await.unwrap_err().lock();
    Ok((inner, started.elapsed()))
}

#[distributed_lock(key = "order:<id>", client = locks, wait = "5s", on_busy = "skip")]
async fn setnx_inner(locks: &Client, id: u32) -> Result<(), AppError> {
    panic!("the inner body ran while the outer call holds the lock");
}

#[tokio::test]
async fn setnx_nesting_fails_at_once_with_reentrant() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let (inner, took) = setnx_outer(&locks, 4).await.expect("outer call");
    // Not a 5 s wait on itself, and not skipped either: nesting a non-reentrant lock is a bug.
    assert!(
        matches!(inner, Error::Reentrant { ref name } if name == "order:4"),
        "{inner}"
    );
    assert!(took < Duration::from_secs(2), "waited {took:?}");
}

// ---------------------------------------------------------------------------------------------
// Read/write locks.

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_together(locks: &Client, id: u32, both_inside: &Barrier) -> Result<(), AppError> {
    tokio::time::timeout(Duration::from_secs(5), both_inside.wait())
        .await
        .map_err(|_| AppError::Body("the other reader never got in"))?;
    Ok(())
}

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_until(
    locks: &Client,
    id: u32,
    inside: &Notify,
    leave: &Notify,
) -> Result<(), AppError> {
    inside.notify_one();
    leave.notified().await;
    Ok(())
}

#[write_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn write_now(locks: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

#[write_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn write_until(
    locks: &Client,
    id: u32,
    inside: &Notify,
    leave: &Notify,
) -> Result<(), AppError> {
    inside.notify_one();
    leave.notified().await;
    Ok(())
}

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_now(locks: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

/// Runs `held` (a locked call that signals `inside` and waits for `leave`) and, while it is
/// inside, `probe`; returns the probe's result.
async fn while_held<H, P, T>(held: H, inside: &Notify, leave: &Notify, probe: P) -> T
where
    H: Future<Output = Result<(), AppError>>,
    P: Future<Output = T>,
{
    let check = async {
        inside.notified().await;
        let result = probe.await;
        leave.notify_one();
        result
    };
    let (held, result) = tokio::join!(held, check);
    held.expect("the holding call");
    result
}

#[tokio::test]
async fn read_locks_share_and_write_locks_exclude() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    // Two readers inside at once (each waits for the other), each its own task.
    let barrier = Arc::new(Barrier::new(2));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (locks, barrier) = (locks.clone(), barrier.clone());
            tokio::spawn(async move { read_together(&locks, 1, &barrier).await })
        })
        .collect();
    for reader in readers {
        reader.await.expect("reader task").expect("readers share");
    }

    let (inside, leave) = (Notify::new(), Notify::new());
    let blocked_writer = while_held(
        read_until(&locks, 2, &inside, &leave),
        &inside,
        &leave,
        async { as_other_owner(write_now(&locks, 2)).await },
    )
    .await;
    assert!(matches!(
        blocked_writer.unwrap_err().lock(),
        Error::Busy { .. }
    ));

    let blocked_reader = while_held(
        write_until(&locks, 3, &inside, &leave),
        &inside,
        &leave,
        async { as_other_owner(read_now(&locks, 3)).await },
    )
    .await;
    assert!(matches!(
        blocked_reader.unwrap_err().lock(),
        Error::Busy { .. }
    ));

    write_now(&locks, 2).await.expect("free after the reader");
    read_now(&locks, 3).await.expect("free after the writer");
}

#[read_lock(key = "rw:<name>", client = locks, wait = "30s")]
async fn probed_read(
    locks: &Client,
    name: &str,
    readers: &Observer,
    writers: &str,
) -> Result<(), AppError> {
    readers.enter_excluding(writers).await;
    tokio::time::sleep(Duration::from_micros(300)).await;
    readers.exit().await;
    Ok(())
}

#[write_lock(key = "rw:<name>", client = locks, wait = "30s")]
async fn probed_write(
    locks: &Client,
    name: &str,
    writers: &Observer,
    readers: &str,
) -> Result<(), AppError> {
    writers.enter_excluding(readers).await;
    writers.bump(Duration::from_micros(300)).await;
    writers.exit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_and_writers_never_overlap() {
    let (server, probe) = (RedisServer::start(), RedisServer::start());
    let locks = client(&server).await;
    let readers = Observer::connect(&probe.url(), "readers").await;
    let writers = Observer::connect(&probe.url(), "writers").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (locks, readers, writers) = (locks.clone(), readers.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                if i % 2 == 0 {
                    probed_write(&locks, "x", &writers, "readers")
                        .await
                        .expect("write");
                } else {
                    probed_read(&locks, "x", &readers, "writers")
                        .await
                        .expect("read");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        writers.overlaps().await,
        0,
        "a writer entered beside readers"
    );
    assert_eq!(
        readers.overlaps().await,
        0,
        "a reader entered beside a writer"
    );
    assert_eq!(writers.violations().await, 0, "two writers at once");
    assert_eq!(
        writers.counter().await,
        writers.acked().await,
        "lost updates"
    );
    assert_eq!(writers.acked().await, 60);
}

// ---------------------------------------------------------------------------------------------
// Finding the client.

#[distributed_lock(key = "orphan:<id>")]
async fn orphan(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[distributed_lock(key = "orphan:<id>", wait = "0s")]
async fn orphan_once(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[distributed_lock(key = "maybe:<id>", client = locks)]
async fn maybe(locks: Option<&Client>, id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[tokio::test]
async fn no_client_is_an_error_through_the_fn_error_type() {
    // This process never sets a default client (see the module docs).
    let error = orphan(1).await.unwrap_err().lock();
    assert!(matches!(error, Error::NoClient), "{error}");
    let error = maybe(None, 1).await.unwrap_err().lock();
    assert!(matches!(error, Error::NoClient), "{error}");
    let server = RedisServer::start();
    let locks = client(&server).await;
    assert_eq!(maybe(Some(&locks), 2).await.expect("with a client"), 2);
}

const CHILD_DEFAULT: &str = "DISTLOCK_MACROS_CHILD_DEFAULT";

const CHILD_QUORUM: &str = "DISTLOCK_MACROS_CHILD_QUORUM";

#[tokio::test]
async fn the_default_client_is_used_without_client_argument() {
    let server = RedisServer::start();
    let nodes = RedisServers::start(3);
    let child = spawn_child(
        "child_default_client",
        &[
            (CHILD_DEFAULT, server.url()),
            (CHILD_QUORUM, nodes.urls().join(",")),
        ],
    );
    let said = finish_child(child);
    assert!(said.contains("DEFAULT OK"), "child said {said:?}");
}

/// A Redlock fn without `client = ..`: runs on the quorum default. Reports where its lock is
/// while the body runs: (how many quorum nodes hold it, whether the single-node default's
/// server does).
#[distributed_lock(key = "qd:<id>", mode = "redlock")]
async fn quorum_default(
    id: u32,
    quorum_nodes: &[redis::aio::MultiplexedConnection],
    single: &redis::aio::MultiplexedConnection,
) -> Result<(usize, bool), AppError> {
    let name = format!("qd:{id}");
    let mut on_quorum = 0;
    for node in quorum_nodes {
        on_quorum += usize::from(exists(node, &name).await);
    }
    Ok((on_quorum, exists(single, &name).await))
}

/// Run by `the_default_client_is_used_without_client_argument`; does nothing when run directly.
#[tokio::test]
#[ignore = "a child process of the_default_client_is_used_without_client_argument"]
async fn child_default_client() {
    let Ok(url) = std::env::var(CHILD_DEFAULT) else {
        return;
    };
    let locks = Client::connect(&url).await.expect("connect");
    distlock::set_default(locks.clone()).expect("first default");
    let conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    assert_eq!(orphan(5).await.expect("the default client"), 5);
    let held = locks.lock("orphan:6").try_acquire().await.expect("free");
    assert!(exists(&conn, "orphan:6").await);
    let busy = as_other_owner(orphan_once(6)).await.unwrap_err().lock();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    held.release().await.expect("release");

    // With only a single-node default, a Redlock fn gets the clear error, not a weaker lock.
    let quorum_urls = std::env::var(CHILD_QUORUM).expect("quorum urls");
    let mut quorum_nodes = Vec::new();
    for url in quorum_urls.split(',') {
        let node = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        quorum_nodes.push(node);
    }
    let refused = quorum_default(7, &quorum_nodes, &conn)
        .await
        .unwrap_err()
        .lock();
    assert!(matches!(refused, Error::InvalidConfig { .. }), "{refused}");
    // A quorum default beside the single-node one: Redlock fns use it, the others do not.
    // No restart guard: the parent just started these servers and restarts none of them.
    let quorum = Client::quorum_builder(quorum_urls.split(','))
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum");
    distlock::set_default(quorum).expect("first quorum default");
    let (on_quorum, on_single) = quorum_default(7, &quorum_nodes, &conn)
        .await
        .expect("redlock");
    // The call returns once a majority (2 of 3) granted it; the third may still be on its way.
    assert!(
        on_quorum >= 2 && !on_single,
        "redlock fn used the quorum default: {on_quorum}, {on_single}"
    );
    assert_eq!(orphan(8).await.expect("still the single-node default"), 8);
    println!("DEFAULT OK");
}

#[distributed_lock(key = "payout:<id>", client = locks, mode = "redlock")]
async fn payout(locks: &Client, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn redlock_mode_on_a_single_node_client_is_a_config_error() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = AtomicBool::new(false);
    let error = payout(&locks, 1, &ran).await.unwrap_err().lock();
    match error {
        Error::InvalidConfig { ref reason } => assert_eq!(
            reason,
            "mode = \"redlock\" needs a quorum client (Client::quorum); this client has one node"
        ),
        other => panic!("expected InvalidConfig, got {other}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body ran on a single node");
    assert!(
        !exists(&redis(&server).await, "payout:1").await,
        "a single-node lock was taken"
    );
}

#[tokio::test]
async fn redlock_mode_runs_on_a_quorum_client() {
    let nodes = RedisServers::start(3);
    // No restart guard: the servers were just started and none restarts.
    let locks = Client::quorum_builder(nodes.urls())
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("quorum client");
    let ran = AtomicBool::new(false);
    assert_eq!(payout(&locks, 2, &ran).await.expect("quorum lock"), 2);
    assert!(ran.load(Ordering::SeqCst));
    // The release returns once a majority released it; the last node's release may still be
    // on its way.
    for node in &nodes {
        let conn = node.async_connection().await;
        let released = wait_until_async(Duration::from_secs(2), || async {
            !exists(&conn, "payout:2").await
        })
        .await;
        assert!(released, "released on every node");
    }
}

// ---------------------------------------------------------------------------------------------
// Control flow and errors of the body.

#[distributed_lock(key = "parse:<id>", client = locks)]
async fn parse(locks: &Client, id: u32, input: &str) -> Result<u32, AppError> {
    if input.is_empty() {
        return Ok(0);
    }
    let n: u32 = input.parse().map_err(|_| AppError::Body("not a number"))?;
    Ok(n + id)
}

#[tokio::test]
async fn question_mark_early_return_and_body_errors_all_release_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    assert_eq!(parse(&locks, 1, "").await.expect("early return"), 0);
    assert!(!exists(&conn, "parse:1").await);
    assert!(matches!(
        parse(&locks, 1, "x").await,
        Err(AppError::Body("not a number"))
    ));
    assert!(!exists(&conn, "parse:1").await);
    assert_eq!(parse(&locks, 1, "41").await.expect("value"), 42);
    assert!(!exists(&conn, "parse:1").await);
}

/// An error type without `From<distlock::Error>`.
#[derive(Debug, PartialEq)]
struct Plain(String);

fn plain(error: Error) -> Plain {
    Plain(format!("lock: {error}"))
}

#[distributed_lock(key = "plain:<id>", client = locks, wait = "0s", map_err = plain)]
async fn mapped(locks: &Client, id: u32) -> Result<u32, Plain> {
    Ok(id)
}

#[tokio::test]
async fn map_err_converts_lock_errors() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = as_other_owner(locks.lock("plain:1").try_acquire())
        .await
        .expect("free");
    assert_eq!(
        mapped(&locks, 1).await,
        Err(Plain(
            "lock: lock `plain:1` is held by another owner".into()
        ))
    );
    held.release().await.expect("release");
    assert_eq!(mapped(&locks, 1).await, Ok(1));
}

struct Tenant {
    name: String,
    locks: Client,
}

struct Order {
    id: (u32, u64),
}

impl Tenant {
    #[distributed_lock(key = "{<self.name>}:order:<order.id.1>", client = self.locks)]
    async fn place(
        &self,
        order: Order,
        conn: &redis::aio::MultiplexedConnection,
    ) -> Result<u64, AppError> {
        // The key was built before the body took `order`.
        let Order { id: (_, number) } = order;
        // A name with its own hash tag keeps it (with a `#` in front, for one that starts
        // with `{`: see `distlock/src/key.rs`): `distlock:#{acme}:order:77`.
        assert_eq!(
            raw_exists(conn, &format!("distlock:#{{{}}}:order:{number}", self.name)).await,
            1
        );
        Ok(number)
    }
}

#[tokio::test]
async fn keys_come_from_self_fields_and_parameter_fields() {
    let server = RedisServer::start();
    let conn = redis(&server).await;
    let tenant = Tenant {
        name: "acme".into(),
        locks: client(&server).await,
    };
    let order = Order { id: (1, 77) };
    assert_eq!(tenant.place(order, &conn).await.expect("placed"), 77);
    assert_eq!(
        raw_exists(&conn, "distlock:#{acme}:order:77").await,
        0,
        "released"
    );
}

#[tokio::test]
async fn a_dropped_call_releases_its_lock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = redis(&server).await;
    let (started, dropped, finished) = (
        Notify::new(),
        Arc::new(AtomicBool::new(false)),
        AtomicBool::new(false),
    );
    let call = long_job(&locks, 2, &started, dropped.clone(), &finished);
    let cut = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(cut.is_err(), "the call should still be running");
    assert!(dropped.load(Ordering::SeqCst));
    let freed = wait_until_async(Duration::from_secs(2), || async {
        !exists(&conn, "lost:2").await
    })
    .await;
    assert!(freed, "the lock of a dropped call was not released");
}

#[tokio::test]
async fn lease_is_only_there_inside_a_locked_fn_and_ends_with_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    assert!(distlock::lease().is_none());
    let kept = keep_lease(&locks).await.expect("call");
    assert!(
        !kept.is_held(),
        "a lease kept after the call still claims the lock"
    );
    tokio::time::timeout(Duration::from_secs(1), kept.lost())
        .await
        .expect("lost() of an ended hold resolves");
    let next = keep_lease(&locks).await.expect("call");
    assert!(next.fencing_token().expect("fencing = true") > kept.fencing_token().unwrap());
}

#[distributed_lock(key = "keep", client = locks, fencing = true)]
async fn keep_lease(locks: &Client) -> Result<distlock::Lease, AppError> {
    let lease = distlock::lease().expect("inside");
    assert!(lease.is_held());
    Ok(lease)
}

/// Without `fencing = true` the body's lease has no token and no counter is written; with it,
/// the same lock's next call has one.
#[tokio::test]
async fn fencing_is_off_unless_the_attribute_asks() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let conn = server.async_connection().await;
    let unfenced = unfenced_lease(&locks).await.expect("call");
    assert_eq!(unfenced.fencing_token(), None);
    let counter: bool = redis::cmd("EXISTS")
        .arg(fence_key("keep"))
        .query_async(&mut conn.clone())
        .await
        .expect("EXISTS");
    assert!(
        !counter,
        "a fencing counter was written without fencing = true"
    );
    let fenced = keep_lease(&locks).await.expect("call");
    assert!(fenced.fencing_token().is_some());
}

#[distributed_lock(key = "keep", client = locks)]
async fn unfenced_lease(locks: &Client) -> Result<distlock::Lease, AppError> {
    Ok(distlock::lease().expect("inside"))
}

#[distributed_lock(key = "counter:<id>", client = locks, wait = "10s")]
async fn increment(locks: &Client, id: u32, count: &AtomicU32) -> Result<(), AppError> {
    let seen = count.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    count.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generic_caller_sees_no_lost_updates() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let count = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (locks, count) = (locks.clone(), count.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    increment(&locks, 1, &count).await.expect("increment");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(count.load(Ordering::SeqCst), 60);
}
