//! An axum service whose handlers are locked with `#[read_lock]` / `#[write_lock]` (see
//! `distlock_examples::accounts`): `GET /accounts/{id}` and `POST /accounts/{id}/deposit`.
//!
//! ```sh
//! cargo run -p distlock-examples --bin axum_service -- [--redis URL] [--port N]
//! curl -X POST -H 'content-type: application/json' -d '{"amount":5}' \
//!     http://127.0.0.1:PORT/accounts/7/deposit
//! curl http://127.0.0.1:PORT/accounts/7
//! ```
//!
//! `--redis` (or `DISTLOCK_REDIS_URL`) names the Redis to lock on; without it the service starts
//! a `redis-server` of its own on a free port. `--port` defaults to 0 (a free port). The first
//! line on stdout is `listening on http://127.0.0.1:<port>`. Run it twice against one Redis
//! and the accounts' locks hold across both processes (each keeps its own accounts in memory,
//! though: the locks are what the example shows). Ctrl-C stops it.

use std::sync::Arc;
use std::time::Duration;

use distlock::Client;
use distlock_examples::accounts::{router, Accounts, App};

struct Args {
    redis: Option<String>,
    port: u16,
    latency: Duration,
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: axum_service [--redis URL] [--port N] [--latency-ms N]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        redis: std::env::var("DISTLOCK_REDIS_URL")
            .ok()
            .filter(|u| !u.is_empty()),
        port: 0,
        latency: Duration::from_millis(20),
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--redis" => args.redis = Some(value),
            "--port" => {
                args.port = value
                    .parse()
                    .unwrap_or_else(|_| usage(&format!("bad port {value:?}")))
            }
            "--latency-ms" => {
                args.latency = Duration::from_millis(
                    value
                        .parse()
                        .unwrap_or_else(|_| usage(&format!("bad latency {value:?}"))),
                )
            }
            _ => usage(&format!("unknown argument {flag:?}")),
        }
    }
    args
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    // Kept alive until the end of main: dropping it stops the server.
    let (_own_server, locks) = match &args.redis {
        Some(url) => match Client::connect(url).await {
            Ok(locks) => (None, locks),
            Err(error) => {
                eprintln!("cannot connect to Redis: {error}");
                std::process::exit(1)
            }
        },
        None => {
            let (server, locks) = distlock_examples::demo_server().await;
            (Some(server), locks)
        }
    };
    let app = App {
        locks,
        accounts: Arc::new(Accounts::new(args.latency)),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .unwrap_or_else(|e| {
            eprintln!("cannot listen on 127.0.0.1:{}: {e}", args.port);
            std::process::exit(1)
        });
    let addr = listener.local_addr().expect("bound address");
    println!("listening on http://{addr}");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("server error: {e}");
        std::process::exit(1)
    }
}
