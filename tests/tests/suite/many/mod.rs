//! `Client::lock_many`: several names at once, all or none, against real redis-server
//! processes: one node, a quorum and a Redis Cluster whose slots split a set. A set excludes
//! each name's lock and the other way round; a waiter holds none of its names while it waits
//! and is woken by the release of the name it found busy; callers asking in opposite orders
//! never deadlock; a dropped or failed acquisition leaves no name taken; the guard is held
//! only while every name is; the transfer attribute keeps a bank's total across tasks and
//! processes.

use crate::common;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use common::{
    as_other_owner, channel, client, fence_key, fenced_set_token, fenced_token, lock_key,
    run_contenders, subscribers, waited_key,
};
use distlock::{Client, Error, Guard};
use distlock_testkit::{
    wait_until_async, Bank, FaultProxy, Keeper, RedisCluster, RedisSentinel, RedisServer,
    RedisServers,
};
use redis::AsyncCommands;

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine);
/// the defects these tests catch mean "never", or a whole 30 s lease.
const EVENT_LIMIT: Duration = Duration::from_secs(5);
/// The lease of the holders a waiter waits for: what a missed wake-up would cost.
const LONG: Duration = Duration::from_secs(30);

pub(crate) static CLUSTER: LazyLock<Keeper<RedisCluster>> =
    LazyLock::new(|| Keeper::new(RedisCluster::start));

mod deployments;
mod exclusion;
mod giving_back;
mod transfers;
mod waiting;

async fn value(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    conn.get(lock_key(name)).await.expect("GET")
}

/// The names' lock values on `server` (`None`: free).
async fn values(server: &RedisServer, names: &[&str]) -> Vec<Option<String>> {
    let mut conn = server.async_connection().await;
    let mut all = Vec::new();
    for name in names {
        all.push(value(&mut conn, name).await);
    }
    all
}

/// `names` in a set's fixed order: by Redis Cluster slot, then by lock key.
fn in_order<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut sorted = names.to_vec();
    sorted.sort_by_key(|n| (RedisCluster::slot_of(lock_key(n).as_bytes()), lock_key(n)));
    sorted
}

/// A task of another owner waiting for the set `names` (up to a minute).
fn spawn_set_waiter(
    locks: &Client,
    names: &[&'static str],
) -> tokio::task::JoinHandle<Result<Guard, Error>> {
    let (locks, names) = (locks.clone(), names.to_vec());
    tokio::spawn(as_other_owner(async move {
        locks
            .lock_many(names)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    }))
}

/// Waits until some connection listens on the release channel of `name`.
async fn listened(server: &RedisServer, name: &str) -> bool {
    wait_until_async(EVENT_LIMIT, || async move {
        subscribers(server, &channel(name)).await > 0
    })
    .await
}

/// Names spread over the cluster's masters: two whose slots differ, in the set's order.
pub(crate) fn two_slots(prefix: &str) -> (String, String) {
    let masters = |n: &str| {
        let slot = RedisCluster::slot_of(lock_key(n).as_bytes());
        CLUSTER.with(move |c| c.master_of_slot(slot))
    };
    let first = format!("{prefix}-0");
    let other = (1..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| masters(n) != masters(&first))
        .expect("a name on another master");
    let order = in_order(&[&first, &other]);
    (order[0].to_owned(), order[1].to_owned())
}
