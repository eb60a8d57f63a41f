//! The wire: whatever answers on the server's port.
//!
//! RESP3 pushes and attributes among the replies (injected by the proxy, and real ones aimed at
//! the client's connections by another client's `CLIENT TRACKING .. REDIRECT`), a hostile
//! server (a listener of the test's own that answers garbage), a socket closed with calls in
//! flight, a caller parked mid-request; and the client's reply decoder against redis-rs's
//! parser. A network gone silent and dropped subscription confirmations: silence.rs.

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

/// Every reply preceded by a push (and then by an attribute), on every connection of the
/// client: no call gets a push, an attribute or another call's answer as its own; none hangs.
/// (The acquisition connection handed each push to the oldest waiting caller: answers shifted
/// by one, `try_acquire` of a held lock returned a guard.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_and_attributes_before_replies_never_become_answers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let _held = held_elsewhere(&server, "held").await;
    for connections in [1, 2, 3] {
        let client = Client::builder(&proxy.url())
            .connections(connections)
            .connect()
            .await
            .expect("connect");
        for frame in [INVALIDATE, ATTRIBUTE] {
            proxy.push_before_replies(Some(frame));
            let injected = proxy.pushes_injected();
            let wrong = wrong_answers(&client, "held", 4, 25).await;
            proxy.push_before_replies(None);
            assert!(
                wrong.is_empty(),
                "connections({connections}), {:?} before every reply: {wrong:#?}",
                String::from_utf8_lossy(frame)
            );
            assert!(proxy.pushes_injected() > injected, "nothing was injected");
        }
    }
}

/// Real pushes: another client tracks every `distlock` key (`CLIENT TRACKING on BCAST`) with
/// its invalidations redirected to each of our client's connections (whose ids `CLIENT LIST`
/// gives anyone), so every lock taken or released sends a push to each, where Redis places
/// it. Answers stay with their calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidations_redirected_by_another_client_never_become_answers() {
    let server = RedisServer::start();
    let _held = held_elsewhere(&server, "held").await;
    let before = client_ids(&server);
    let client = Client::builder(&server.url())
        .connections(3)
        .connect()
        .await
        .expect("connect");
    // Every connection open: each lane took a lock once.
    for i in 0..8 {
        let guard = client
            .lock(format!("warm:{i}"))
            .try_acquire()
            .await
            .expect("free");
        guard.release().await.expect("release");
    }
    let ours: Vec<u64> = client_ids(&server)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(ours.len() >= 3, "the client's connections: {ours:?}");
    // One tracking connection per target: a connection redirects to one client.
    let _trackers: Vec<redis::Connection> = ours
        .iter()
        .map(|id| {
            let mut tracker = server.connection();
            redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("on")
                .arg("REDIRECT")
                .arg(id)
                .arg("BCAST")
                .arg("PREFIX")
                .arg("distlock")
                .exec(&mut tracker)
                .expect("CLIENT TRACKING");
            tracker
        })
        .collect();
    let wrong = wrong_answers(&client, "held", 8, 40).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The ids of the client connections `server` has now.
fn client_ids(server: &RedisServer) -> Vec<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .expect("CLIENT LIST");
    list.lines()
        // Not the connection that asks.
        .filter(|l| !l.contains("cmd=client|list"))
        .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
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

