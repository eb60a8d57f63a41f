//! Tests of the proxy's faults through real connections to a real server.

use super::*;
use redis::IntoConnectionInfo;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Polls `condition` until it holds or `timeout` passes (a condition of the proxy thread's,
/// which has no event of its own to wait on).
fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A connection without the `CLIENT SETINFO` handshake, so connecting
/// is a bare TCP connect and every reply on the wire answers one of the
/// test's commands.
fn connect(url: &str) -> redis::RedisResult<redis::Connection> {
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let conn = client.get_connection_with_timeout(TIMEOUT)?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    Ok(conn)
}

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

fn connect_and_ping(url: &str) -> redis::RedisResult<String> {
    ping(&mut connect(url)?)
}

/// A raw PING on `stream`; returns the reply's size.
fn raw_ping(stream: &mut std::net::TcpStream) -> io::Result<usize> {
    use std::io::{Read, Write};
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    stream.read(&mut [0; 64])
}

fn get(server: &TestServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(
            &mut redis::Client::open(server.url())
                .and_then(|c| c.get_connection())
                .expect("connection"),
        )
        .expect("GET on the server")
}

/// Sequential `INCR`s through the proxy, reconnecting after each
/// failure; returns the indices of the failed ones.
fn incr_through(proxy: &FaultProxy, key: &str, count: usize) -> Vec<usize> {
    let mut conn = None;
    let mut failed = Vec::new();
    for i in 0..count {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => conn.insert(connect(&proxy.url()).expect("connect through the proxy")),
        };
        if redis::cmd("INCR").arg(key).query::<u64>(c).is_err() {
            failed.push(i);
            conn = None;
        }
    }
    failed
}

#[test]
fn handle_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<FaultProxy>();
}

#[test]
fn forwards_commands_both_ways() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    assert_eq!(proxy.addr(), format!("127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
    assert_eq!(proxy.upstream(), server.addr());
    assert_ne!(proxy.port(), server.port());

    let mut conn = connect(&proxy.url()).expect("connect");
    assert_eq!(ping(&mut conn).expect("PING"), "PONG");
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut conn)
        .expect("SET");
    assert_eq!(get(&server, "k").as_deref(), Some("v"));
    // Larger than a chunk in both directions.
    let big = "x".repeat(1 << 20);
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .exec(&mut conn)
        .expect("SET big");
    let back: String = redis::cmd("GET").arg("big").query(&mut conn).expect("GET");
    assert!(back == big, "a 1 MiB value came back altered");

    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.open_connections(), 1);
    drop(conn);
    assert!(
        wait_until(TIMEOUT, || proxy.open_connections() == 0),
        "the client's close did not end the proxied connection"
    );
    assert_eq!((proxy.replies_dropped(), proxy.resets()), (0, 0));
}

#[test]
fn drop_next_reply_loses_the_reply_but_not_the_write() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut conn = connect(&proxy.url()).expect("connect");
    ping(&mut conn).expect("PING");

    proxy.drop_next_reply();
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut conn)
        .expect_err("the SET reply must be lost");
    assert!(err.is_connection_dropped(), "{err:?}");
    assert_eq!(get(&server, "k").as_deref(), Some("v"));
    assert_eq!(proxy.replies_dropped(), 1);
    assert_eq!(proxy.resets(), 1);

    // One-shot: the next connection gets all its replies.
    let mut conn = connect(&proxy.url()).expect("reconnect");
    let value: String = redis::cmd("GET").arg("k").query(&mut conn).expect("GET");
    assert_eq!(value, "v");
    assert_eq!(proxy.replies_dropped(), 1);
}

#[test]
fn blackhole_swallows_requests_until_turned_off() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut conn = connect(&proxy.url()).expect("connect");
    ping(&mut conn).expect("PING");

    proxy.blackhole(true);
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("read timeout");
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut conn)
        .expect_err("no reply through a black hole");
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(get(&server, "k"), None, "the request reached the server");
    assert_eq!(proxy.open_connections(), 1);

    proxy.blackhole(false);
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    assert_eq!(proxy.resets(), 0);
}

