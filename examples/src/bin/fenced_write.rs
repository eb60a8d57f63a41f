//! Fencing tokens stopping a stalled lock holder's late write, in PostgreSQL (see
//! `distlock_examples::fenced`).
//!
//! ```sh
//! cargo run -p distlock-examples --bin fenced_write -- [--redis URL] [--postgres CONNINFO]
//! ```
//!
//! Without `--redis` it starts a `redis-server` of its own; without `--postgres` (a libpq
//! string such as `host=127.0.0.1 user=postgres dbname=postgres`, no TLS) a private PostgreSQL
//! (`initdb` into a temp dir), both on free loopback ports and gone when it ends.
//!
//! Two instances, A and B, each with its own lock client, update one record under the lock
//! `invoice:7`. A takes it with a 500 ms lease and no watchdog, writes, and stalls; its lease
//! runs out; B takes the lock (a larger fencing token) and writes; A wakes up and writes
//! again, still believing it holds the lock: PostgreSQL refuses that write.

use std::time::{Duration, Instant};

use distlock::{Client, Error, FencingToken};
use distlock_examples::fenced::{self, Write};
use distlock_testkit::PostgresServer;

const LOCK: &str = "invoice:7";

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: fenced_write [--redis URL] [--postgres CONNINFO]");
    std::process::exit(2)
}

fn fail(what: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("{what}: {error}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let (mut redis_url, mut pg_conninfo) = (None, None);
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--redis" => redis_url = Some(value),
            "--postgres" => pg_conninfo = Some(value),
            _ => usage(&format!("unknown argument {flag:?}")),
        }
    }

    // Servers of our own where none was named; kept alive until the end of main.
    let (_own_redis, locks_a) = match &redis_url {
        Some(url) => (
            None,
            Client::connect(url)
                .await
                .unwrap_or_else(|e| fail("cannot connect to Redis", e)),
        ),
        None => {
            let (server, locks) = distlock_examples::demo_server().await;
            redis_url = Some(server.url());
            (Some(server), locks)
        }
    };
    // B is another instance of the service: a client of its own.
    let locks_b = Client::connect(redis_url.as_deref().expect("set above"))
        .await
        .unwrap_or_else(|e| fail("second client", e));
    let _own_pg;
    let conninfo = match pg_conninfo {
        Some(conninfo) => conninfo,
        None => {
            let pg = PostgresServer::try_start().unwrap_or_else(|e| fail("PostgreSQL", e));
            println!(
                "PostgreSQL on 127.0.0.1:{} (started for this demo)\n",
                pg.port()
            );
            let conninfo = pg.conninfo();
            _own_pg = pg;
            conninfo
        }
    };
    let (db, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| fail("cannot connect to PostgreSQL", e));
    tokio::spawn(connection);
    fenced::create_schema(&db)
        .await
        .unwrap_or_else(|e| fail("creating the table", e));

    let clock = Instant::now();
    let say = |line: String| println!("[{:>5} ms] {line}", clock.elapsed().as_millis());

    let a = locks_a
        .lock(LOCK)
        .ttl(Duration::from_millis(500))
        .watchdog(false)
        .fencing(true)
        .acquire()
        .await
        .unwrap_or_else(|e| fail("A acquires", e));
    let token_a = a.fencing_token().expect("taken with fencing(true)");
    say(format!(
        "A holds {LOCK}, fencing token {token_a}, lease 500 ms, no watchdog"
    ));
    let first = write(&db, "draft by A", token_a).await;
    say(format!(
        "A writes \"draft by A\" with token {token_a}: {first:?}"
    ));
    say("A stalls (a long GC pause, say) and does not renew its lease".into());

    // B waits for the lock: it is free once A's lease has run out on the server.
    let b = locks_b
        .lock(LOCK)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(5))
        .fencing(true)
        .acquire()
        .await
        .unwrap_or_else(|e| fail("B acquires", e));
    let token_b = b.fencing_token().expect("taken with fencing(true)");
    say(format!(
        "A's lease ran out (A still held it? {}); B holds {LOCK}, fencing token {token_b}",
        a.is_held()
    ));
    let second = write(&db, "final by B", token_b).await;
    say(format!(
        "B writes \"final by B\" with token {token_b}: {second:?}"
    ));

    say("A wakes up and, unaware, finishes its work".into());
    let late = write(&db, "late by A", token_a).await;
    say(format!(
        "A writes \"late by A\" with token {token_a}: {late:?}"
    ));
    let stored = fenced::read(&db, LOCK)
        .await
        .unwrap_or_else(|e| fail("reading back", e));
    say(format!("PostgreSQL holds {stored:?}"));

    match a.release().await {
        Err(Error::NotOwner { .. }) => say("A's release: not the owner any more".into()),
        other => say(format!("A's release: {other:?}")),
    }
    b.release().await.unwrap_or_else(|e| fail("B releases", e));
    if late != (Write::Refused { latest: token_b }) {
        fail("the late write was not refused", format!("{late:?}"));
    }
    println!("\nthe stalled holder's late write was refused");
}

async fn write(db: &tokio_postgres::Client, value: &str, token: FencingToken) -> Write {
    fenced::fenced_write(db, LOCK, value, token)
        .await
        .unwrap_or_else(|e| fail("writing", e))
}
