//! Where an uncontended cycle's time goes, for the README's "The acquisition connection":
//! one task on the main thread (as the bench's S1), turns of 50 taken in rotation, p50 and
//! p90 of each:
//!
//! - `PING` through redis-rs's `MultiplexedConnection` (a driver task writes and reads) and
//!   on a bare `TcpStream` the task writes and reads itself;
//! - distlock's acquire and release, timed apart;
//! - the limit's `SET NX PX` and compare-and-delete script, on a `MultiplexedConnection`.
//!
//! ```sh
//! cargo run --release -p distlock-bench --example round_trips -- [seconds, default 8]
//! ```

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TTL: Duration = Duration::from_secs(10);
const TURN: usize = 50;

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let server = distlock_testkit::RedisServer::start();
    let client = distlock::Client::connect(&server.url())
        .await
        .expect("connect");
    let mut multiplexed = redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut bare = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    bare.set_nodelay(true).expect("nodelay");
    let release = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    let names = [
        "PING, MultiplexedConnection",
        "PING, bare socket",
        "distlock acquire",
        "distlock release",
        "limit SET NX PX",
        "limit release",
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut pong = [0u8; 16];
    let stop = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < stop {
        for _ in 0..TURN {
            let t = Instant::now();
            let _: String = redis::cmd("PING")
                .query_async(&mut multiplexed)
                .await
                .expect("PING");
            samples[0].push(t.elapsed());
        }
        for _ in 0..TURN {
            let t = Instant::now();
            bare.write_all(b"*1\r\n$4\r\nPING\r\n")
                .await
                .expect("write");
            let n = bare.read(&mut pong).await.expect("read");
            assert_eq!(&pong[..n], b"+PONG\r\n");
            samples[1].push(t.elapsed());
        }
        for _ in 0..TURN {
            let t = Instant::now();
            let guard = client
                .lock("distlock")
                .ttl(TTL)
                .wait(TTL)
                .acquire()
                .await
                .expect("acquire");
            let taken = Instant::now();
            guard.release().await.expect("release");
            samples[2].push(taken - t);
            samples[3].push(taken.elapsed());
        }
        for _ in 0..TURN {
            let token = format!("{:032x}", rand::random::<u128>());
            let t = Instant::now();
            let taken: Option<String> = redis::cmd("SET")
                .arg("limit")
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query_async(&mut multiplexed)
                .await
                .expect("SET");
            assert!(taken.is_some(), "nothing else takes this key");
            let set = Instant::now();
            let _: i64 = release
                .key("limit")
                .arg(&token)
                .invoke_async(&mut multiplexed)
                .await
                .expect("release");
            samples[4].push(set - t);
            samples[5].push(set.elapsed());
        }
    }
    for (name, mut times) in names.into_iter().zip(samples) {
        times.sort_unstable();
        let us = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        println!("{name}: p50 {:.1} µs, p90 {:.1} µs", us(0.5), us(0.9));
    }
}
