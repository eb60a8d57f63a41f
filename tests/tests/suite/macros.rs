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

mod body;
mod busy;
mod client_lookup;
mod exclusion;
mod footprint;
mod lease_lost;
mod nesting;
mod read_write;

use crate::common;

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

/// Runs the test `test` (a path below this module, such as `exclusion::child_contender`) alone
/// in a new process of this test binary.
fn spawn_child(test: &str, envs: &[(&str, String)]) -> std::process::Child {
    // The harness names tests by their path without the crate's name.
    let test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    };
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            test.as_str(),
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