/// Answers that are no reply a client can use, to `HELLO`: each makes `connect` fail with an
/// error, within its timeouts, never abort the process or hang. (A reply nested 200,000 deep
/// overflowed the acquisition connection's recursive parser: "stack overflow", SIGABRT.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_fails_connect_with_an_error() {
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("a reply nested 200,000 deep", deep()),
        ("a map nested 200,000 deep", {
            let mut reply = b"%1\r\n+k\r\n".repeat(200_000);
            reply.extend_from_slice(b"_\r\n");
            reply
        }),
        ("an unknown type", b"?what\r\n".to_vec()),
        ("a length that is no number", b"*abc\r\n".to_vec()),
        (
            "a bulk string longer than any reply",
            b"$99999999999999\r\nabc".to_vec(),
        ),
        (
            "an aggregate with more elements than memory",
            b"*9223372036854775807\r\n:1\r\n".to_vec(),
        ),
        ("a negative map", b"%-1\r\n".to_vec()),
        (
            "a bulk string without its CRLF",
            b"$3\r\nabcdef\r\n".to_vec(),
        ),
        ("an integer that is no number", b":12x\r\n".to_vec()),
        ("two replies to one command", b"+OK\r\n+OK\r\n".to_vec()),
        ("a push and nothing else", INVALIDATE.to_vec()),
        ("a server error", b"-ERR no\r\n".to_vec()),
    ];
    for (what, reply) in garbage {
        let server = Hostile::start(move |_, command| {
            if is_hello(command) {
                Reply::Bytes(reply.clone())
            } else {
                Reply::Bytes(plausible(command))
            }
        })
        .await;
        let started = Instant::now();
        let connected = within(
            what,
            Client::builder(&server.url())
                .connect_timeout(Duration::from_secs(1))
                .response_timeout(Duration::from_millis(500))
                .connect(),
        )
        .await;
        assert!(connected.is_err(), "{what}: connected");
        println!(
            "{what}: {:?} after {:?}",
            connected.err(),
            started.elapsed()
        );
    }
    // The same server, answering plausibly: the client connects (the test itself is sound).
    let server = Hostile::start(|_, command| Reply::Bytes(plausible(command))).await;
    let client = Client::connect(&server.url()).await.expect("connect");
    drop(client.lock("k").try_acquire().await.expect("taken"));
}

/// The server answers plausibly until the first lock request, then closes that connection and
/// answers the `HELLO` of every connection opened after with a reply nested 200,000 deep:
/// the lock call fails with an error, and the process lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_reply_when_a_connection_reopens_while_locking_is_an_error() {
    let closed = Arc::new(AtomicUsize::new(0));
    let seen = closed.clone();
    let server = Hostile::start(move |_, command| {
        let set = command
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
        if set && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::Close;
        }
        if is_hello(command) && seen.load(Ordering::SeqCst) > 0 {
            return Reply::Bytes(deep());
        }
        Reply::Bytes(plausible(command))
    })
    .await;
    for connections in [1, 2] {
        closed.store(0, Ordering::SeqCst);
        let client = Client::builder(&server.url())
            .connections(connections)
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("connect");
        let opened = server.accepted.load(Ordering::SeqCst);
        // The first call meets the closed connection; a later one (or the connection's own
        // reconnection) opens it again and meets the reply.
        let mut calls = Vec::new();
        while calls.len() < 10 && server.accepted.load(Ordering::SeqCst) == opened {
            calls.push(within("try_acquire", client.lock("k").try_acquire()).await);
        }
        assert!(
            server.accepted.load(Ordering::SeqCst) > opened,
            "connections({connections}): the connection was not opened again"
        );
        for _ in 0..3 {
            calls.push(within("try_acquire", client.lock("k").try_acquire()).await);
        }
        let locked: Vec<_> = calls.iter().filter(|c| c.is_ok()).collect();
        assert!(locked.is_empty(), "connections({connections}): {locked:?}");
        println!("connections({connections}): {:?}", calls.last());
    }
}

/// A server that answers every lock request with a push and never with an answer: bytes keep
/// coming, so the connection is not silent, but its oldest request stays unanswered; after two
/// response timeouts the connection is given up and opened again, rather than piling up
/// requests for ever, and every call ends within its timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_pushes_but_never_answers_is_opened_again() {
    // The connections that were sent a lock request: from then on, pushes only.
    let pushing = std::sync::Mutex::new(std::collections::HashSet::new());
    let server = Hostile::start(move |connection, command| {
        let set = command
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
        let mut pushing = pushing.lock().expect("pushing");
        if set || pushing.contains(&connection) {
            pushing.insert(connection);
            return Reply::Bytes(INVALIDATE.to_vec());
        }
        Reply::Bytes(plausible(command))
    })
    .await;
    let timeout = Duration::from_millis(200);
    let client = Client::builder(&server.url())
        .response_timeout(timeout)
        .connect()
        .await
        .expect("connect");
    let opened = server.accepted.load(Ordering::SeqCst);
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(2) {
        let asked = Instant::now();
        let taken = within("try_acquire", client.lock("k").try_acquire()).await;
        longest = longest.max(asked.elapsed());
        assert!(taken.is_err(), "{taken:?}");
    }
    let reopened = server.accepted.load(Ordering::SeqCst) - opened;
    println!("{reopened} connections opened again in 2 s; the longest call {longest:?}");
    assert!(reopened > 0, "the connection was never given up");
}

