//! [`FaultProxy::redirect`] through real connections to two real servers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

fn query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> T {
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(TIMEOUT))
        .expect("connection");
    cmd.query(&mut conn).expect("query")
}

fn get(url: &str, key: &str) -> Option<String> {
    query(url, redis::cmd("GET").arg(key))
}

/// True when `server` does not answer a `PING` within 50 ms (it is in a `DEBUG SLEEP`).
fn asleep(server: &TestServer) -> bool {
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").expect("PING");
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    stream.read(&mut [0; 16]).is_err()
}

/// Reads from `stream` until `want` bytes came (or the timeout).
fn read_exactly(stream: &mut TcpStream, want: usize) -> Vec<u8> {
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut got = vec![0; want];
    stream.read_exact(&mut got).expect("the answers");
    got
}

/// An open connection's next request goes to the new server, after the answer the old one
/// still owes (to a `DEBUG SLEEP` it is in); the old server keeps its data; new connections
/// go to the new server.
#[test]
fn redirect_moves_the_next_requests_of_open_connections_after_the_answers_owed() {
    let old = TestServer::builder()
        .arg("--enable-debug-command")
        .arg("local")
        .start_blocking()
        .expect("server");
    let new = TestServer::builder().start_blocking().expect("server");
    let proxy = FaultProxy::in_front_of(&old).expect("proxy");
    let mut stream = TcpStream::connect(proxy.addr()).expect("connect");
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nold\r\n")
        .expect("SET");
    assert_eq!(read_exactly(&mut stream, 5), b"+OK\r\n");
    // The old server asleep for 300 ms, its answer owed.
    stream
        .write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n0.3\r\n")
        .expect("DEBUG SLEEP");
    let deadline = Instant::now() + TIMEOUT;
    while !asleep(&old) {
        assert!(
            Instant::now() < deadline,
            "the DEBUG SLEEP never reached the old server"
        );
    }
    proxy.redirect(&new.addr()).expect("redirect");
    assert_eq!(proxy.upstream(), new.addr());
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n")
        .expect("SET");
    // The old server's OK, then the new one's, in the order asked.
    assert_eq!(read_exactly(&mut stream, 10), b"+OK\r\n+OK\r\n");
    assert_eq!(get(&old.url(), "k").as_deref(), Some("old"));
    assert_eq!(get(&new.url(), "k").as_deref(), Some("new"));
    // Still the one client connection, now on the new server.
    stream
        .write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .expect("GET");
    assert_eq!(read_exactly(&mut stream, 9), b"$3\r\nnew\r\n");
    assert_eq!(proxy.connections(), 1);
    // A new connection goes to the new server.
    assert_eq!(get(&proxy.url(), "k").as_deref(), Some("new"));
    assert_eq!((proxy.replies_dropped(), proxy.resets()), (0, 0));
}
