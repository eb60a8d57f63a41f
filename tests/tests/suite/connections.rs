//! A single-node client's connections (`ClientBuilder::connections`): how many it opens, and
//! that every command of one acquisition travels on one of them, so that they reach the
//! server in the order they were sent, as on a client with one connection.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use distlock::{Client, Error, DEFAULT_CONNECTIONS, MAX_CONNECTIONS};
use distlock_testkit::{wait_until_async, RedisServer};

const END: &str = "distlock-test-monitor-end";

/// Every command the server runs from `start` until `finish`, one `MONITOR` line each.
struct Monitor {
    addr: String,
    lines: std::thread::JoinHandle<Vec<String>>,
}

impl Monitor {
    fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(server.addr()).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("+OK"); // from here on, one line per command
        let lines = std::thread::spawn(move || {
            let mut lines = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).expect("MONITOR line") == 0 || line.contains(END) {
                    return lines;
                }
                lines.push(line);
            }
        });
        Monitor {
            addr: server.addr(),
            lines,
        }
    }

    /// Ends the capture with a marker command sent on a raw connection.
    fn finish(self) -> Vec<String> {
        let mut stream = TcpStream::connect(&self.addr).expect("connect for the marker");
        stream
            .write_all(format!("ECHO {END}\r\n").as_bytes())
            .expect("marker");
        self.lines.join().expect("monitor thread")
    }
}

/// The client address and the setnx owner token (its 21 random characters of URL-safe
/// base 64, which the holder description follows after a tab) of a `MONITOR` line that
/// carries one:
/// `<time> [<db> <addr>] "SET" "<key>" "<token>\t..." ..`. Lines a script ran inside Redis
/// (`[0 lua]`, e.g. the `SET` of a waiter's acquire script) came on no connection: skipped,
/// their script's own line (`EVALSHA`) says where it came from.
fn token_of(line: &str) -> Option<(String, String)> {
    let addr = line
        .split_once(" [")?
        .1
        .split_once(']')?
        .0
        .split_once(' ')?
        .1;
    if addr == "lua" {
        return None;
    }
    let b = line.as_bytes();
    const LEN: usize = 21;
    let token_char = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_';
    (0..b.len().saturating_sub(LEN + 2)).find_map(|i| {
        let token = &b[i + 1..i + 1 + LEN];
        (b[i] == b'"' && token.iter().all(token_char) && b[i + 1 + LEN] == b'\\')
            .then(|| (addr.to_owned(), line[i + 1..i + 1 + LEN].to_owned()))
    })
}