/// Reads from `stream` until `want` bytes came (or the read timeout struck).
fn read_exactly(stream: &mut std::net::TcpStream, want: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut got = vec![0; want];
    stream.read_exact(&mut got)?;
    Ok(got)
}

#[test]
fn freeze_stops_open_connections_and_lets_new_ones_pass() {
    use std::io::Write;
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut frozen = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
    assert!(raw_ping(&mut frozen).expect("raw PING") > 0);

    proxy.freeze();
    assert_eq!(proxy.frozen(), 1);
    frozen
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .expect("write");
    frozen
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("read timeout");
    let err = read_exactly(&mut frozen, 5).expect_err("no reply while frozen");
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    assert_eq!(get(&server, "k"), None, "the request passed the freeze");
    assert_eq!(
        proxy.open_connections(),
        1,
        "a frozen connection stays open"
    );
    // A new connection passes, and is not frozen.
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    assert_eq!(proxy.frozen(), 1);

    proxy.thaw();
    frozen
        .set_read_timeout(Some(TIMEOUT))
        .expect("read timeout");
    assert_eq!(
        read_exactly(&mut frozen, 5).expect("the held SET's reply"),
        b"+OK\r\n"
    );
    assert_eq!(get(&server, "k").as_deref(), Some("v"));
    assert_eq!((proxy.frozen(), proxy.resets()), (0, 0));
}

#[test]
fn freeze_noted_stops_only_the_noted_connections() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.note_sending(b"marked-connection");
    let mut marked = connect(&proxy.url()).expect("connect marked");
    let mut other = connect(&proxy.url()).expect("connect other");
    let _: String = redis::cmd("ECHO")
        .arg("marked-connection")
        .query(&mut marked)
        .expect("ECHO");
    proxy.freeze_noted();
    assert_eq!(proxy.frozen(), 1);
    marked
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("read timeout");
    assert!(ping(&mut marked).expect_err("frozen").is_timeout());
    assert_eq!(ping(&mut other).expect("the other goes on"), "PONG");
}

const PUSH: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";

#[test]
fn an_injected_push_goes_before_the_next_reply() {
    use std::io::Write;
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
    raw.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    proxy.inject_push(PUSH);
    proxy.inject_push(PUSH);
    // Two replies in one chunk (pipelined), a push before each.
    raw.write_all(b"PING\r\nPING\r\n").expect("write");
    let mut want = Vec::new();
    for _ in 0..2 {
        want.extend_from_slice(PUSH);
        want.extend_from_slice(b"+PONG\r\n");
    }
    assert_eq!(read_exactly(&mut raw, want.len()).expect("replies"), want);
    assert_eq!(proxy.pushes_injected(), 2);
    // Nothing left to inject: the next reply comes alone.
    assert_eq!(raw_ping(&mut raw).expect("PING"), 7);

    proxy.push_before_replies(Some(PUSH));
    raw.write_all(b"PING\r\n").expect("write");
    let mut want = PUSH.to_vec();
    want.extend_from_slice(b"+PONG\r\n");
    assert_eq!(read_exactly(&mut raw, want.len()).expect("reply"), want);
    proxy.clear();
    assert_eq!(raw_ping(&mut raw).expect("PING"), 7);
}

#[test]
fn drop_next_reply_containing_drops_only_that_reply() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut conn = connect(&proxy.url()).expect("connect");
    proxy.drop_next_reply_containing(b"marker");
    assert_eq!(
        ping(&mut conn).expect("a reply without the pattern"),
        "PONG"
    );
    let lost: redis::RedisResult<String> = redis::cmd("ECHO").arg("a marker").query(&mut conn);
    assert!(lost.expect_err("dropped").is_connection_dropped());
    assert_eq!((proxy.replies_dropped(), proxy.resets()), (1, 1));
    let mut conn = connect(&proxy.url()).expect("connect again");
    let echoed: String = redis::cmd("ECHO")
        .arg("a marker")
        .query(&mut conn)
        .expect("once only");
    assert_eq!(echoed, "a marker");
}

