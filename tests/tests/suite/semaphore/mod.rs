//! The counting semaphore (`Client::semaphore`) against real redis-server processes: the limit
//! across processes, per-permit leases through a holder's SIGKILL, the recorded limit, one
//! waiter woken per release, lost replies, a Cluster, fencing, inspection, and the quorum and
//! mode refusals.

use crate::common;

use std::time::{Duration, Instant};

use common::{as_other_owner, client, fence_key, lock_key, run_contenders, spawn_holder};
use distlock::{semaphore, Client, Error, LockMode};
use distlock_testkit::{
    wait_until_async, FaultProxy, Observer, RedisCluster, RedisServer, RedisServers,
};
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(10);

mod attribute;
mod deployments;
mod lost;
mod permits;
mod records;
mod waiters;

/// The semaphore's sorted set as the server holds it: (member, score) lowest score first, the
/// recorded limit (`permits`, score minus the limit) included.
async fn members(server: &RedisServer, name: &str) -> Vec<(String, f64)> {
    server
        .async_connection()
        .await
        .zrange_withscores(lock_key(name), 0, -1)
        .await
        .expect("ZRANGE")
}

/// The server's clock in ms (`TIME`).
async fn server_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("TIME");
    secs * 1000 + micros / 1000
}
