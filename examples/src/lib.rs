//! What the demos share: a `redis-server` of their own and a client on it; and the
//! examples' application code, kept here so that their tests can run it in-process.

pub mod fenced;

use distlock::Client;
use distlock_testkit::{ensure_redis_available, RedisServer};

/// Starts a `redis-server` on a free loopback port for a demo and connects to it; without
/// `redis-server` installed, says how to get it in one line and exits. Keep the server alive
/// for as long as the demo runs: dropping it stops the server.
pub async fn demo_server() -> (RedisServer, Client) {
    if let Err(line) = ensure_redis_available() {
        eprintln!("{line}");
        std::process::exit(1);
    }
    let server = RedisServer::start();
    let locks = Client::connect(&server.url())
        .await
        .expect("connect to the demo server");
    println!(
        "redis-server on {} (started for this demo)\n",
        server.addr()
    );
    (server, locks)
}