#[test]
fn latency_delays_each_direction() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut conn = connect(&proxy.url()).expect("connect");
    ping(&mut conn).expect("PING");

    let base = Duration::from_millis(100);
    proxy.latency(base, Duration::ZERO);
    let started = Instant::now();
    ping(&mut conn).expect("PING with latency");
    let round_trip = started.elapsed();
    assert!(
        round_trip >= 2 * base,
        "round trip {round_trip:?} shorter than the request's and the reply's delay"
    );

    proxy.latency(Duration::ZERO, Duration::ZERO);
    ping(&mut conn).expect("PING without latency");
}

#[test]
fn jitter_never_reorders_chunks() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.seed(3);
    proxy.latency(Duration::from_millis(1), Duration::from_millis(20));
    let mut conn = connect(&proxy.url()).expect("connect");

    // Each command is read as a chunk of its own, with its own delay,
    // while earlier ones are still delayed: without the ordering,
    // requests and replies would overtake each other.
    let mut expected = String::new();
    for i in 0..100 {
        let cmd = redis::cmd("APPEND")
            .arg("k")
            .arg(format!("{i},"))
            .get_packed_command();
        conn.send_packed_command(&cmd).expect("send APPEND");
        assert!(
            wait_until(TIMEOUT, || { proxy.requests_read() == i + 1 }),
            "the proxy did not read APPEND #{i}"
        );
        expected.push_str(&format!("{i},"));
    }
    let mut lengths = Vec::new();
    for _ in 0..100 {
        match conn.recv_response().expect("APPEND reply") {
            redis::Value::Int(len) => lengths.push(len),
            other => panic!("unexpected APPEND reply {other:?}"),
        }
    }
    assert!(
        lengths.windows(2).all(|w| w[0] < w[1]),
        "replies out of order: {lengths:?}"
    );
    assert_eq!(get(&server, "k").as_deref(), Some(expected.as_str()));
}

#[test]
fn refuse_new_resets_new_connections_only() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut established = connect(&proxy.url()).expect("connect");
    ping(&mut established).expect("PING");

    proxy.refuse_new(true);
    assert!(connect_and_ping(&proxy.url()).is_err());
    // A reset, not a clean close.
    let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
    let err = raw_ping(&mut raw).expect_err("PING on a refused connection");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    assert_eq!(proxy.resets(), 2);
    assert_eq!(proxy.connections(), 3);
    ping(&mut established).expect("an established connection keeps working");

    proxy.refuse_new(false);
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
}

#[test]
fn reset_all_breaks_open_connections() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let mut a = connect(&proxy.url()).expect("connect a");
    let mut b = connect(&proxy.url()).expect("connect b");
    ping(&mut a).expect("PING a");
    ping(&mut b).expect("PING b");
    let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
    assert!(raw_ping(&mut raw).expect("raw PING") > 0);
    assert_eq!(proxy.open_connections(), 3);

    proxy.reset_all();
    // reset_all returns once the connections are gone.
    assert_eq!(proxy.open_connections(), 0);
    assert_eq!(proxy.resets(), 3);
    let err = raw_ping(&mut raw).expect_err("PING on a reset connection");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    for conn in [&mut a, &mut b] {
        let err = ping(conn).expect_err("PING on a reset connection");
        assert!(err.is_connection_dropped(), "{err:?}");
    }
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
}

#[test]
fn reset_noted_breaks_only_the_connections_that_sent_the_pattern() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.note_sending(b"marked-connection");
    let mut marked = connect(&proxy.url()).expect("connect marked");
    let mut other = connect(&proxy.url()).expect("connect other");
    let mut split = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
    let _: String = redis::cmd("ECHO")
        .arg("marked-connection")
        .query(&mut marked)
        .expect("ECHO");
    ping(&mut other).expect("PING other");
    {
        // The pattern split over two writes, read as two chunks.
        use std::io::{Read, Write};
        split.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        let before = proxy.requests_read();
        split
            .write_all(b"*2\r\n$4\r\nECHO\r\n$17\r\nmarked-")
            .expect("write");
        assert!(wait_until(TIMEOUT, || { proxy.requests_read() > before }));
        split.write_all(b"connection\r\n").expect("write");
        assert!(split.read(&mut [0; 64]).expect("ECHO reply") > 0);
    }
    assert_eq!(proxy.noted(), 2);

    proxy.reset_noted();
    assert_eq!(proxy.open_connections(), 1);
    let err = ping(&mut marked).expect_err("PING on a reset connection");
    assert!(err.is_connection_dropped(), "{err:?}");
    let err = raw_ping(&mut split).expect_err("PING on a reset connection");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    assert_eq!(
        ping(&mut other).expect("the other connection goes on"),
        "PONG"
    );
    // A new connection is not noted until it sends the pattern itself.
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    assert_eq!(proxy.noted(), 0);
}