/// True once `server` has exactly `n` client connections besides `admin`, the connection
/// asking (the test kit's own start-up connections close a moment after it starts).
async fn comes_to(admin: &redis::aio::MultiplexedConnection, n: usize) -> bool {
    wait_until_async(Duration::from_secs(10), || {
        let mut admin = admin.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .expect("CLIENT LIST");
            list.lines().count() - 1 == n
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_an_acquisition_travels_on_one_connection() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .connections(4)
        // Waiters take the lock from Redis, so that their retries show up too.
        .local_handoff(0, Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let monitor = Monitor::start(&server);
    // Uncontended acquisitions from several tasks at once.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let client = client.clone();
            tokio::spawn(async move {
                for i in 0..8 {
                    let guard = client
                        .lock(format!("k{t}:{i}"))
                        .acquire()
                        .await
                        .expect("acquire");
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    // A waiter that tries, finds the lock taken, and tries again once it is released.
    let holder = client.lock("busy").acquire().await.expect("holder");
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("busy")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    let parked = wait_until_async(Duration::from_secs(10), || async {
        common::subscribers(&server, &common::channel("busy")).await > 0
    })
    .await;
    assert!(parked, "the waiter never subscribed");
    holder.release().await.expect("release the holder");
    let guard = waiter
        .await
        .expect("waiter task")
        .expect("the waiter takes it");
    guard.release().await.expect("release the waiter's hold");
    let lines = monitor.finish();

    let mut connections_of: HashMap<String, HashSet<String>> = HashMap::new();
    let mut commands_of: HashMap<String, usize> = HashMap::new();
    for (addr, token) in lines.iter().filter_map(|l| token_of(l)) {
        *commands_of.entry(token.clone()).or_default() += 1;
        connections_of.entry(token).or_default().insert(addr);
    }
    // A token per uncontended acquisition and the holder's; the waiter's attempt after its
    // wait carries a token of its own (its hold says when it was granted), so it has two.
    assert!(
        connections_of.len() >= 8 * 8 + 3,
        "one token per acquisition, and per attempt after a wait: {}",
        connections_of.len()
    );
    for (token, connections) in &connections_of {
        assert_eq!(
            connections.len(),
            1,
            "the commands of {token} came on {connections:?}"
        );
    }
    // The waiter's acquisition: its attempts and its release, on one connection.
    let busy: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l.contains("{busy}"))
        .filter_map(|l| token_of(l))
        .collect();
    let holder_token = &busy.first().expect("the holder's acquire").1;
    let waiter: Vec<&(String, String)> = busy.iter().filter(|(_, t)| t != holder_token).collect();
    let waiter_tokens: HashSet<&String> = waiter.iter().map(|(_, t)| t).collect();
    let waiter_connections: HashSet<&String> = waiter.iter().map(|(a, _)| a).collect();
    assert!(
        waiter_tokens.len() >= 2,
        "the waiter tried twice: {waiter:?}"
    );
    assert_eq!(
        waiter_connections.len(),
        1,
        "the waiter's commands came on {waiter_connections:?}"
    );
    assert!(commands_of.values().any(|&n| n >= 2), "{commands_of:?}");
    let used: HashSet<&String> = connections_of.values().flatten().collect();
    assert!(
        (2..=3).contains(&used.len()),
        "66 acquisitions on {} connections of the 3 that carry them",
        used.len()
    );
    // The first connection carries the subscriptions (and renewals), not acquisitions.
    let subscriptions: HashSet<String> = lines
        .iter()
        .filter(|l| l.contains("\"SUBSCRIBE\""))
        .filter_map(|l| {
            Some(
                l.split_once(" [")?
                    .1
                    .split_once(']')?
                    .0
                    .split_once(' ')?
                    .1
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        subscriptions.len(),
        1,
        "SUBSCRIBE came on {subscriptions:?}"
    );
    assert!(
        subscriptions.iter().all(|addr| !used.contains(addr)),
        "acquisitions on the subscriptions' connection {subscriptions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_opens_the_connections_asked_for() {
    let server = RedisServer::start();
    let admin = server.async_connection().await;
    let default = common::client(&server).await;
    assert!(comes_to(&admin, DEFAULT_CONNECTIONS).await, "the default");
    drop(default);
    assert!(
        comes_to(&admin, 0).await,
        "a dropped client closes them all"
    );
    let one = Client::builder(&server.url())
        .connections(1)
        .connect()
        .await
        .expect("connect");
    let guard = one.lock("x").acquire().await.expect("acquire");
    guard.release().await.expect("release");
    assert!(comes_to(&admin, 1).await, "connections(1)");
    for wrong in [0, MAX_CONNECTIONS + 1] {
        let refused = Client::builder(&server.url())
            .connections(wrong)
            .connect()
            .await;
        assert!(
            matches!(refused, Err(Error::InvalidConfig { .. })),
            "connections({wrong})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_room_for_every_connection_is_reported_at_connect() {
    // Room for one client connection: the first lane opens, the others are turned away.
    let server = RedisServer::start_with(&["--maxclients", "1"]);
    let Err(refused) = Client::builder(&server.url())
        .connections(4)
        .connect()
        .await
    else {
        panic!("four connections to a server that takes one");
    };
    // Redis answers `max number of clients reached` and closes; the client may see either.
    assert!(
        matches!(
            refused,
            Error::Redis {
                op: distlock::Op::Connect,
                ..
            }
        ),
        "{refused:?}"
    );
}

/// True once a request of `client` is answered (waiting up to 10 s): requests sent while
/// late answers are still on their way may time out behind them.
async fn answered_again(client: &Client) -> bool {
    wait_until_async(Duration::from_secs(10), || {
        let client = client.clone();
        async move {
            match client.lock("probe").try_acquire().await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await
}

/// The lock `held`, taken by a client of its own (held until the guard is dropped), for
/// [`answers_stay_with_their_requests`].
async fn held_elsewhere(server: &RedisServer) -> distlock::Guard {
    let other = common::client(server).await;
    other
        .lock("held")
        .acquire()
        .await
        .expect("the other client")
}

/// `rounds` times: `held` (another client's) answers busy, a free lock is taken and released.
/// On a connection whose answers went to the wrong requests, one of them answers otherwise.
/// A call that times out (a loaded machine, a server still busy with a large request) is
/// made again: a timeout is no answer, and a wrong one shows in the calls after it.
async fn answers_stay_with_their_requests(client: &Client, held: &str, rounds: usize) {
    let mut timeouts = 0;
    for round in 0..rounds {
        let busy = loop {
            match client.lock(held).try_acquire().await {
                Err(e) if e.is_transient() && timeouts < rounds => timeouts += 1,
                busy => break busy,
            }
        };
        assert!(
            matches!(busy, Err(Error::Busy { .. })),
            "round {round}: the held lock answered {busy:?}"
        );
        let free = loop {
            // A fresh name each try: one that timed out may have taken its lock meanwhile.
            match client
                .lock(format!("free:{round}:{timeouts}"))
                .try_acquire()
                .await
            {
                Err(e) if e.is_transient() && timeouts < rounds => timeouts += 1,
                free => break free,
            }
        };
        let free = free.unwrap_or_else(|e| panic!("round {round}: a free lock answered {e:?}"));
        free.release().await.expect("release");
    }
}

/// Acquisitions abandoned mid-request (a timeout around them) at every point: queued, written,
/// reading the answers for the callers before them. The acquisition connection reads each
/// answer for the request it belongs to even so: none is lost, none goes to the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_dropped_mid_flight_leave_every_later_answer_with_its_own_request() {
    let server = RedisServer::start();
    let proxy = distlock_testkit::FaultProxy::start(&server.addr()).expect("fault proxy");
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let other = common::client(&server).await;
    let held = other
        .lock("busy")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("the other client takes it");
    // Answers come a little late: callers give up before, during and after them.
    proxy.reply_latency(Duration::from_millis(2));
    let opened = proxy.connections();
    let mut abandoned = tokio::task::JoinSet::new();
    for i in 0..300u64 {
        let client = client.clone();
        abandoned.spawn(async move {
            let patience = Duration::from_micros(i * 37 % 5000);
            let busy = i % 3 == 0;
            let name = if busy {
                "busy".to_owned()
            } else {
                format!("free:{i}")
            };
            match tokio::time::timeout(patience, client.lock(name).try_acquire()).await {
                // Given up: nothing to check.
                Err(_) => Ok(()),
                Ok(Err(Error::Busy { .. })) if busy => Ok(()),
                Ok(Ok(guard)) if !busy => {
                    let _ = tokio::time::timeout(patience, guard.release()).await;
                    Ok(())
                }
                Ok(other) => Err(format!("attempt {i} (busy: {busy}) answered {other:?}")),
            }
        });
    }
    let mut wrong = Vec::new();
    while let Some(task) = abandoned.join_next().await {
        if let Err(e) = task.expect("task") {
            wrong.push(e);
        }
    }
    assert!(wrong.is_empty(), "answers to other requests: {wrong:?}");
    assert_eq!(
        proxy.connections(),
        opened,
        "the connection failed and was opened again"
    );
    proxy.reply_latency(Duration::ZERO);
    answers_stay_with_their_requests(&client, "busy", 100).await;
    held.release().await.expect("the other client's release");
}

/// A request whose answer does not come within the response timeout fails as timed out (the
/// acquisition connection keeps one clock for all its requests, not a timer each). Nothing
/// was read on the connection since the request went out, so it counts as silent and is
/// opened again (see `wire.rs`): the late answer reaches no one, and the requests after it
/// get their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_later_than_the_response_timeout_times_out_and_is_dropped_when_it_comes() {
    let server = RedisServer::start();
    let proxy = distlock_testkit::FaultProxy::start(&server.addr()).expect("fault proxy");
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let opened = proxy.connections();
    let late = Duration::from_secs(3);
    proxy.reply_latency(late);
    let asked = std::time::Instant::now();
    let timed_out = client.lock("first").try_acquire().await;
    let waited = asked.elapsed();
    match &timed_out {
        Err(Error::Redis { source, .. }) => {
            assert!(source.is_timeout(), "{timed_out:?}")
        }
        other => panic!("a late answer gave {other:?}"),
    }
    assert!(
        waited < late,
        "the caller waited for the answer ({waited:?}) instead of timing out"
    );
    proxy.reply_latency(Duration::ZERO);
    // Requests sent before the connection is found silent time out too; then one is
    // answered on a new connection.
    let answered = answered_again(&client).await;
    assert!(answered, "no answer after the late one");
    let _held = held_elsewhere(&server).await;
    answers_stay_with_their_requests(&client, "held", 20).await;
    assert!(
        proxy.connections() > opened,
        "the silent connection was not opened again"
    );
}

/// The caller that writes a request and is to read the answers gives up while its request is
/// still being written (the server is stopped and the request is larger than the socket's
/// buffers): the reading passes to the next caller or a task, so once the server is back,
/// answers are read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_while_its_request_is_written_leaves_the_reading_to_others() {
    let mut server = RedisServer::start();
    let big = 32 << 20;
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(300))
        .max_name_len(big)
        .connect()
        .await
        .expect("connect");
    let _held = held_elsewhere(&server).await;
    // One call site for both, so that the second sends its acquisition alone (the first
    // from a call site also writes the process record, see Keys).
    let take = |name: String| client.lock(name).try_acquire();
    take("warm-up".into())
        .await
        .expect("warm-up")
        .release()
        .await
        .expect("release");
    server.pause();
    // The first request on the idle connection: its caller writes it and is the reader.
    let gave_up = take("x".repeat(big - 64)).await;
    assert!(
        matches!(&gave_up, Err(Error::Redis { source, .. }) if source.is_timeout()),
        "{gave_up:?}"
    );
    server.resume();
    let answered = answered_again(&client).await;
    assert!(
        answered,
        "no request was answered after the server came back"
    );
    answers_stay_with_their_requests(&client, "held", 20).await;
}

/// Many tasks share the acquisition connection (S2's shape). A request whose caller does not
/// read (another does) costs no task of its own: the tasks alive in the runtime stay the
/// test's own, the client's, and at most one reading and one writing task per connection.
/// (A caller without the reading role once passed on a role it did not have, one task per
/// request, each waiting for the read lock while the reader kept it: about 1 KB leaked per
/// request under sustained load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_does_not_read_spawns_no_task() {
    const TASKS: usize = 32;
    const CYCLES: usize = 300;
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    // Every connection opened and every task of the client's started before the count.
    for task in 0..TASKS {
        let guard = client
            .lock(format!("k{task}"))
            .acquire()
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    }
    let before = metrics.num_alive_tasks();
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (client, metrics, most) = (client.clone(), metrics.clone(), most.clone());
            tokio::spawn(async move {
                let key = format!("k{task}");
                for _ in 0..CYCLES {
                    let guard = client.lock(&key).acquire().await.expect("acquire");
                    guard.release().await.expect("release");
                    most.fetch_max(
                        metrics.num_alive_tasks(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    let allowed = before + TASKS + 2 * DEFAULT_CONNECTIONS;
    assert!(
        most <= allowed,
        "{most} tasks alive under load, at most {allowed} expected ({before} before it, \
         {TASKS} of the test, a reader and a writer per connection)"
    );
}

/// The process record (`nodes/records.rs`) is written with its expiry in one script: a
/// process that died between a plain `HSET` and its `PEXPIRE` left a key that never expired
/// (issue 36, item 6). Every command that touches the record runs inside a script.
#[tokio::test]
async fn the_process_record_is_written_with_its_expiry_in_one_step() {
    let server = RedisServer::start();
    let monitor = Monitor::start(&server);
    let locks = Client::connect(&server.url()).await.expect("connect");
    let g = locks.lock("recorded").try_acquire().await.expect("free");
    g.release().await.expect("release");
    let lines = monitor.finish();
    let record: Vec<String> = lines
        .iter()
        .filter(|l| l.contains("#process"))
        .map(|l| l.to_ascii_lowercase())
        .collect();
    assert!(
        record.iter().any(|l| l.contains("\"hset\""))
            && record.iter().any(|l| l.contains("\"pexpire\"")),
        "the record was written, with its expiry: {record:?}"
    );
    let outside: Vec<_> = record
        .iter()
        .filter(|l| !l.contains("lua]") && !l.contains("\"evalsha\"") && !l.contains("\"eval\""))
        .collect();
    assert!(outside.is_empty(), "written outside a script: {outside:?}");
}
