//! Who holds a lock: the short description stored with every hold, and the per-process
//! record it points to.
//!
//! A hold is described as `<process>.<site>.<at>`: the process's tag (8 characters drawn once
//! per process), the number of the call site in that process, and the time it was taken (unix
//! ms), both in base 36. What the tag and the number stand for (host, pid, the locked fn or the
//! `file:line` of the call) is written once per process and server to the process's record,
//! the hash `<prefix>:#process:{<tag>}` (see `key.rs`: no lock name reaches it), not with
//! every hold. A setnx lock's value is its token
//! and this description, 41 or 42 bytes: at most 44 bytes Redis keeps a string in one
//! allocation with its header, and every byte of the value is copied, compared and sent back
//! on every acquisition and release. The full description (about 120 bytes) cost the server
//! about 2,800 instructions per uncontended cycle, a tenth of its work (see
//! examples/bench/RESULTS.md and the CHANGELOG's performance history).
//!
//! The record is written before a site's first hold on each server (one round trip per site,
//! client and server), and written again in the background once a minute at most while the
//! client acquires or renews (a restarted server or a failover lost it); it expires a day after
//! the last write. Inspection reads it beside the lock; where it is gone, the holder is still
//! named by its tag and acquisition time.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use redis::aio::ConnectionLike;
use redis::Value;

use crate::conn::Conn;
use crate::key::record_key;
use crate::quorum::Node;
use crate::sync::lock;

/// How long a process record lives after its last write.
pub(crate) const RECORD_KEPT: Duration = Duration::from_secs(24 * 3600);
/// At most how often a client writes its record again, while it acquires or renews.
const REWRITE_EVERY: Duration = Duration::from_secs(60);

/// Where a lock is taken: the locked fn (set by the attributes) or the caller's source
/// location. Both live for the whole program, so their address names them.
#[derive(Clone, Copy)]
pub(crate) enum Site {
    Fn(&'static str),
    Caller(&'static Location<'static>),
}

impl Site {
    pub(crate) fn id(self) -> (usize, usize) {
        match self {
            Site::Fn(f) => (f.as_ptr() as usize, f.len()),
            Site::Caller(at) => (at as *const Location<'static> as usize, usize::MAX),
        }
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Fn(name) => f.write_str(name),
            Site::Caller(at) => at.fmt(f),
        }
    }
}

/// The characters of tags and tokens: URL-safe base 64, no `.` and no tab.
pub(crate) const ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// This process's tag: 48 random bits.
pub(crate) fn process_tag() -> &'static str {
    static TAG: LazyLock<String> = LazyLock::new(|| {
        let bits = rand::rng().random::<u64>();
        (0..8)
            .map(|i| ALPHABET[(bits >> (6 * i)) as usize & 63] as char)
            .collect()
    });
    &TAG
}

/// The sites this process has taken locks at, numbered in order of first use.
struct Sites {
    numbers: HashMap<(usize, usize), u32>,
    names: Vec<Arc<str>>,
}

static SITES: LazyLock<Mutex<Sites>> = LazyLock::new(|| {
    Mutex::new(Sites {
        numbers: HashMap::new(),
        names: Vec::new(),
    })
});
/// `SITES.names.len()`, read without the lock on every acquisition.
static SITE_COUNT: AtomicUsize = AtomicUsize::new(0);

fn sites() -> std::sync::MutexGuard<'static, Sites> {
    lock(&SITES)
}

/// The site's number, given at its first use. Each thread remembers the last site it asked
/// about, so the hot path (one site taking lock after lock) does not take the table's lock.
pub(crate) fn site_number(site: Site) -> u32 {
    thread_local! {
        static LAST: std::cell::Cell<((usize, usize), u32)> =
            const { std::cell::Cell::new(((0, 0), u32::MAX)) };
    }
    let id = site.id();
    let (last, n) = LAST.get();
    if last == id && n != u32::MAX {
        return n;
    }
    let n = numbered(site);
    LAST.set((id, n));
    n
}

fn numbered(site: Site) -> u32 {
    let mut sites = sites();
    if let Some(&n) = sites.numbers.get(&site.id()) {
        return n;
    }
    let n = sites.names.len() as u32;
    // Tabs and newlines in a site would split the lines of a listing.
    let name = site.to_string().replace(['\n', '\t'], " ");
    sites.names.push(Arc::from(name));
    sites.numbers.insert(site.id(), n);
    SITE_COUNT.store(sites.names.len(), Ordering::Release);
    n
}

/// `<tag>.<site>.` of a site, the description up to its time (see [`push_time`]).
pub(crate) fn push_up_to_time(s: &mut String, site: Site) {
    s.push_str(process_tag());
    s.push('.');
    push_base36(s, u64::from(site_number(site)));
    s.push('.');
}

/// The time of an acquisition, ending its description.
pub(crate) fn push_time(s: &mut String) {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    push_base36(s, ms);
}

