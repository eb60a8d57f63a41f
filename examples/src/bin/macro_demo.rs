//! The lock attributes on a real Redis: what an annotated fn does when the lock is free, busy,
//! nested, shared or lost.
//!
//! Run with `cargo run -p distlock-examples --bin macro_demo` (starts its own redis-server on a
//! free port; needs `redis-server` on `PATH` or in `DISTLOCK_REDIS_SERVER`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{distributed_lock, read_lock, write_lock, Client, Error};

/// The application's error type; lock errors convert into it, so they come out of `?`.
#[derive(Debug)]
enum AppError {
    Lock(Error),
    Declined(&'static str),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Lock(error) => write!(f, "lock: {error}"),
            AppError::Declined(why) => write!(f, "declined: {why}"),
        }
    }
}

/// At most one caller per order runs the body, in any process; the default client is used.
#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s", fencing = true)]
async fn pay(id: u64, amount: u64, who: &str, clock: &Instant) -> Result<u64, AppError> {
    if amount == 0 {
        // An early return still releases the lock.
        return Err(AppError::Declined("nothing to pay"));
    }
    let token = distlock::lease()
        .expect("inside a locked fn")
        .fencing_token()
        .expect("fencing = true");
    say(
        clock,
        &format!("{who} pays order {id} (fencing token {token})"),
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(amount)
}

/// A scheduled job: if another instance already runs it, this one skips (returns `Ok(None)`).
#[distributed_lock(key = "nightly-report", wait = "0s", on_busy = "skip")]
async fn nightly_report(who: &str) -> Result<Option<String>, AppError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(Some(format!("report by {who}")))
}

/// Reentrant: `settle` calls `audit` on the same key from the same task.
#[distributed_lock(key = "account:<account>", mode = "reentrant")]
async fn settle(account: u32) -> Result<&'static str, AppError> {
    audit(account).await?;
    Ok("settled")
}

#[distributed_lock(key = "account:<account>", mode = "reentrant", wait = "0s")]
async fn audit(account: u32) -> Result<(), AppError> {
    let _ = account;
    Ok(())
}

/// Readers share a document; a writer excludes them. `client = ..` picks the client per call.
#[read_lock(key = "doc:<doc>", client = locks)]
async fn read_doc(locks: &Client, doc: u32, who: &str, clock: &Instant) -> Result<(), AppError> {
    say(clock, &format!("{who} reads doc {doc}"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

#[write_lock(key = "doc:<doc>", client = locks)]
async fn write_doc(locks: &Client, doc: u32, clock: &Instant) -> Result<(), AppError> {
    say(clock, &format!("writer edits doc {doc}, alone"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// A lease of 300 ms without the watchdog: a body that runs longer is cancelled when the lease
/// ends, and the call returns `LeaseLost` instead of carrying on unprotected.
#[distributed_lock(key = "export:<id>", ttl = "300ms", watchdog = false)]
async fn slow_export(id: u32) -> Result<(), AppError> {
    let _ = id;
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let (_server, locks) = distlock_examples::demo_server().await;
    distlock::set_default(locks.clone()).expect("the first default client");
    let clock = Arc::new(Instant::now());

    println!("1. three callers pay the same order at once; they take turns:");
    let mut calls = Vec::new();
    for who in ["alice", "bob", "carol"] {
        let clock = clock.clone();
        calls.push(tokio::spawn(async move { pay(42, 10, who, &clock).await }));
    }
    for call in calls {
        call.await.expect("task").expect("paid");
    }
    let declined = pay(42, 0, "dave", &clock).await.unwrap_err();
    say(&clock, &format!("dave: {declined}"));

    println!("\n2. two instances start the nightly report; one runs it, the other skips:");
    let instances: Vec<_> = ["instance-a", "instance-b"]
        .into_iter()
        .map(|who| tokio::spawn(nightly_report(who)))
        .collect();
    for instance in instances {
        match instance.await.expect("task").expect("no error") {
            Some(report) => say(&clock, &format!("ran: {report}")),
            None => say(&clock, "skipped: another instance holds the lock"),
        }
    }

    println!("\n3. a reentrant lock: a locked fn calls another on the same key:");
    say(&clock, settle(7).await.expect("nested calls re-enter"));

    println!("\n4. two readers share doc 1, the writer waits for both:");
    let mut tasks = Vec::new();
    for who in ["reader-1", "reader-2", "writer"] {
        let (locks, clock) = (locks.clone(), clock.clone());
        tasks.push(tokio::spawn(async move {
            if who == "writer" {
                tokio::time::sleep(Duration::from_millis(10)).await;
                write_doc(&locks, 1, &clock).await
            } else {
                read_doc(&locks, 1, who, &clock).await
            }
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("read/write");
    }

    println!("\n5. a body outlives its fixed 300 ms lease: it is cancelled, the call says so:");
    let started = Instant::now();
    match slow_export(3).await {
        Err(AppError::Lock(e @ Error::LeaseLost { .. })) => {
            say(&clock, &format!("after {:?}: {e}", started.elapsed()));
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

fn say(clock: &Instant, line: &str) {
    println!("  [{:>5} ms] {line}", clock.elapsed().as_millis());
}