/// User + system CPU time so far of this process's threads named `name` (to the clock tick):
/// the runtime of one test, whatever other tests of the binary run meanwhile.
fn threads_cpu_time(name: &str) -> Duration {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // utime and stime: the 12th and 13th fields after the parenthesised name.
        if let Some((_, rest)) = stat.rsplit_once(')') {
            let fields: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse().ok())
                .collect();
            ticks += fields.iter().sum::<u64>();
        }
    }
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// A read brings more frames than calls wait for (a second reply to one command), and the
/// server then closes the connection: the calls fail at once with an error, and nothing
/// spins (the CPU time of the client's runtime threads is measured; the process's own,
/// `own_cpu_time`, is printed too). (The answers matched before the extra frame were
/// stranded, their callers waited for ever, and once the socket closed they read
/// end-of-stream in a loop: 100 % of a core.)
#[test]
fn a_closed_socket_with_calls_in_flight_costs_no_cpu() {
    const THREADS: &str = "closed-socket";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = Hostile::start(move |_, command| {
            let set = command
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
            if set {
                // The answer, and one no command asked for.
                return Reply::Bytes(b"_\r\n+OK\r\n".to_vec());
            }
            Reply::Bytes(plausible(command))
        })
        .await;
        let client = Client::builder(&server.url())
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("connect");
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let call = client.lock(format!("k{i}")).try_acquire();
                    tokio::time::timeout(Duration::from_secs(5), call).await
                })
            })
            .collect();
        // The server closes every connection a moment later.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(server);
        let (cpu_before, own_before) = (threads_cpu_time(THREADS), own_cpu_time());
        let wall_before = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu = threads_cpu_time(THREADS) - cpu_before;
        let own = own_cpu_time() - own_before;
        let wall = wall_before.elapsed();
        let mut hung = 0;
        for call in calls {
            if call.await.expect("task").is_err() {
                hung += 1;
            }
        }
        println!(
            "{cpu:?} of CPU on the client's threads ({own:?} in the process) in {wall:?}; \
             {hung} of 4 calls hung"
        );
        assert!(
            cpu < wall / 4,
            "the client's threads used {cpu:?} of CPU in {wall:?} with nothing to do"
        );
        assert_eq!(
            hung, 0,
            "calls still waiting 5 s after the connection closed"
        );
    });
}

/// A release future polled once (so its request went out) and then kept without being polled
/// again, as a `select!` branch or a future parked in a struct can be: the other tasks of the
/// client lock and release as usual, on every connection count. (The parked caller held the
/// connection's reading role: every other call on it timed out until it was polled or dropped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_caller_does_not_stall_the_others() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    for connections in [1, 2, 3] {
        let client = Client::builder(&proxy.url())
            .connections(connections)
            .connect()
            .await
            .expect("connect");
        let guard = client
            .lock(format!("parked:{connections}"))
            .try_acquire()
            .await
            .expect("free");
        // The release's answer comes late, so that its one poll leaves it waiting.
        proxy.reply_latency(Duration::from_millis(100));
        let mut release = Box::pin(guard.release());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let first = release.as_mut().poll(&mut cx);
        proxy.reply_latency(Duration::ZERO);
        assert!(
            first.is_pending(),
            "connections({connections}): released at the first poll: {first:?}"
        );
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..6 {
            let client = client.clone();
            tasks.spawn(async move {
                for i in 0..20 {
                    let name = format!("other:{t}:{i}");
                    let guard = client
                        .lock(&name)
                        .try_acquire()
                        .await
                        .map_err(|e| format!("{name}: {e:?}"))?;
                    guard
                        .release()
                        .await
                        .map_err(|e| format!("{name} release: {e:?}"))?;
                }
                Ok::<(), String>(())
            });
        }
        let mut failed = Vec::new();
        while let Some(task) = tasks.join_next().await {
            if let Err(e) = task.expect("task") {
                failed.push(e);
            }
        }
        assert!(
            failed.is_empty(),
            "connections({connections}), after {:?}: {failed:?}",
            started.elapsed()
        );
        // Polled at last, the parked release completes.
        within("the parked release", release)
            .await
            .expect("released");
    }
}

