//! The wire: whatever answers on the server's port.
//!
//! RESP3 pushes and attributes among the replies (injected by the proxy, and real ones aimed at
//! the client's connections by another client's `CLIENT TRACKING .. REDIRECT`), a hostile
//! server (a listener of the test's own that answers garbage), a socket closed with calls in
//! flight, a caller parked mid-request, answers that arrive in pieces; and the client's reply
//! decoder against redis-rs's parser. A network gone silent and dropped subscription confirmations: silence.rs.

use crate::common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Client, Error};
use distlock_testkit::{own_cpu_time, FaultProxy, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A push another client's `CLIENT TRACKING` could aim at any connection.
const INVALIDATE: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$12\r\ndistlock:{x}\r\n";
/// An attribute, which describes the reply it precedes: not an answer of its own.
const ATTRIBUTE: &[u8] = b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n";

mod decoder;
mod drip;
mod hostile;
mod own_answer;
mod pushes;
mod sockets;

/// Fails the test, naming `what`, if `f` does not finish within 20 s: a call that hangs.
async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

/// `rounds` rounds on `tasks` tasks at once: the lock `held` (another client's) answers busy,
/// a free lock is taken and released. Returns every call that answered otherwise.
async fn wrong_answers(
    client: &Client,
    held: &'static str,
    tasks: usize,
    rounds: usize,
) -> Vec<String> {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let client = client.clone();
        set.spawn(async move {
            let mut wrong = Vec::new();
            for round in 0..rounds {
                let busy = within(
                    "try_acquire of the held lock",
                    client.lock(held).try_acquire(),
                )
                .await;
                if !matches!(busy, Err(Error::Busy { .. })) {
                    wrong.push(format!(
                        "task {t} round {round}: the held lock answered {busy:?}"
                    ));
                }
                let name = format!("free:{t}:{round}");
                match within(
                    "try_acquire of a free lock",
                    client.lock(&name).try_acquire(),
                )
                .await
                {
                    Ok(guard) => {
                        if let Err(e) = within("release", guard.release()).await {
                            wrong.push(format!("task {t} round {round}: release answered {e:?}"));
                        }
                    }
                    Err(e) => wrong.push(format!(
                        "task {t} round {round}: a free lock answered {e:?}"
                    )),
                }
            }
            wrong
        });
    }
    let mut wrong = Vec::new();
    while let Some(task) = set.join_next().await {
        wrong.extend(task.expect("task"));
    }
    wrong
}

/// The lock `name`, taken by a client of its own straight on the server for 60 s.
async fn held_elsewhere(server: &RedisServer, name: &str) -> distlock::Guard {
    common::client(server)
        .await
        .lock(name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("the other client takes it")
}

/// What a [`Hostile`] server does with one command.
enum Reply {
    Bytes(Vec<u8>),
    /// Closes the connection (without answering).
    Close,
}

/// A server of the test's own on a free loopback port: it reads commands (RESP arrays) and
/// answers each as `answer(connection, command)` says, the connection counted from 0 in the
/// order they were accepted.
struct Hostile {
    port: u16,
    accepted: Arc<AtomicUsize>,
    /// The accepting task, and each connection's: dropping the server closes them all.
    tasks: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.tasks.lock().expect("tasks").abort_all();
    }
}

type Answer = dyn Fn(usize, &[Vec<u8>]) -> Reply + Send + Sync;

impl Hostile {
    async fn start(answer: impl Fn(usize, &[Vec<u8>]) -> Reply + Send + Sync + 'static) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let counter = accepted.clone();
        let tasks = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let spawner = Arc::downgrade(&tasks);
        tasks.lock().expect("tasks").spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let Some(tasks) = spawner.upgrade() else {
                    return;
                };
                tasks
                    .lock()
                    .expect("tasks")
                    .spawn(serve(socket, n, answer.clone()));
            }
        });
        Hostile {
            port,
            accepted,
            tasks,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

async fn serve(mut socket: tokio::net::TcpStream, n: usize, answer: Arc<Answer>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        while let Some((command, len)) = parse_command(&buf) {
            buf.drain(..len);
            match answer(n, &command) {
                Reply::Bytes(bytes) => {
                    if socket.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Reply::Close => return,
            }
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buf.extend_from_slice(&chunk[..read]),
        }
    }
}

/// One command (`*N` of `$len` arguments) at the start of `buf`, and its length.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let line = |from: usize| -> Option<(usize, usize)> {
        let end = buf.get(from..)?.windows(2).position(|w| w == b"\r\n")? + from;
        let n = std::str::from_utf8(&buf[from + 1..end])
            .ok()?
            .parse()
            .ok()?;
        Some((n, end + 2))
    };
    let (count, mut at) = line(0)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(at)?;
        args.push(buf.get(start..start + len)?.to_vec());
        at = start + len + 2;
    }
    (buf.len() >= at).then_some((args, at))
}

/// The answers of a plausible Redis 7 to what the client sends at connect and for a
/// `try_acquire` and its release.
fn plausible(command: &[Vec<u8>]) -> Vec<u8> {
    let name = command
        .first()
        .map(|c| String::from_utf8_lossy(c).to_ascii_uppercase())
        .unwrap_or_default();
    match name.as_str() {
        "HELLO" => b"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.4\r\n$5\r\nproto\r\n:3\r\n".to_vec(),
        // `SET .. NX PX .. GET`: nil, taken.
        "SET" => b"_\r\n".to_vec(),
        "CONFIG" => b"*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n".to_vec(),
        "INFO" => b"$39\r\n# Server\r\nredis_version:7.2.4\r\nrun_id:a\r\n".to_vec(),
        "EVALSHA" | "EVAL" | "FCALL" => b":1\r\n".to_vec(),
        "SCRIPT" => b"$40\r\n0000000000000000000000000000000000000000\r\n".to_vec(),
        _ => b"+OK\r\n".to_vec(),
    }
}

/// A reply nested 200,000 deep: an array of one array of one array ...
fn deep() -> Vec<u8> {
    let mut reply = b"*1\r\n".repeat(200_000);
    reply.extend_from_slice(b":1\r\n");
    reply
}

fn is_hello(command: &[Vec<u8>]) -> bool {
    command
        .first()
        .is_some_and(|c| c.eq_ignore_ascii_case(b"HELLO"))
}
