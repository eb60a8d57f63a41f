//! The read/write mix of issue 29: 8 tasks on one name of one client, 9 reads to 1 write,
//! reads held 100 µs and writes 200 µs, each waiting with the library's own mechanism.
//! Prints reads/s, writes/s, the longest wait of a reader and of a writer, the server
//! commands per call (from `INFO commandstats`, calls = acquisitions + releases; in all and
//! by command), and the
//! overlaps an in-process check saw (a writer beside anyone). `peer` as the third argument
//! runs `distributed-lock-redis` 0.2's read/write lock instead (its own waiting, `acquire_read`
//! and `acquire_write`), in the same program against the same kind of server.
//!
//! ```sh
//! cargo run --release -p distlock-bench --example rw_mix -- [seconds, default 5] [tasks, default 8] [peer]
//! ```
//!
//! With `RW_MIX_URL` set, it runs against that server instead of starting one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const READ_HOLD: Duration = Duration::from_micros(100);
const WRITE_HOLD: Duration = Duration::from_micros(200);
const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

/// `calls=` of every command in `INFO commandstats` but `INFO` itself, by command.
async fn commands(conn: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "info").then(|| (name.to_owned(), calls))
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let tasks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let peer = args.next().is_some_and(|a| a == "peer");
    // RW_MIX_URL: a server of the caller's (to watch it with MONITOR, say) instead of one
    // started here.
    let own = std::env::var("RW_MIX_URL")
        .is_err()
        .then(distlock_testkit::RedisServer::start);
    let url = std::env::var("RW_MIX_URL")
        .unwrap_or_else(|_| own.as_ref().map(|s| s.url()).unwrap_or_default());
    let client = distlock::Client::connect(&url).await.expect("connect");
    let provider = Arc::new(
        distributed_lock_redis::RedisLockProvider::builder()
            .url(url.clone())
            .expiry(TTL)
            .build()
            .await
            .expect("connect"),
    );
    let mut raw = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // Inside: readers count up, a writer sets a large negative value.
    let inside = Arc::new(AtomicI64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (reads, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (read_wait, write_wait) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let before = commands(&mut raw).await;
    let stop = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let client = client.clone();
        let provider = provider.clone();
        let failed = failed.clone();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        let (reads, writes) = (reads.clone(), writes.clone());
        let (read_wait, write_wait) = (read_wait.clone(), write_wait.clone());
        set.spawn(async move {
            let mut n = t;
            while Instant::now() < stop {
                n += 1;
                let write = n % 10 == 0;
                let asked = Instant::now();
                if write {
                    let g = Held::write(&client, &provider, peer).await;
                    if matches!(g, Held::Failed) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let waited = asked.elapsed().as_micros() as u64;
                    write_wait.fetch_max(waited, Ordering::Relaxed);
                    if inside.swap(-1_000_000, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    spin(WRITE_HOLD).await;
                    inside.store(0, Ordering::SeqCst);
                    g.release().await;
                    writes.fetch_add(1, Ordering::Relaxed);
                } else {
                    let g = Held::read(&client, &provider, peer).await;
                    if matches!(g, Held::Failed) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let waited = asked.elapsed().as_micros() as u64;
                    read_wait.fetch_max(waited, Ordering::Relaxed);
                    if inside.fetch_add(1, Ordering::SeqCst) < 0 {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    spin(READ_HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let elapsed = started.elapsed().as_secs_f64();
    let after = commands(&mut raw).await;
    let (r, w) = (
        reads.load(Ordering::Relaxed),
        writes.load(Ordering::Relaxed),
    );
    let calls = (2 * (r + w)).max(1) as f64;
    let sent: Vec<(String, u64)> = after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let total: u64 = sent.iter().map(|(_, n)| n).sum();
    println!(
        "{}, tasks {tasks}, {secs} s: reads/s {:.0}, writes/s {:.0}, longest wait read {:.1} ms, write {:.1} ms, commands per call {:.1}, overlaps {}, not served within {WAIT:?} {}",
        if peer { "distributed-lock-redis" } else { "distlock" },
        r as f64 / elapsed,
        w as f64 / elapsed,
        read_wait.load(Ordering::Relaxed) as f64 / 1000.0,
        write_wait.load(Ordering::Relaxed) as f64 / 1000.0,
        total as f64 / calls,
        overlaps.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    let by_command: Vec<String> = sent
        .iter()
        .map(|(name, n)| format!("{name} {:.2}", *n as f64 / calls))
        .collect();
    println!("  per call: {}", by_command.join(", "));
}

/// Holds for `d` without giving the thread to anyone (a short critical section's work).
async fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// A hold of either library.
enum Held {
    Distlock(Box<distlock::Guard>),
    PeerRead(distributed_lock_redis::RedisReadLockHandle),
    PeerWrite(distributed_lock_redis::RedisWriteLockHandle),
    /// Not served within `WAIT` (the peer's readers can wait that long).
    Failed,
}

impl Held {
    async fn read(client: &distlock::Client, provider: &Peer, peer: bool) -> Held {
        use distributed_lock_core::traits::{
            DistributedReaderWriterLock, ReaderWriterLockProvider,
        };
        if peer {
            let lock = provider.create_reader_writer_lock("mix");
            return lock
                .acquire_read(Some(WAIT))
                .await
                .map_or(Held::Failed, Held::PeerRead);
        }
        Held::Distlock(Box::new(
            client
                .read("mix")
                .ttl(TTL)
                .wait(WAIT)
                .acquire()
                .await
                .expect("read"),
        ))
    }

    async fn write(client: &distlock::Client, provider: &Peer, peer: bool) -> Held {
        use distributed_lock_core::traits::{
            DistributedReaderWriterLock, ReaderWriterLockProvider,
        };
        if peer {
            let lock = provider.create_reader_writer_lock("mix");
            return lock
                .acquire_write(Some(WAIT))
                .await
                .map_or(Held::Failed, Held::PeerWrite);
        }
        Held::Distlock(Box::new(
            client
                .write("mix")
                .ttl(TTL)
                .wait(WAIT)
                .acquire()
                .await
                .expect("write"),
        ))
    }

    async fn release(self) {
        use distributed_lock_core::traits::LockHandle;
        match self {
            Held::Distlock(g) => (*g).release().await.expect("release"),
            Held::PeerRead(h) => h.release().await.expect("release"),
            Held::PeerWrite(h) => h.release().await.expect("release"),
            Held::Failed => {}
        }
    }
}

type Peer = Arc<distributed_lock_redis::RedisLockProvider>;
