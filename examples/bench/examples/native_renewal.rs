//! What one watchdog renewal costs, renewed natively (`SET key token IFEQ token PX ttl`,
//! Valkey 8.1+, Redis 8.4+) or by the extend script: takes `--locks` setnx locks on the server
//! at `--url` with one fresh client (ttl `--ttl-ms`, the watchdog at its default period of a
//! third of it), holds them for `--window-s` seconds while the process does nothing else, and
//! prints one line of what the window cost, read from the server (`INFO stats cpu
//! commandstats`) and from this process (`getrusage`). Which renewal the client uses is the
//! server's doing: one started with `--rename-command COMMAND ""` hides `SET .. IFEQ` from
//! the client's probe (as `bench --no-native` does), and it renews by script.
//!
//! ```sh
//! cargo build --release -p distlock-bench --example native_renewal
//! target/release/examples/native_renewal --url redis://127.0.0.1:6379/ [OPTIONS]
//! ```
//!
//! Options: `--locks N` (default 1,000), `--ttl-ms MS` (3,000), `--window-s S` (10),
//! `--renew-every-ms MS` (the watchdog's period instead of a third of the ttl; under
//! valgrind, a long ttl renewed often keeps the leases however slow the server gets),
//! `--watchdog off`: the locks taken with the watchdog off and a ttl beyond the window, so that
//! nothing is renewed (the baseline that `native_renewal.sh` subtracts: the server's and the
//! runtime's idle work over the same window).
//!
//! The line: `renew_set`, `renew_evalsha` (calls in the window; nothing else runs then),
//! `inner_calls` (the commands the scripts called), `round_trips` (the watchdog's pipelines),
//! `in_bytes`/`out_bytes` (the server's network counters, without the readings' own INFO),
//! `usec_set`/`usec_evalsha` (the server's time in those calls, `INFO commandstats`),
//! `server_cpu_us`, `client_cpu_us`, `held` (guards still held at the end) and `elapsed_s`.
//! `native_renewal.sh` runs it under callgrind for instructions per renewal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

struct Options {
    url: String,
    locks: usize,
    ttl: Duration,
    window: Duration,
    watchdog: bool,
    renew_every: Option<Duration>,
}

fn options() -> Options {
    let mut options = Options {
        url: String::new(),
        locks: 1_000,
        ttl: Duration::from_millis(3_000),
        window: Duration::from_secs(10),
        watchdog: true,
        renew_every: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = || value.parse::<u64>().unwrap_or_else(|_| usage(&flag));
        match flag.as_str() {
            "--url" => options.url = value.clone(),
            "--locks" => options.locks = number() as usize,
            "--ttl-ms" => options.ttl = Duration::from_millis(number()),
            "--window-s" => options.window = Duration::from_secs(number()),
            "--watchdog" => options.watchdog = value != "off",
            "--renew-every-ms" => options.renew_every = Some(Duration::from_millis(number())),
            _ => usage(&flag),
        }
    }
    if options.url.is_empty() {
        usage("--url");
    }
    options
}

fn usage(flag: &str) -> ! {
    eprintln!("bad or missing {flag}; see the file's doc");
    std::process::exit(2)
}

/// The server's counters: `INFO stats cpu commandstats` as field -> value (each command's
/// `calls` and `usec` as `<command>.calls`, `<command>.usec`), and the reply's length.
fn server_counters(conn: &mut redis::Connection) -> (BTreeMap<String, f64>, usize) {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .arg("cpu")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let mut fields = BTreeMap::new();
    for line in info.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let Some(command) = name.strip_prefix("cmdstat_") {
            for pair in value.split(',') {
                if let Some((k, v)) = pair.split_once('=') {
                    if let Ok(v) = v.parse() {
                        fields.insert(format!("{command}.{k}"), v);
                    }
                }
            }
        } else if let Ok(v) = value.trim().parse() {
            fields.insert(name.to_owned(), v);
        }
    }
    (fields, info.len())
}

/// This process's user + system CPU time.
fn own_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = options();
    let client = distlock::Client::connect(&options.url)
        .await
        .expect("connect");
    // Without the watchdog the locks must outlive the window on their own.
    let ttl = match options.watchdog {
        true => options.ttl,
        false => options.window * 3 + Duration::from_secs(60),
    };
    let tasks: Vec<_> = (0..50)
        .map(|t| {
            let client = client.clone();
            let names: Vec<usize> = (0..options.locks).filter(|i| i % 50 == t).collect();
            let (watchdog, renew_every) = (options.watchdog, options.renew_every);
            tokio::spawn(async move {
                let mut guards = Vec::with_capacity(names.len());
                for i in names {
                    let mut lock = client.lock(format!("renewal:{i}")).ttl(ttl);
                    if let Some(period) = renew_every {
                        lock = lock.renew_every(period);
                    }
                    guards.push(lock.watchdog(watchdog).acquire().await.expect("acquire"));
                }
                guards
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(options.locks);
    for task in tasks {
        guards.extend(task.await.expect("task"));
    }

    let mut conn = redis::Client::open(options.url.as_str())
        .expect("url")
        .get_connection()
        .expect("connect");
    let (before, info_len) = server_counters(&mut conn);
    let (trips, cpu) = (client.renewal_round_trips(), own_cpu());
    let started = Instant::now();
    // The window: the watchdog renews on its own clock; nothing else runs.
    tokio::time::sleep(options.window).await;
    let elapsed = started.elapsed();
    let (cpu, trips) = (own_cpu() - cpu, client.renewal_round_trips() - trips);
    let (after, _) = server_counters(&mut conn);
    let held = guards.iter().filter(|g| g.is_held()).count();

    let delta = |field: &str| {
        after.get(field).copied().unwrap_or(0.0) - before.get(field).copied().unwrap_or(0.0)
    };
    // The readings' own INFO: the second's request, and the first's reply.
    let info_request =
        b"*4\r\n$4\r\nINFO\r\n$5\r\nstats\r\n$3\r\ncpu\r\n$12\r\ncommandstats\r\n".len();
    let info_reply = format!("${info_len}\r\n\r\n").len() + info_len;
    let inner: f64 = ["get", "pttl", "pexpire"]
        .iter()
        .map(|c| delta(&format!("{c}.calls")))
        .sum();
    let server_cpu = delta("used_cpu_user") + delta("used_cpu_sys");
    println!(
        "renew_set {} renew_evalsha {} inner_calls {} round_trips {} in_bytes {} out_bytes {} \
         usec_set {} usec_evalsha {} server_cpu_us {:.0} client_cpu_us {} held {}/{} elapsed_s {:.2}",
        delta("set.calls"),
        delta("evalsha.calls"),
        inner,
        trips,
        delta("total_net_input_bytes") - info_request as f64,
        delta("total_net_output_bytes") - info_reply as f64,
        delta("set.usec"),
        delta("evalsha.usec"),
        server_cpu * 1e6,
        cpu.as_micros(),
        held,
        guards.len(),
        elapsed.as_secs_f64(),
    );
    for guard in guards {
        let _ = guard.release().await;
    }
}
