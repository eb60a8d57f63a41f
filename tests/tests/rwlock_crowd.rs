//! The read/write lock under a crowd: 10,000 readers and 3,000 waiting writers on one name
//! must leave an unrelated lock on the same server its renewals. The scale tier, `#[ignore]`d:
//! `cargo test --test rwlock_crowd -- --ignored --test-threads 1 --nocapture`.
//!
//! A read/write script reads only its own owner's entries and counts the others with
//! logarithmic sorted-set commands (`rwlock/prelude.lua`), so a call's server time does not
//! grow with the crowd; the scripts that read the whole hash and rebuilt the state over every
//! reader and intent made this test fail (issue 29, item 2). Printed: how long the readers took
//! to get in, the longest PING meanwhile, and the server's own time per script call
//! (`INFO commandstats`). In `.ci/run`'s scale step.

use distlock_testkit::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};

use common::{as_other_owner, client};
use distlock::{Client, Guard};
use distlock_testkit::RedisServer;

const READERS: usize = 10_000;
const WRITERS: usize = 3_000;

/// The crowd's size: `READERS` and `WRITERS` unless the environment says otherwise (to see
/// where the lease starts to be lost: `CROWD=1000,300`).
fn crowd_size() -> (usize, usize) {
    std::env::var("CROWD")
        .ok()
        .and_then(|v| {
            let (r, w) = v.split_once(',')?;
            Some((r.parse().ok()?, w.parse().ok()?))
        })
        .unwrap_or((READERS, WRITERS))
}
/// Processes the writers wait in (each queues its own behind one attempt at a time).
const WRITER_CLIENTS: usize = 30;
/// Processes the readers hold in (each renews its own in batches).
const READER_CLIENTS: usize = 4;
/// The unrelated lock's lease: its watchdog renews it at a third of this, and a renewal
/// that waits behind the crowd for longer loses it.
const UNRELATED_TTL: Duration = Duration::from_secs(1);
/// The readers' leases, renewed by their watchdogs at a third while the writers wait.
const READ_TTL: Duration = Duration::from_secs(6);
/// How long the crowd stays once it is complete: two of the readers' renewal rounds.
const EXPOSURE: Duration = Duration::from_secs(4);
const TAKING_AT_ONCE: usize = 256;

/// Takes `n` read holds of `name` as as many owners, spread over `clients`.
async fn readers(clients: &[Client], name: &str, n: usize) -> Vec<Guard> {
    stream::iter(0..n)
        .map(|i| {
            let locks = clients[i % clients.len()].clone();
            let name = name.to_owned();
            async move {
                as_other_owner(
                    locks
                        .read(name)
                        .ttl(READ_TTL)
                        .wait(Duration::from_secs(600))
                        .acquire(),
                )
                .await
                .expect("readers share")
            }
        })
        .buffer_unordered(TAKING_AT_ONCE)
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale tier: cargo test --test rwlock_crowd -- --ignored --test-threads 1"]
async fn scale_a_crowd_on_one_read_write_lock_leaves_an_unrelated_lease_alone() {
    let server = RedisServer::start();
    let unrelated_client = client(&server).await;
    let unrelated = unrelated_client
        .lock("unrelated")
        .ttl(UNRELATED_TTL)
        .try_acquire()
        .await
        .expect("free");
    let (n_readers, n_writers) = crowd_size();
    let pings = Pings::start(&server);
    let lost = Arc::new(AtomicBool::new(false));
    let crowd = async {
        let started = Instant::now();
        let mut reader_clients = Vec::new();
        for _ in 0..READER_CLIENTS {
            reader_clients.push(client(&server).await);
        }
        let held = readers(&reader_clients, "crowded", n_readers).await;
        let readers_in = started.elapsed();
        let mut writer_clients = Vec::new();
        for _ in 0..WRITER_CLIENTS {
            writer_clients.push(client(&server).await);
        }
        let writers: Vec<_> = (0..n_writers)
            .map(|i| {
                let locks = writer_clients[i % WRITER_CLIENTS].clone();
                tokio::spawn(async move {
                    let g = locks
                        .write("crowded")
                        .wait(Duration::from_secs(600))
                        .acquire()
                        .await;
                    drop(g);
                })
            })
            .collect();
        tokio::time::sleep(EXPOSURE).await;
        println!(
            "{n_readers} readers in after {readers_in:?}; {n_writers} writers waited {EXPOSURE:?}; readers still held: {}",
            held.iter().filter(|g| g.is_held()).count()
        );
        for w in writers {
            w.abort();
        }
        drop(held);
    };
    tokio::select! {
        () = crowd => {}
        e = unrelated.lost() => {
            lost.store(true, Ordering::SeqCst);
            println!("{n_readers} readers, {n_writers} writers: the unrelated lease was lost: {e}");
        }
    }
    println!(
        "longest PING meanwhile (another thread, its own connection): {:?}",
        pings.stop()
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut server.async_connection().await)
        .await
        .expect("INFO");
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_eval")) {
        println!("server time per script call: {line}");
    }
    assert!(
        !lost.load(Ordering::SeqCst) && unrelated.is_held(),
        "the crowd on one read/write lock cost an unrelated lock its lease"
    );
    unrelated.release().await.expect("still ours");
}

/// PINGs the server every 10 ms from a thread of its own, on a connection of its own: how
/// long the server kept a request waiting, whatever the test's runtime is doing.
struct Pings {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Duration>,
}

impl Pings {
    fn start(server: &RedisServer) -> Pings {
        let stop = Arc::new(AtomicBool::new(false));
        let mut conn = redis::Client::open(server.url())
            .expect("url")
            .get_connection()
            .expect("connect");
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stopping.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
                longest = longest.max(sent.elapsed());
                std::thread::sleep(Duration::from_millis(10));
            }
            longest
        });
        Pings { stop, thread }
    }

    fn stop(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("pings")
    }
}
