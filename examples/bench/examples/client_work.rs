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
//! acquire and release futures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "distlock".into());
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let tasks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let connections: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let server = distlock_testkit::RedisServer::start();
    let url = server.url();
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(secs);
    let ttl = Duration::from_secs(10);
    let mut handles = Vec::new();
    match which.as_str() {
        "distlock" => {
            let client = distlock::Client::builder(&url)
                .connections(connections.unwrap_or(distlock::DEFAULT_CONNECTIONS))
                .connect()
                .await
                .expect("connect");
            let acquire = client.lock("sizes").ttl(ttl).acquire();
            println!("acquire future: {} bytes", std::mem::size_of_val(&acquire));
            let guard = acquire.await.expect("acquire");
            let release = guard.release();
            println!("release future: {} bytes", std::mem::size_of_val(&release));
            release.await.expect("release");
            for i in 0..tasks {
                let (client, cycles) = (client.clone(), cycles.clone());
                handles.push(tokio::spawn(async move {
                    let key = format!("k{i}");
                    while Instant::now() < stop {
                        let guard = client
                            .lock(&key)
                            .ttl(ttl)
                            .wait(ttl)
                            .acquire()
                            .await
                            .expect("acquire");
                        guard.release().await.expect("release");
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        "limit" => {
            let mut conns = Vec::new();
            for _ in 0..connections.unwrap_or(1).max(1) {
                let conn = redis::Client::open(url.as_str())
                    .expect("url")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                conns.push(conn);
            }
            let release = Arc::new(redis::Script::new(
                "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
            ));
            for i in 0..tasks {
                let mut conn = conns[i % conns.len()].clone();
                let (cycles, release) = (cycles.clone(), release.clone());
                handles.push(tokio::spawn(async move {
                    let key = format!("k{i}");
                    while Instant::now() < stop {
                        let token = format!("{:032x}", rand::random::<u128>());
                        let taken: Option<String> = redis::cmd("SET")
                            .arg(&key)
                            .arg(&token)
                            .arg("NX")
                            .arg("PX")
                            .arg(10_000)
                            .query_async(&mut conn)
                            .await
                            .expect("SET");
                        assert!(taken.is_some(), "distinct keys are never busy");
                        let _: i64 = release
                            .key(&key)
                            .arg(&token)
                            .invoke_async(&mut conn)
                            .await
                            .expect("release");
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        other => {
            eprintln!(
                "usage: client_work distlock|limit [seconds] [tasks] [connections] (not {other:?})"
            );
            std::process::exit(2);
        }
    }
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    for handle in handles {
        handle.await.expect("task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = cycles.load(Ordering::Relaxed) as f64;
    println!(
        "{which}: {:.0} cycles/s, process CPU {:.2} µs/cycle",
        n / elapsed,
        (cpu_seconds() - cpu_before) * 1e6 / n
    );
}

/// User + system CPU time of this process.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