/// Generated RESP2/RESP3 frames, valid for redis-rs's parser unless nested too deep.
mod frames {
    use proptest::prelude::*;

    fn bulk(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = format!("{}{}\r\n", kind as char, payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        frame
    }

    fn aggregate(kind: u8, n: usize, items: Vec<Vec<u8>>) -> Vec<u8> {
        let mut frame = format!("{}{n}\r\n", kind as char).into_bytes();
        frame.extend(items.into_iter().flatten());
        frame
    }

    /// Every leaf type, with payloads that contain CRLFs and bytes that are no UTF-8.
    pub fn leaf() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"+OK\r\n".to_vec()),
            "[a-zA-Z0-9 :]{0,20}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| bulk(b'$', &b)),
            Just(b"$-1\r\n".to_vec()),
            Just(b"_\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
            "[A-Z]{1,8}( [a-z ]{0,20})?".prop_map(|s| format!("-{s}\r\n").into_bytes()),
            "[A-Z]{1,8} [a-z\r\n]{0,20}".prop_map(|s| bulk(b'!', s.as_bytes())),
            any::<f64>().prop_map(|x| format!(",{x}\r\n").into_bytes()),
            any::<bool>().prop_map(|b| format!("#{}\r\n", if b { 't' } else { 'f' }).into_bytes()),
            "-?[0-9]{1,40}".prop_map(|n| format!("({n}\r\n").into_bytes()),
            ("txt|mkd", "[a-z :\r\n]{0,20}")
                .prop_map(|(format, text)| bulk(b'=', format!("{format}:{text}").as_bytes())),
        ]
    }

    fn push_kind() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(bulk(b'$', b"invalidate")),
            Just(bulk(b'$', b"message")),
            Just(bulk(b'$', b"subscribe")),
            Just(bulk(b'$', b"unsubscribe")),
            Just(b"+smessage\r\n".to_vec()),
            "[a-z]{1,12}".prop_map(|k| bulk(b'$', k.as_bytes())),
        ]
    }

    /// Frames of every aggregate type nested in each other, pushes and attributes among them.
    pub fn frame() -> impl Strategy<Value = Vec<u8>> {
        leaf().prop_recursive(6, 96, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(|items| aggregate(
                    b'*',
                    items.len(),
                    items
                )),
                proptest::collection::vec(inner.clone(), 0..6).prop_map(|items| aggregate(
                    b'~',
                    items.len(),
                    items
                )),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(|pairs| {
                    let n = pairs.len();
                    aggregate(
                        b'%',
                        n,
                        pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                    )
                }),
                (
                    proptest::collection::vec((inner.clone(), inner.clone()), 0..3),
                    inner.clone()
                )
                    .prop_map(|(pairs, data)| {
                        let n = pairs.len();
                        let mut items: Vec<Vec<u8>> =
                            pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
                        items.push(data);
                        aggregate(b'|', n, items)
                    }),
                (push_kind(), proptest::collection::vec(inner, 0..6)).prop_map(|(kind, data)| {
                    let mut items = vec![kind];
                    items.extend(data);
                    aggregate(b'>', items.len(), items)
                }),
                Just(b">0\r\n".to_vec()),
            ]
        })
    }

    /// A large aggregate: thousands of small elements.
    pub fn large() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(leaf(), 500..2000)
            .prop_map(|items| aggregate(b'*', items.len(), items))
    }

    /// Arrays, maps, attributes and pushes of one element nested `depth` deep around a leaf:
    /// beyond 99, redis-rs refuses them, and so must the decoder.
    pub fn deep() -> impl Strategy<Value = Vec<u8>> {
        (
            90..115usize,
            prop_oneof![
                Just(&b"*1\r\n"[..]),
                Just(&b"%1\r\n+k\r\n"[..]),
                Just(&b"|1\r\n+k\r\n+v\r\n"[..]),
                Just(&b">2\r\n+m\r\n"[..])
            ],
            leaf(),
        )
            .prop_map(|(depth, open, leaf)| [open.repeat(depth), leaf].concat())
    }
}