#[test]
fn random_reply_drops_still_apply_the_writes() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.seed(7);
    proxy.drop_replies(0.2);
    let attempts = 200;
    let failed = incr_through(&proxy, "n", attempts).len();
    proxy.drop_replies(0.0);

    let acked = attempts - failed;
    let counter: usize = get(&server, "n").map_or(0, |n| n.parse().expect("a number"));
    assert!(failed > 0, "no reply was dropped");
    assert!(proxy.replies_dropped() > 0);
    assert!(counter >= acked, "counter {counter} < acknowledged {acked}");
    // Each reply is one chunk, so every failure is a lost reply to an
    // INCR that was applied.
    assert_eq!(counter, attempts, "{failed} failed, {acked} acknowledged");
    assert_eq!(proxy.replies_dropped(), failed as u64);
    assert_eq!(proxy.resets(), failed as u64);
}

#[test]
fn seed_replays_the_same_drops() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.drop_replies(0.3);
    proxy.seed(11);
    let first = incr_through(&proxy, "a", 50);
    proxy.seed(11);
    let second = incr_through(&proxy, "b", 50);
    assert!(!first.is_empty());
    assert_eq!(first, second);
}

#[test]
fn clear_turns_every_fault_off() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.drop_replies(1.0);
    proxy.drop_next_reply();
    proxy.blackhole(true);
    proxy.latency(Duration::from_secs(60), Duration::ZERO);
    proxy.refuse_new(true);
    proxy.clear();
    let mut conn = connect(&proxy.url()).expect("connect");
    for _ in 0..10 {
        assert_eq!(ping(&mut conn).expect("PING"), "PONG");
    }
    assert_eq!((proxy.replies_dropped(), proxy.resets()), (0, 0));
}

#[test]
fn dropping_the_proxy_closes_its_connections() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    let url = proxy.url();
    let mut conn = connect(&url).expect("connect");
    ping(&mut conn).expect("PING");
    drop(proxy);
    assert!(ping(&mut conn).is_err());
    assert!(connect_and_ping(&url).is_err());
}

#[test]
fn keeps_forwarding_while_the_callers_runtime_is_blocked() {
    let server = TestServer::builder().start_blocking().expect("server");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let proxy = FaultProxy::in_front_of(&server).expect("proxy");
        // Blocking calls on the only thread of this runtime.
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
        // Dropping inside an async context must not panic.
        drop(proxy);
    });
}

#[test]
fn bad_settings_are_taken_in_range_not_panicked_on() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.drop_replies(f64::NAN);
    proxy.drop_replies(-1.0);
    proxy.drop_replies_containing(b"", 0.5);
    proxy.drop_replies_containing(b"PONG", 7.0);
    proxy.drop_next_reply_containing(b"");
    proxy.note_sending(b"");
    proxy.inject_push(b"");
    proxy.clear();
    // Still a working proxy, with nothing dropped.
    assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    assert_eq!(proxy.replies_dropped(), 0);
    assert!(FaultProxy::start("not an address").is_err());
}

#[test]
fn drop_next_replies_loses_exactly_n_replies_and_none_of_the_writes() {
    let server = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&server).expect("proxy");
    proxy.drop_next_replies(3);
    // Each lost reply resets its connection; the INCR after it goes on a new one.
    assert_eq!(incr_through(&proxy, "n", 5), [0, 1, 2]);
    assert_eq!(proxy.replies_dropped(), 3);
    // Every INCR reached the server, those whose replies were lost included.
    assert_eq!(get(&server, "n").as_deref(), Some("5"));
    proxy.drop_next_replies(2);
    proxy.drop_next_replies(0); // replaced: off
    assert!(incr_through(&proxy, "n", 2).is_empty());
}
