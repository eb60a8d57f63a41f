//! The client's own work per lock cycle, for profilers: N tasks loop acquire + release on
//! distinct keys (S2's shape) against a `redis-server` of their own, for distlock or for the
//! bench's `limit` (SET NX PX + a compare-and-delete script on one MultiplexedConnection).
//!
//! ```sh
//! cargo build --release -p distlock-bench --example client_work
//! # instructions per cycle, which the VM's timing noise does not move:
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/client_work distlock 3 32
//! callgrind_annotate --inclusive=yes cg.out | grep 'client_work::main::{{closure}}::{{closure}} \['
//! # divide by the cycles it printed (under valgrind) for instructions per cycle
//! ```
//!
//! Arguments: `distlock` or `limit`, seconds (default 5), tasks (default 32), connections
//! (default: distlock's default, [`distlock::DEFAULT_CONNECTIONS`], and for the limit 1, as in
//! the bench's limit column): distlock's `ClientBuilder::connections`, or for the limit that many
//! MultiplexedConnections, task `i` on connection `i % n`. Prints cycles/s and the process's
//! CPU time per cycle (getrusage; noisy on a shared VM), and for distlock the size of the
//! acquire and release futures. Tasks `0` is S1's shape instead: one loop of sequential cycles on
//! the main thread, printing p50/p99, CPU time and allocations per cycle (the binary counts
//! them with a counting global allocator) and the server's per-command figures.
//!
//! Options, before the arguments: `--cycles N` makes every task run exactly N cycles instead
//! of running for the seconds (so a run under callgrind does a known amount of work; see
//! `cycle_cost.sh`), and `--url URL` uses that server instead of starting one (e.g. a
//! `redis-server` under callgrind).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_testkit::{cpu_time, own_cpu_time};

/// The system allocator, counting allocations (reallocations included: each may move).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How long each loop runs: until an instant, or for a number of cycles.
#[derive(Clone, Copy)]
enum Budget {
    Until(Instant),
    Cycles(u64),
}

impl Budget {
    /// Whether a loop that has done `done` cycles starts another.
    fn more(self, done: u64) -> bool {
        match self {
            Budget::Until(stop) => Instant::now() < stop,
            Budget::Cycles(n) => done < n,
        }
    }
}

