//! Each process's record on each server: what the short description stored with every hold
//! (see `identity`) stands for.
//!
//! The record is the hash `<prefix>:#process:{<tag>}` (see `key.rs`: no lock name reaches it),
//! written before a site's first hold on each server (one round trip per site, client and
//! server), and written again in the background once a minute at most while the client
//! acquires or renews (a restarted server or a failover lost it); it expires a day after the
//! last write. Inspection reads it beside the lock; where it is gone, the holder is still
//! named by its tag and acquisition time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::Value;

use crate::algorithm::{evalsha, invoke, Lua};
use crate::conn::Conn;
use crate::identity::{self, Described};
use crate::key::record_key;
use crate::tasks::Tasks;

use super::Node;

/// The record's write, with its expiry in the same step.
static WRITE_RECORD: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("record.lua")));

/// How long a process record lives after its last write.
pub(crate) const RECORD_KEPT: Duration = Duration::from_secs(24 * 3600);
/// At most how often a client writes its record again, while it acquires or renews.
const REWRITE_EVERY: Duration = Duration::from_secs(60);

/// What one client has written to the record on each of its servers.
pub(crate) struct Records {
    key: Vec<u8>,
    written: Vec<Written>,
}

#[derive(Default)]
struct Written {
    /// How many of the process's sites the server's record has (or was last sent).
    sites: AtomicUsize,
    /// When it was last written, in ms on [`ms_at`]'s clock; 0 before the first write.
    at_ms: AtomicU64,
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `at` in milliseconds since [`EPOCH`], never 0 (which means "never written"). From a reading
/// the caller already took: every acquisition asks (`rewrite_if_old`), and a minute's schedule
/// needs no clock read of its own.
fn ms_at(at: Instant) -> u64 {
    at.saturating_duration_since(*EPOCH).as_millis() as u64 + 1
}

impl Records {
    pub(crate) fn new(prefix: &str, nodes: usize) -> Records {
        Records {
            key: record_key(prefix, identity::process_tag()),
            written: (0..nodes).map(|_| Written::default()).collect(),
        }
    }

    /// True when some server's record may lack the site numbered `site`.
    pub(crate) fn lacks(&self, site: u32) -> bool {
        let site = site as usize;
        self.written
            .iter()
            .any(|w| w.sites.load(Ordering::Relaxed) <= site)
    }

    /// Writes the record, with every site of the process, to the servers whose record lacks
    /// the site numbered `site`, and waits for them (at most `timeout`), so that a hold from
    /// that site is never found without it. `conns` gives each server's connection in order:
    /// the one the acquisition itself goes on, so the record is written before it there (a
    /// second task of the same new site, racing the first one's write, may take its hold
    /// before the write lands: its holder then shows without host for that moment). A
    /// failed write is not retried before the next rewrite (see
    /// [`rewrite_if_old`](Self::rewrite_if_old)), so a server that refuses it costs one round
    /// trip per site, not one per acquisition.
    pub(crate) async fn write_lacking(&self, site: u32, conns: Vec<Conn>, timeout: Duration) {
        let count = identity::site_count();
        let now = ms_at(Instant::now());
        let writes = conns
            .into_iter()
            .zip(&self.written)
            .filter_map(|(mut conn, w)| {
                if w.sites.load(Ordering::Relaxed) > site as usize {
                    return None;
                }
                w.sites.fetch_max(count, Ordering::Relaxed);
                w.at_ms.store(now, Ordering::Relaxed);
                let cmd = self.write_cmd();
                Some(async move {
                    let _ = tokio::time::timeout(timeout, write(&cmd, &mut conn)).await;
                })
            });
        futures_util::future::join_all(writes).await;
    }

    /// Writes a record again in the background where its last write is over a minute old,
    /// as of `now` (a reading the caller took).
    pub(crate) fn rewrite_if_old(&self, nodes: &[Node], tasks: &Tasks, now: Instant) {
        let now = ms_at(now);
        let every = REWRITE_EVERY.as_millis() as u64;
        for (node, w) in nodes.iter().zip(&self.written) {
            let last = w.at_ms.load(Ordering::Relaxed);
            if last == 0 || now.saturating_sub(last) < every {
                continue;
            }
            // One writer per minute, whoever wins.
            if w.at_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let mut conn: Conn = node.conn.clone();
            let cmd = self.write_cmd();
            tasks.spawn(async move {
                let _ = tokio::time::timeout(REWRITE_EVERY, write(&cmd, &mut conn)).await;
            });
        }
    }

    /// The record as one script call: every site's name, host and pid, and the expiry.
    fn write_cmd(&self) -> redis::Cmd {
        let names = identity::site_names();
        let mut cmd = evalsha(&WRITE_RECORD, 1, 6 + 2 * names.len(), 128);
        cmd.arg(&self.key)
            .arg(RECORD_KEPT.as_millis() as u64)
            .arg("host")
            .arg(identity::host())
            .arg("pid")
            .arg(std::process::id());
        for (n, name) in names.iter().enumerate() {
            cmd.arg(identity::site_field(n as u32)).arg(&**name);
        }
        cmd
    }
}

/// Sends the record's write (see [`Records::write_cmd`]).
async fn write(cmd: &redis::Cmd, conn: &mut Conn) {
    let _: redis::RedisResult<Value> = invoke(&WRITE_RECORD, cmd, conn).await;
}

/// What a process's record says about one of its holds: host, pid and the site's name.
pub(crate) async fn look_up(
    conn: &mut impl ConnectionLike,
    prefix: &str,
    described: &Described,
) -> (Option<String>, Option<u32>, Option<String>) {
    let reply: redis::RedisResult<(Option<String>, Option<String>, Option<String>)> =
        redis::cmd("HMGET")
            .arg(record_key(prefix, &described.process))
            .arg("host")
            .arg("pid")
            .arg(identity::site_field(described.site))
            .query_async(conn)
            .await;
    match reply {
        Ok((host, pid, site)) => (host, pid.and_then(|p| p.parse().ok()), site),
        Err(_) => (None, None, None),
    }
}
