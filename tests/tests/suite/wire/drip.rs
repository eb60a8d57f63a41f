//! Answers that arrive in pieces: a reader that drained the socket and then waits is woken by
//! the bytes that came in between (no wake-up lost between the read and the wait).
//!
//! The connection reads what has arrived, and when a read leaves room in its buffer it takes
//! the socket as drained and waits for it to become readable again (`conn/read.rs`). Bytes
//! that land just after that read must still wake it; lost, the caller would wait for an
//! answer already in the socket until its timeout, and the connection would be given up and
//! opened again. A relay in front of a real server hands out every answer in pieces of a few
//! bytes, each written on its own, so that many reads land between two pieces.

use super::*;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;

/// A relay on threads of its own in front of a server: requests pass as they come, answers
/// go out in pieces of 1 to 7 bytes, one write each (no Nagle delay: each its own segment).
struct Drip {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drip {
    fn start(upstream: u16) -> Drip {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let seed = count.fetch_add(1, Ordering::SeqCst) as u64;
                relay(client, server, seed);
            }
        });
        Drip {
            port,
            accepted,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Drip {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Forwards one connection both ways until either side closes, on two threads.
fn relay(client: TcpStream, server: TcpStream, seed: u64) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf) {
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Both);
        let _ = from_client.shutdown(Shutdown::Both);
    });
    let (mut from_server, mut to_client) = (server, client);
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        // xorshift64: the pieces' sizes, different on every connection.
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        'relay: while let Ok(n @ 1..) = from_server.read(&mut buf) {
            let mut at = 0;
            while at < n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let piece = (1 + state % 7) as usize;
                let end = (at + piece).min(n);
                if to_client.write_all(&buf[at..end]).is_err() {
                    break 'relay;
                }
                at = end;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
        let _ = from_server.shutdown(Shutdown::Both);
    });
}

/// One caller on its own, then 8 at once on one connection: every answer comes in pieces.
/// A wake-up lost after a read that drained the socket leaves the caller waiting for an
/// answer already there: its call takes the response timeout (2 s) and the connection is
/// given up and opened again. Every call must succeed in well under that, on the connection
/// it started on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_in_pieces_wake_the_reader_every_time() {
    let server = RedisServer::start();
    let drip = Drip::start(server.port());
    let client = Client::builder(&drip.url())
        .connections(1)
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect");
    let opened = drip.accepted();
    let lone = cycles(client.clone(), "lone".into(), 400).await;
    let mut set = tokio::task::JoinSet::new();
    for t in 0..8 {
        set.spawn(cycles(client.clone(), format!("task{t}"), 150));
    }
    let mut slowest = lone;
    while let Some(task) = set.join_next().await {
        slowest = slowest.max(task.expect("task"));
    }
    assert_eq!(
        drip.accepted(),
        opened,
        "a connection was opened again: a call went unanswered until its timeout"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a call took {slowest:?}: woken by the timeout's clock, not by its answer"
    );
}

/// `n` acquisitions and releases of names of `prefix`; the longest call.
async fn cycles(client: Client, prefix: String, n: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in 0..n {
        let started = Instant::now();
        let guard = within(
            "try_acquire",
            client.lock(format!("{prefix}:{i}")).try_acquire(),
        )
        .await
        .expect("a free lock is taken");
        slowest = slowest.max(started.elapsed());
        let started = Instant::now();
        within("release", guard.release()).await.expect("released");
        slowest = slowest.max(started.elapsed());
    }
    slowest
}
