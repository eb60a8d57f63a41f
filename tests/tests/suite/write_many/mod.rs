//! `Client::write_many`: several names at once on the write side of each name's read/write
//! lock (issue 37 item 2, "one name, one mode"). The README's own suggestion, `write(account)`
//! for one account and a set for a transfer between two, used to fail at runtime whenever
//! the two met: `lock_many` takes setnx locks, and a name written with `write` is refused to
//! it with `Error::ModeConflict` (the last test here shows that still holds, and what the
//! message says). A write set excludes each name's writers and readers and they exclude it,
//! with no conflict; a read during a transfer waits; the set is taken whole or not at all; a
//! lost reply leaves no name held; one fencing token for the set; a Redis Cluster takes it a
//! slot at a time; the attribute takes a list of keys.

use crate::common;

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{as_other_owner, client, fenced_set_token, fenced_token, intents_key, lock_key};
use distlock::{write_lock, Client, Error, LockMode};
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer, RedisServers};
use redis::AsyncCommands;

use crate::many::{two_slots, CLUSTER};

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(5);
const LONG: Duration = Duration::from_secs(30);

mod exclusion;
mod holds;
mod usage;

/// The write holder of `name`'s read/write lock on `server` (`None`: no writer).
async fn writer(server: &RedisServer, name: &str) -> Option<String> {
    let mut conn = server.async_connection().await;
    conn.hget(lock_key(name), "writer").await.expect("HGET")
}

/// The live intents (waiting writers) on `name` (the sorted set's placeholder, scored 0, is
/// not one).
async fn intents(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    redis::cmd("ZCOUNT")
        .arg(intents_key(name))
        .arg("(0")
        .arg("+inf")
        .query_async(conn)
        .await
        .expect("ZCOUNT")
}

/// True when no key of `names` is left on `server`: no hold, no intent.
async fn nothing_left(server: &RedisServer, names: &[&str]) -> bool {
    let mut conn = server.async_connection().await;
    for name in names {
        let exists: bool = conn.exists(lock_key(name)).await.expect("EXISTS");
        if exists {
            return false;
        }
    }
    true
}

/// Who is inside each of two names right now, checked on every entry: a writer finds nobody,
/// a reader finds no writer.
#[derive(Default)]
struct Occupancy {
    writers: [AtomicU32; 2],
    readers: [AtomicU32; 2],
    overlaps: AtomicU32,
}

impl Occupancy {
    fn write(&self, i: usize) {
        if self.writers[i].fetch_add(1, Ordering::SeqCst) != 0
            || self.readers[i].load(Ordering::SeqCst) != 0
        {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn write_done(&self, i: usize) {
        self.writers[i].fetch_sub(1, Ordering::SeqCst);
    }
    fn read(&self, i: usize) {
        self.readers[i].fetch_add(1, Ordering::SeqCst);
        if self.writers[i].load(Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn read_done(&self, i: usize) {
        self.readers[i].fetch_sub(1, Ordering::SeqCst);
    }
}