/// Who takes a lock, as stored with a hold (see the module doc).
pub(crate) fn describe(site: Site) -> String {
    let mut s = String::with_capacity(24);
    push_up_to_time(&mut s, site);
    push_time(&mut s);
    s
}

fn push_base36(s: &mut String, mut n: u64) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = [0u8; 13];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// A stored description, read back: the process's tag, the site's number and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    pub(crate) process: String,
    pub(crate) site: u32,
    pub(crate) at: SystemTime,
}

/// Reads a description written by [`describe`]; `None` for anything else.
pub(crate) fn parse(text: &str) -> Option<Described> {
    let mut parts = text.split('.');
    let (process, site, at) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || process.len() != 8
        || !process.bytes().all(|c| ALPHABET.contains(&c))
    {
        return None;
    }
    let base36 = |s: &str| u64::from_str_radix(s, 36).ok();
    Some(Described {
        process: process.to_owned(),
        site: u32::try_from(base36(site)?).ok()?,
        at: UNIX_EPOCH + Duration::from_millis(base36(at)?),
    })
}

/// The record's field holding a site's name.
pub(crate) fn site_field(n: u32) -> String {
    let mut s = String::from("s:");
    push_base36(&mut s, u64::from(n));
    s
}

/// `host=<host>\tpid=<pid>`: who forced an unlock, kept in its record.
pub(crate) fn process_description() -> String {
    format!("host={}\tpid={}", host(), std::process::id())
}

/// This machine's name, as the kernel knows it (Linux), else the usual variables; computed
/// once per process.
fn host() -> &'static str {
    static HOST: LazyLock<String> = LazyLock::new(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .unwrap_or_else(|| "unknown".to_owned())
            .replace(['\t', '\n'], " ")
    });
    &HOST
}

/// What one client has written to the record on each of its servers.
pub(crate) struct Records {
    key: Vec<u8>,
    written: Vec<Written>,
}

#[derive(Default)]
struct Written {
    /// How many of the process's sites the server's record has (or was last sent).
    sites: AtomicUsize,
    /// When it was last written, in ms since [`EPOCH`]; 0 before the first write.
    at_ms: AtomicU64,
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    // Never 0, which means "never written".
    EPOCH.elapsed().as_millis() as u64 + 1
}

impl Records {
    pub(crate) fn new(prefix: &str, nodes: usize) -> Records {
        Records {
            key: record_key(prefix, process_tag()),
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
        let count = SITE_COUNT.load(Ordering::Acquire);
        let now = now_ms();
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
                    let _ =
                        tokio::time::timeout(timeout, cmd.query_async::<Value>(&mut conn)).await;
                })
            });
        futures_util::future::join_all(writes).await;
    }

    /// Writes a record again in the background where its last write is over a minute old.
    pub(crate) fn rewrite_if_old(&self, nodes: &[Node]) {
        let now = now_ms();
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
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let mut conn: Conn = node.conn.clone();
            let cmd = self.write_cmd();
            runtime.spawn(async move {
                let _ =
                    tokio::time::timeout(REWRITE_EVERY, cmd.query_async::<Value>(&mut conn)).await;
            });
        }
    }

    /// The record as one pipeline: every site's name, host and pid, and the expiry.
    fn write_cmd(&self) -> redis::Pipeline {
        let names: Vec<Arc<str>> = sites().names.clone();
        let mut hset = redis::cmd("HSET");
        hset.arg(&self.key)
            .arg("host")
            .arg(host())
            .arg("pid")
            .arg(std::process::id());
        for (n, name) in names.iter().enumerate() {
            hset.arg(site_field(n as u32)).arg(&**name);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(hset);
        pipe.cmd("PEXPIRE")
            .arg(&self.key)
            .arg(RECORD_KEPT.as_millis() as u64);
        pipe
    }
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
            .arg(site_field(described.site))
            .query_async(conn)
            .await;
    match reply {
        Ok((host, pid, site)) => (host, pid.and_then(|p| p.parse().ok()), site),
        Err(_) => (None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_short_and_read_back() {
        let long = Site::Fn("a::very::long::module::path::of::a::locked::function::name");
        let d = describe(long);
        assert!(d.len() <= 20, "{d}");
        let read = parse(&d).expect("parses");
        assert_eq!(read.process, process_tag());
        assert_eq!(read.site, site_number(long));
        let age = SystemTime::now().duration_since(read.at).expect("past");
        assert!(age < Duration::from_secs(60));
        // The same site keeps its number; another gets the next.
        assert_eq!(site_number(long), read.site);
        let other = Site::Fn("other\tsite");
        assert_ne!(site_number(other), read.site);
        let n = site_number(other) as usize;
        assert_eq!(&*sites().names[n], "other site");
    }

    #[test]
    fn anything_else_is_not_a_description() {
        for text in [
            "",
            "host=h\tpid=1",
            "abc.1.2",
            "ABCDEFGH.1",
            "ABCDEFGH.1.2.3",
            "ABCDEFGH.z!.1",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
