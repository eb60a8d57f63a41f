//! The `testing` feature's own tests: each server and fault does what it says, observed
//! through the public API and on the server itself.

use std::time::{Duration, Instant};

use distlock::testing::{
    end_lease, lock_state, wait_for_waiters, FaultProxy, TestCluster, TestQuorum, TestServer,
};
use distlock::{distributed_lock, Client, Error, LockMode};

const PATIENCE: Duration = Duration::from_secs(5);

mod faults;
mod scopes;
mod servers;

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The scheduler state of `pid` (`T`: stopped by a signal), from `/proc`.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The server's own answer to `EXISTS`, on a connection of the test's own.
async fn exists(server: &TestServer, key: &str) -> bool {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap()
        == 1
}
