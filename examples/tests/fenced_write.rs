//! The fenced-write example against a real `redis-server` and a private PostgreSQL (started by
//! the kit: `initdb` into a temp dir, the server on a free loopback port): a holder that stalls
//! past its lease has its late write refused by the table, because its successor's fencing
//! token is larger.

use std::process::Command;
use std::time::{Duration, Instant};

use distlock::fenced::postgres::classify;
use distlock::{Client, Error};
use distlock_examples::fenced::{self, as_sql, Write};
use distlock_testkit::{PostgresServer, RedisServer};

const LOCK: &str = "invoice:7";

async fn postgres(pg: &PostgresServer) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .expect("connect to the private PostgreSQL");
    tokio::spawn(connection);
    fenced::create_schema(&db).await.expect("schema");
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_late_write_is_refused_by_postgres() {
    let redis = RedisServer::start();
    let pg = PostgresServer::start();
    let db = postgres(&pg).await;
    // Two instances of a service, each with its own client.
    let locks_a = Client::connect(&redis.url()).await.expect("connect A");
    let locks_b = Client::connect(&redis.url()).await.expect("connect B");

    // A takes the lock with a short lease and no watchdog, and writes.
    let ttl = Duration::from_millis(300);
    let started = Instant::now();
    let a = locks_a
        .lock(LOCK)
        .ttl(ttl)
        .watchdog(false)
        .fencing(true)
        .acquire()
        .await
        .expect("A acquires");
    let token_a = a.fencing_token().expect("taken with fencing(true)");
    let write = fenced::fenced_write(&db, LOCK, "draft by A", token_a).await;
    assert_eq!(write.expect("write"), Write::Applied);

    // A stalls. While its lease lasts B cannot take the lock; B's waiting acquire returns
    // once the lease has run out on the server (no sleep here: the lock tells).
    let busy = locks_b.lock(LOCK).try_acquire().await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let b = locks_b
        .lock(LOCK)
        .wait(Duration::from_secs(10))
        .fencing(true)
        .acquire()
        .await
        .expect("B acquires once A's lease is over");
    assert!(
        started.elapsed() >= ttl - Duration::from_millis(50),
        "B got the lock {:?} into A's {ttl:?} lease",
        started.elapsed()
    );
    assert!(!a.is_held(), "A's guard still claims the lock");
    let token_b = b.fencing_token().expect("taken with fencing(true)");
    assert!(
        token_b > token_a,
        "B's token {token_b} not above A's {token_a}"
    );
    let write = fenced::fenced_write(&db, LOCK, "final by B", token_b).await;
    assert_eq!(write.expect("write"), Write::Applied);
    // One holder may write several times with its token.
    let write = fenced::fenced_write(&db, LOCK, "final by B, v2", token_b).await;
    assert_eq!(write.expect("write"), Write::Applied);

    // A wakes up and writes again with its old token: refused, nothing changed.
    let late = fenced::fenced_write(&db, LOCK, "late by A", token_a).await;
    assert_eq!(late.expect("write"), Write::Refused { latest: token_b });
    let stored = fenced::read(&db, LOCK).await.expect("read");
    assert_eq!(stored, Some(("final by B, v2".to_owned(), token_b)));

    // The trigger refuses a stale token from any statement, not only from `fenced_write`.
    let sneaky = db
        .execute(
            "UPDATE fenced_records SET value = 'sneaky A', fencing_token = $2 WHERE name = $1",
            &[&LOCK, &as_sql(token_a)],
        )
        .await
        .map_err(|e| classify(e, token_a))
        .expect_err("a plain UPDATE with a stale token");
    assert!(
        matches!(sneaky, Error::StaleToken { token, highest } if token == token_a && highest == token_b),
        "{sneaky:?}"
    );
    let stored = fenced::read(&db, LOCK).await.expect("read");
    assert_eq!(stored, Some(("final by B, v2".to_owned(), token_b)));

    // A cannot release B's lock either.
    let release = a.release().await;
    assert!(
        matches!(release, Err(Error::NotOwner { .. })),
        "{release:?}"
    );
    b.release().await.expect("B releases");
}

/// The binary, as `cargo run -p distlock-examples --bin fenced_write` runs it: it starts its
/// own Redis and PostgreSQL and ends with the refusal.
#[test]
fn the_fenced_write_binary_shows_the_refusal() {
    let out = Command::new(env!("CARGO_BIN_EXE_fenced_write"))
        .output()
        .expect("run fenced_write");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fenced_write failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("A writes \"late by A\"") && stdout.contains("Refused"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("the stalled holder's late write was refused\n"),
        "{stdout}"
    );
}