/// Checks the decoder on `frames` fed as one stream cut at `cuts`: each frame decodes to the
/// value redis-rs made of it (`theirs`, in the same order), with its length; from the first
/// frame redis-rs refused on, the decoder has stopped with an error.
fn decodes_as_redis_rs(
    frames: &[Vec<u8>],
    theirs: &[Result<String, String>],
    cuts: &[usize],
) -> Result<(), String> {
    let stream = frames.concat();
    let ours = distlock::__fuzz::decode_stream(&stream, cuts);
    for (i, (frame, theirs)) in frames.iter().zip(theirs).enumerate() {
        match (ours.get(i), theirs) {
            (Some(Ok((value, len))), Ok(theirs)) => {
                if format!("{value:?}") != *theirs || *len != frame.len() {
                    return Err(format!(
                        "frame {i} {:?} cut at {cuts:?}: ours {value:?} ({len} bytes), \
                         redis-rs {theirs} ({} bytes)",
                        String::from_utf8_lossy(frame),
                        frame.len()
                    ));
                }
            }
            (Some(Err(_)), Err(_)) => return Ok(()),
            (ours, theirs) => {
                return Err(format!(
                    "frame {i} {:?} cut at {cuts:?}: ours {ours:?}, redis-rs {theirs:?}",
                    String::from_utf8_lossy(frame)
                ))
            }
        }
    }
    match ours.get(frames.len()) {
        None => Ok(()),
        Some(extra) => Err(format!("a frame more than was sent: {extra:?}")),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The client's reply decoder against redis-rs's parser, on streams of generated frames
    /// (pushes, attributes, every type nested in every other, large aggregates, values nested
    /// up to and beyond redis-rs's depth bound) fed in two pieces cut at every point, and in
    /// many pieces cut at random points.
    #[test]
    fn the_decoder_agrees_with_redis_rs_at_every_split(
        frames in proptest::collection::vec(
            proptest::prop_oneof![
                6 => frames::frame(),
                1 => frames::large(),
                1 => frames::deep(),
            ],
            1..5,
        ),
        random_cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..20),
    ) {
        let theirs: Vec<Result<String, String>> = frames
            .iter()
            .map(|f| redis::parse_redis_value(f).map(|v| format!("{v:?}")).map_err(|e| e.to_string()))
            .collect();
        let len: usize = frames.iter().map(Vec::len).sum();
        // Every cut of a short stream; of a long one (a large aggregate), 300 spread over it.
        let step = (len / 300).max(1);
        for cut in (0..=len).step_by(step) {
            decodes_as_redis_rs(&frames, &theirs, &[cut])
                .map_err(proptest::test_runner::TestCaseError::fail)?;
        }
        let mut cuts: Vec<usize> = random_cuts.iter().map(|i| i.index(len + 1)).collect();
        cuts.sort_unstable();
        decodes_as_redis_rs(&frames, &theirs, &cuts)
            .map_err(proptest::test_runner::TestCaseError::fail)?;
    }
}

/// Frames beyond the decoder's size bound are refused as soon as their header says so, before
/// their bytes are buffered; bytes that are no frame are refused; neither crashes.
#[test]
fn frames_beyond_the_bounds_are_errors() {
    for stream in [
        &b"$600000000\r\n"[..],
        b"*400000000\r\n:1\r\n",
        b"%9223372036854775807\r\n",
        b"$99999999999999999999\r\n",
        b"?\r\n",
        b"$3\r\nabcd\r\n",
    ] {
        let decoded = distlock::__fuzz::decode_stream(stream, &[]);
        assert!(
            matches!(decoded.as_slice(), [Err(_)]),
            "{:?}: {decoded:?}",
            String::from_utf8_lossy(stream)
        );
    }
    let mut deep = b"*1\r\n".repeat(200_000);
    deep.extend_from_slice(b":1\r\n");
    let decoded = distlock::__fuzz::decode_stream(&deep, &[7, 100, 4000]);
    assert!(matches!(decoded.as_slice(), [Err(_)]), "{decoded:?}");
}
