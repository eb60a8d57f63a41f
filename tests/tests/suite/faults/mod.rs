//! Faults that real callers produce: stale guards, shortened leases, cancelled futures,
//! concurrent calls in one task, huge durations, one name used in two modes, and permanent
//! errors on quorum nodes. Each test here failed on the code before the tenure-checked
//! protocol (see the README's fault model).

use crate::common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{as_other_owner, channel, client, lock_key, readers_key};
use distlock::{distributed_lock, read_lock, write_lock, Client, Error, LockRequest};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner; only a broken lock
/// reaches it, and the test then fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

mod cancelled;
mod leases;
mod limits;
mod owners;
mod quorum_nodes;

async fn exists(raw: &MultiplexedConnection, name: &str) -> bool {
    raw.clone().exists(lock_key(name)).await.expect("EXISTS")
}

async fn pttl(raw: &MultiplexedConnection, name: &str) -> i64 {
    raw.clone().pttl(lock_key(name)).await.expect("PTTL")
}

/// True once some client listens for the lock's releases.
async fn subscribed(raw: &MultiplexedConnection, name: &str) -> bool {
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel(name))
        .query_async(&mut raw.clone())
        .await
        .expect("PUBSUB NUMSUB");
    counts.first().is_some_and(|(_, n)| *n > 0)
}

/// The three modes whose owner is a task (or a locked call): built the same way.
fn request<'c>(locks: &'c Client, mode: &str, name: &str) -> LockRequest<'c> {
    match mode {
        "reentrant" => locks.reentrant(name),
        "read" => locks.read(name),
        "write" => locks.write(name),
        _ => locks.lock(name),
    }
}

/// Takes and releases a lock of `mode`, so the server has its scripts.
async fn load_scripts(locks: &Client, mode: &str) {
    let g = request(locks, mode, "warm-up")
        .try_acquire()
        .await
        .expect("warm-up");
    g.release().await.expect("warm-up release");
}

/// Scripts the server has run so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    server.commandstats().get("evalsha").copied().unwrap_or(0)
}
