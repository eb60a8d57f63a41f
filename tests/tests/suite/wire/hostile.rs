//! A hostile server (a listener of the test's own that answers garbage): an error, never a
//! crash or a hang.

use super::*;

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
