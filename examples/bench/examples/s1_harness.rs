//! S1 measured the way an outside harness might measure it, to find which of the set-up's
//! choices moves distlock's ratio to the limit: one task loops uncontended acquire + release
//! on one name, for distlock, for the bench's `limit` (`SET NX PX` + a compare-and-delete
//! script on one redis-rs `MultiplexedConnection`) and for two `PING`s on that connection,
//! the columns taking turns in alternation; prints each column's p50 and its ratio to the
//! limit's.
//!
//! ```sh
//! cargo build --release -p distlock-bench --example s1_harness
//! target/release/examples/s1_harness [OPTIONS]
//! ```
//!
//! Options (each one factor; the defaults are the bench's S1):
//! - `--runtime main|spawn|current`: the loop in `block_on` on the main thread of a
//!   multi-thread runtime (`#[tokio::main]`, the bench), in a task spawned on it (a worker
//!   runs the loop, as in a server's handler), or on a current-thread runtime;
//! - `--workers N`: the multi-thread runtime's workers (default 2, the cores here);
//! - `--boxed yes|no`: every column's acquire and release futures boxed (as the bench does) or
//!   awaited as they are;
//! - `--turn N`: cycles per turn (default 50, the bench's); `--turn 0` runs each column's
//!   cycles in one block, one column after the other;
//! - `--cycles N`: cycles per column (default 20,000);
//! - `--url URL`: that server instead of one of its own;
//! - `--only distlock|limit`: that column alone (for `strace -c`, `perf stat`).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Options {
    runtime: String,
    workers: usize,
    boxed: bool,
    turn: usize,
    cycles: usize,
    url: Option<String>,
    /// Only this column (its index in `COLUMNS`), for profilers.
    only: Option<usize>,
}

fn options() -> Options {
    let mut options = Options {
        runtime: "main".into(),
        workers: 2,
        boxed: true,
        turn: 50,
        cycles: 20_000,
        url: None,
        only: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--runtime" => options.runtime = value,
            "--workers" => options.workers = value.parse().unwrap_or(2),
            "--boxed" => options.boxed = value != "no",
            "--turn" => options.turn = value.parse().unwrap_or(50),
            "--cycles" => options.cycles = value.parse().unwrap_or(20_000),
            "--url" => options.url = Some(value),
            "--only" => options.only = COLUMNS.iter().position(|c| *c == value),
            other => {
                eprintln!("unknown option {other:?}; see the file's doc");
                std::process::exit(2);
            }
        }
    }
    options
}

fn main() {
    let options = options();
    let server = options
        .url
        .is_none()
        .then(distlock_testkit::RedisServer::start);
    let url = options
        .url
        .clone()
        .unwrap_or_else(|| server.as_ref().expect("started").url());
    let runtime = match options.runtime.as_str() {
        "current" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.workers)
            .enable_all()
            .build(),
    }
    .expect("runtime");
    let run = run(options.clone(), url);
    let p50s = match options.runtime.as_str() {
        "spawn" => runtime
            .block_on(async { tokio::spawn(run).await })
            .expect("task"),
        _ => runtime.block_on(run),
    };
    let limit = p50s[1];
    println!(
        "runtime {} (workers {}), boxed {}, turn {}, {} cycles per column",
        options.runtime, options.workers, options.boxed, options.turn, options.cycles
    );
    for (name, p50) in COLUMNS.iter().zip(p50s) {
        println!("  {name:<10} p50 {p50:>7.1} µs  {:.3}× limit", p50 / limit);
    }
}

const COLUMNS: [&str; 3] = ["distlock", "limit", "2 PINGs"];

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Awaits `future`, boxed first if the run boxes futures.
async fn maybe_boxed<T>(boxed: bool, future: impl Future<Output = T> + Send) -> T {
    if boxed {
        let future: Boxed<'_, T> = Box::pin(future);
        future.await
    } else {
        future.await
    }
}

struct Columns {
    client: distlock::Client,
    conn: redis::aio::MultiplexedConnection,
    release: redis::Script,
    boxed: bool,
}

impl Columns {
    async fn cycle(&self, column: usize) {
        match column {
            0 => {
                let acquire = self.client.lock("s1").ttl(TTL).wait(TTL).acquire();
                let guard = maybe_boxed(self.boxed, acquire).await.expect("acquire");
                maybe_boxed(self.boxed, guard.release())
                    .await
                    .expect("release");
            }
            1 => {
                let mut conn = self.conn.clone();
                let token = format!("{:032x}", rand::random::<u128>());
                let mut set = redis::cmd("SET");
                set.arg("s1:limit")
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64);
                let set = set.query_async::<Option<String>>(&mut conn);
                let taken = maybe_boxed(self.boxed, set).await.expect("SET");
                assert!(taken.is_some(), "nothing else takes s1:limit");
                let mut invocation = self.release.key("s1:limit");
                invocation.arg(&token);
                let release = invocation.invoke_async::<i64>(&mut conn);
                let deleted = maybe_boxed(self.boxed, release).await.expect("release");
                assert_eq!(deleted, 1);
            }
            _ => {
                let mut conn = self.conn.clone();
                for _ in 0..2 {
                    let ping = redis::cmd("PING");
                    let ping = ping.query_async::<String>(&mut conn);
                    maybe_boxed(self.boxed, ping).await.expect("PING");
                }
            }
        }
    }
}

/// Every column's p50 in µs, in `COLUMNS`' order.
async fn run(options: Options, url: String) -> Vec<f64> {
    let columns = Columns {
        client: distlock::Client::connect(&url).await.expect("connect"),
        conn: redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
        release: redis::Script::new(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
        ),
        boxed: options.boxed,
    };
    for column in 0..COLUMNS.len() {
        if options.only.is_some_and(|only| only != column) {
            continue;
        }
        for _ in 0..500 {
            columns.cycle(column).await;
        }
    }
    let mut samples = vec![Vec::with_capacity(options.cycles); COLUMNS.len()];
    let turn = match options.turn {
        0 => options.cycles,
        n => n,
    };
    let mut order: Vec<usize> = (0..COLUMNS.len()).collect();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0x5eed);
    let mut done = 0;
    while done < options.cycles {
        let n = turn.min(options.cycles - done);
        rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rng);
        for &column in &order {
            if options.only.is_some_and(|only| only != column) {
                continue;
            }
            for _ in 0..n {
                let started = Instant::now();
                columns.cycle(column).await;
                samples[column].push(started.elapsed());
            }
        }
        done += n;
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_unstable();
            s.get(s.len() / 2)
                .map_or(f64::NAN, |p50| p50.as_secs_f64() * 1e6)
        })
        .collect()
}