#[tokio::main]
async fn main() {
    let (mut cycles_each, mut external) = (None, None);
    let mut positional = Vec::new();
    let mut raw = std::env::args().skip(1);
    while let Some(arg) = raw.next() {
        match arg.as_str() {
            "--cycles" => cycles_each = raw.next().and_then(|n| n.parse::<u64>().ok()),
            "--url" => external = raw.next(),
            _ => positional.push(arg),
        }
    }
    let mut args = positional.into_iter();
    let which = args.next().unwrap_or_else(|| "distlock".into());
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let tasks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let connections: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let server = external
        .is_none()
        .then(distlock_testkit::RedisServer::start);
    let url = external.unwrap_or_else(|| server.as_ref().expect("started").url());
    let budget = match cycles_each {
        Some(n) => Budget::Cycles(n),
        None => Budget::Until(Instant::now() + Duration::from_secs(secs)),
    };
    if tasks == 0 {
        s1(&which, &url, budget, connections).await;
        print_commandstats(&url);
        return;
    }
    let cycles = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    match which.as_str() {
        "distlock" => {
            let client = distlock_client(&url, connections).await;
            let acquire = client.lock("sizes").ttl(TTL).acquire();
            println!("acquire future: {} bytes", std::mem::size_of_val(&acquire));
            let guard = acquire.await.expect("acquire");
            let release = guard.release();
            println!("release future: {} bytes", std::mem::size_of_val(&release));
            release.await.expect("release");
            for i in 0..tasks {
                let (client, cycles) = (client.clone(), cycles.clone());
                handles.push(tokio::spawn(async move {
                    let key = format!("k{i}");
                    let mut done = 0;
                    while budget.more(done) {
                        distlock_cycle(&client, &key).await;
                        cycles.fetch_add(1, Ordering::Relaxed);
                        done += 1;
                    }
                }));
            }
        }
        "limit" => {
            let mut conns = Vec::new();
            for _ in 0..connections.unwrap_or(1).max(1) {
                conns.push(limit_connection(&url).await);
            }
            let limit = Arc::new(Limit::new());
            for i in 0..tasks {
                let mut conn = conns[i % conns.len()].clone();
                let (cycles, limit) = (cycles.clone(), limit.clone());
                handles.push(tokio::spawn(async move {
                    let key = format!("k{i}");
                    let mut done = 0;
                    while budget.more(done) {
                        limit.cycle(&mut conn, &key).await;
                        cycles.fetch_add(1, Ordering::Relaxed);
                        done += 1;
                    }
                }));
            }
        }
        other => {
            eprintln!(
                "usage: client_work [--cycles N] [--url URL] distlock|limit [seconds] [tasks] [connections] (not {other:?})"
            );
            std::process::exit(2);
        }
    }
    // An external server's process is not ours to read.
    let server_cpu = || {
        server
            .as_ref()
            .map_or(Duration::ZERO, |s| cpu_time(s.pid()))
    };
    let server_before = server_cpu();
    let (started, cpu_before) = (Instant::now(), own_cpu_time());
    for handle in handles {
        handle.await.expect("task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = cycles.load(Ordering::Relaxed);
    println!(
        "{which}: {n} cycles, {:.0} cycles/s, process CPU {:.2} µs/cycle, redis-server CPU {:.2} µs/cycle",
        n as f64 / elapsed,
        (own_cpu_time() - cpu_before).as_secs_f64() * 1e6 / n.max(1) as f64,
        (server_cpu() - server_before).as_secs_f64() * 1e6 / n.max(1) as f64
    );
    print_commandstats(&url);
}

/// Every cycle's lease: far longer than a cycle, so no lock ever expires under a cycle.
const TTL: Duration = Duration::from_secs(10);

/// A distlock client on `connections` connections (default: distlock's default).
async fn distlock_client(url: &str, connections: Option<usize>) -> distlock::Client {
    distlock::Client::builder(url)
        .connections(connections.unwrap_or(distlock::DEFAULT_CONNECTIONS))
        .connect()
        .await
        .expect("connect")
}

/// One distlock acquire + release of `key`, as the bench's distlock column does it.
async fn distlock_cycle(client: &distlock::Client, key: &str) {
    let guard = client
        .lock(key)
        .ttl(TTL)
        .wait(TTL)
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
}

/// One connection for the limit: redis-rs's `MultiplexedConnection`, as in the bench.
async fn limit_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The bench's `limit`: `SET NX PX` with a random token, then a compare-and-delete script.
struct Limit {
    release: redis::Script,
}

impl Limit {
    fn new() -> Limit {
        Limit {
            release: redis::Script::new(
                "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
            ),
        }
    }

    /// One acquire + release of `key`, which nothing else holds.
    async fn cycle(&self, conn: &mut redis::aio::MultiplexedConnection, key: &str) {
        let token = format!("{:032x}", rand::random::<u128>());
        let taken: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(conn)
            .await
            .expect("SET");
        assert!(
            taken.is_some(),
            "every loop has a key of its own: never busy"
        );
        let _: i64 = self
            .release
            .key(key)
            .arg(&token)
            .invoke_async(conn)
            .await
            .expect("release");
    }
}

/// `tasks` = 0: S1's shape, one loop of sequential cycles on the main thread (the bench runs
/// S1 in `block_on`), printing p50/p99 per cycle and the CPU time per cycle.
async fn s1(which: &str, url: &str, budget: Budget, connections: Option<usize>) {
    let mut samples = Vec::new();
    let cpu_before = own_cpu_time();
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    match which {
        "distlock" => {
            let client = distlock_client(url, connections).await;
            while budget.more(samples.len() as u64) {
                let t = Instant::now();
                distlock_cycle(&client, "s1").await;
                samples.push(t.elapsed());
            }
        }
        _ => {
            let mut conn = limit_connection(url).await;
            let limit = Limit::new();
            while budget.more(samples.len() as u64) {
                let t = Instant::now();
                limit.cycle(&mut conn, "s1").await;
                samples.push(t.elapsed());
            }
        }
    }
    let n = samples.len();
    if n == 0 {
        println!("{which} S1: 0 cycles");
        return;
    }
    let cpu = (own_cpu_time() - cpu_before).as_secs_f64() * 1e6 / n as f64;
    let allocations = (ALLOCATIONS.load(Ordering::Relaxed) - allocations_before) as f64 / n as f64;
    samples.sort_unstable();
    let us = |q: f64| samples[((n - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "{which} S1: {n} cycles, p50 {:.1} µs, p99 {:.1} µs, process CPU {cpu:.2} µs/cycle, {allocations:.1} allocations/cycle",
        us(0.5),
        us(0.99)
    );
}

/// The server's time per call of each command this run used (`INFO commandstats`).
fn print_commandstats(url: &str) {
    let stats: String = redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .and_then(|mut conn| redis::cmd("INFO").arg("commandstats").query(&mut conn))
        .unwrap_or_default();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let busy = line
            .split_once("calls=")
            .and_then(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
            .is_some_and(|calls| calls > 100);
        if busy {
            println!("  {line}");
        }
    }
}
