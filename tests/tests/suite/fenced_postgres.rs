//! PostgreSQL writes the table fences (`distlock::fenced::postgres`), against a private
//! PostgreSQL the kit starts: a token below the row's is refused and changes nothing, an equal
//! or higher one writes, a database failure is another error than a refusal, and a holder
//! stalled past its lease cannot overwrite its successor's row, end to end.

use crate::fenced::{stale, token, Kind, StalledHolder};
use distlock::fenced::postgres::{classify, Fence};
use distlock::{distributed_lock, Client, Error, FencingToken};
use distlock_testkit::{PostgresServer, RedisServer};
use tokio_postgres::types::ToSql;

/// A connection to `pg` (its connection task runs until the client is dropped).
async fn connect(pg: &PostgresServer) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .expect("connect to the private PostgreSQL");
    tokio::spawn(connection);
    db
}

/// The application's table, before any fence: `accounts (id, owner, balance)`.
async fn accounts(db: &tokio_postgres::Client) -> Fence {
    db.batch_execute(
        "CREATE TABLE accounts (
             id      bigint PRIMARY KEY,
             owner   text   NOT NULL,
             balance bigint NOT NULL CHECK (balance >= 0)
         )",
    )
    .await
    .expect("create the table");
    let fence = Fence::new("accounts", "fencing_token");
    fence.install(db).await.expect("install the fence");
    fence
}

async fn row(db: &tokio_postgres::Client, id: i64) -> Option<(String, i64, i64)> {
    db.query_opt(
        "SELECT owner, balance, fencing_token FROM accounts WHERE id = $1",
        &[&id],
    )
    .await
    .expect("read")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// Lower refused (nothing changed), equal and higher written, by the upsert and the update
/// alike; a statement of the application's that writes a lower token is refused as well.
#[tokio::test]
async fn a_lower_token_is_refused_and_an_equal_or_higher_one_writes() {
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    let fence = accounts(&db).await;
    let id = 7_i64;
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &id)];
    fence
        .upsert(
            &db,
            key,
            &[("owner", &"A"), ("balance", &10_i64)],
            token(10),
        )
        .await
        .expect("insert");
    fence
        .upsert(
            &db,
            key,
            &[("owner", &"A"), ("balance", &11_i64)],
            token(10),
        )
        .await
        .expect("the same token again");
    assert_eq!(row(&db, id).await, Some(("A".into(), 11, 10)));
    stale(
        fence
            .upsert(
                &db,
                key,
                &[("owner", &"old"), ("balance", &0_i64)],
                token(9),
            )
            .await,
        9,
        10,
    );
    assert_eq!(row(&db, id).await, Some(("A".into(), 11, 10)));

    let updated = fence
        .update(
            &db,
            key,
            &[("owner", &"B"), ("balance", &20_i64)],
            token(12),
        )
        .await
        .expect("a higher token");
    assert_eq!(updated, 1);
    stale(
        fence
            .update(
                &db,
                key,
                &[("owner", &"old"), ("balance", &0_i64)],
                token(11),
            )
            .await,
        11,
        12,
    );
    stale(
        fence
            .upsert(
                &db,
                key,
                &[("owner", &"old"), ("balance", &0_i64)],
                token(11),
            )
            .await,
        11,
        12,
    );
    assert_eq!(row(&db, id).await, Some(("B".into(), 20, 12)));
    let none = fence
        .update(
            &db,
            &[("id", &8_i64)],
            &[("owner", &"B"), ("balance", &1_i64)],
            token(12),
        )
        .await
        .expect("no such row");
    assert_eq!(none, 0, "an update inserts nothing");
    assert_eq!(row(&db, 8).await, None);

    // The trigger, not the helper, holds the rule: a statement of the application's own that
    // lowers the token is refused too.
    let by_hand = db
        .execute(
            "UPDATE accounts SET owner = 'by hand', fencing_token = 3 WHERE id = 7",
            &[],
        )
        .await
        .map_err(|e| classify(e, token(3)));
    stale(by_hand, 3, 12);
    assert_eq!(row(&db, id).await, Some(("B".into(), 20, 12)));

    // Installed again (another instance starting), nothing changes.
    fence.install(&db).await.expect("install again");
    assert_eq!(row(&db, id).await, Some(("B".into(), 20, 12)));
}

/// Names are the application's and always quoted: a table and column whose names need
/// quoting (spaces, quotes, capitals, SQL) are fenced like any other, and nothing else runs.
#[tokio::test]
async fn names_that_need_quoting_are_fenced_as_they_are() {
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    let table = r#"Odd "table"; DROP TABLE keep; --"#;
    let column = "fencing 'token'";
    db.batch_execute(
        r#"CREATE SCHEMA "my schema";
           CREATE TABLE keep (x int);
           CREATE TABLE "my schema"."Odd ""table""; DROP TABLE keep; --" ("Key" text PRIMARY KEY, v text)"#,
    )
    .await
    .expect("create");
    let fence = Fence::new(table, column).in_schema("my schema");
    fence.install(&db).await.expect("install");
    let k = "k";
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("Key", &k)];
    fence
        .upsert(&db, key, &[("v", &"new")], token(5))
        .await
        .expect("write");
    stale(
        fence.upsert(&db, key, &[("v", &"old")], token(4)).await,
        4,
        5,
    );
    let v: String = db
        .query_one(
            r#"SELECT v FROM "my schema"."Odd ""table""; DROP TABLE keep; --""#,
            &[],
        )
        .await
        .expect("read")
        .get(0);
    assert_eq!(v, "new");
    db.execute("SELECT * FROM keep", &[])
        .await
        .expect("no name ran as SQL");
}

/// The database's own failures are `Error::Store`, never a refusal: a missing table, and the
/// application's own CHECK constraint, which PostgreSQL reports with the same SQLSTATE as the
/// fence's refusal (`23514`). Installing on a missing table fails the same way.
#[tokio::test]
async fn a_database_failure_is_a_store_error_not_a_refusal() {
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    let fence = accounts(&db).await;
    let id = 1_i64;
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &id)];
    fence
        .upsert(&db, key, &[("owner", &"A"), ("balance", &5_i64)], token(1))
        .await
        .expect("write");

    let negative = fence
        .upsert(&db, key, &[("owner", &"A"), ("balance", &-1_i64)], token(2))
        .await;
    let Err(Error::Store { source }) = &negative else {
        panic!("the application's CHECK is not a refusal: {negative:?}");
    };
    let pg_error = source
        .downcast_ref::<tokio_postgres::Error>()
        .expect("the driver's error");
    assert_eq!(
        pg_error.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
    let e = negative.unwrap_err();
    assert!(!e.is_retryable() && !e.is_transient(), "{e}");
    assert_eq!(e.http_status(), 500);
    assert!(e.to_string().starts_with("the fenced store failed"), "{e}");

    let missing = Fence::new("no_such_table", "fencing_token");
    let write = missing.upsert(&db, key, &[("owner", &"A")], token(3)).await;
    assert!(matches!(write, Err(Error::Store { .. })), "{write:?}");
    let install = missing.install(&db).await;
    assert!(matches!(install, Err(Error::Store { .. })), "{install:?}");

    // A token above what a bigint holds never reaches the database.
    let huge = fence
        .upsert(&db, key, &[("owner", &"A")], token(u64::MAX))
        .await;
    assert!(matches!(huge, Err(Error::InvalidConfig { .. })), "{huge:?}");
    assert_eq!(row(&db, id).await, Some(("A".into(), 5, 1)));

    // A connection that is gone.
    drop(pg);
    let down = fence.upsert(&db, key, &[("owner", &"A")], token(4)).await;
    assert!(matches!(down, Err(Error::Store { .. })), "{down:?}");
}

#[distributed_lock(key = "account:<id>", client = locks, fencing = true)]
async fn set_balance(
    locks: &Client,
    db: &tokio_postgres::Client,
    fence: &Fence,
    id: i64,
    balance: i64,
) -> Result<(), Error> {
    fence
        .upsert(
            db,
            &[("id", &id)],
            &[("owner", &"fn"), ("balance", &balance)],
            distlock::lease(),
        )
        .await
}

/// A locked fn with `fencing = true` upserts in one line, passing the lease it sees; a token
/// minted before the call is refused afterwards.
#[tokio::test]
async fn a_locked_fn_upserts_fenced_passing_its_lease() {
    let server = RedisServer::start();
    let locks = crate::common::client(&server).await;
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    let fence = accounts(&db).await;
    let earlier = locks
        .lock("account:3")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let stale_token = earlier.fencing_token().expect("fenced");
    earlier.release().await.expect("release");

    set_balance(&locks, &db, &fence, 3, 30)
        .await
        .expect("written");
    let (owner, balance, written) = row(&db, 3).await.expect("the row");
    assert_eq!((owner.as_str(), balance), ("fn", 30));
    assert!(written > i64::try_from(stale_token).unwrap());
    let late = fence
        .update(&db, &[("id", &3_i64)], &[("balance", &0_i64)], stale_token)
        .await;
    stale(late, stale_token, FencingToken::new(written as u64));
    assert_eq!(row(&db, 3).await.map(|r| r.1), Some(30));
}

/// The run of `suite/fenced.rs` with the row in PostgreSQL: A takes the lock or the lead
/// (ttl 1 s) through a proxy that freezes until A's guard reports its lease lost; B takes the
/// lock and writes its value; the proxy thaws and A writes with its old token, fenced or as a
/// plain `UPDATE` that does not set the token. Returns the owner the row is left with.
async fn stalled_holder_writes(kind: Kind, fenced_write: bool) -> String {
    let server = RedisServer::start();
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    let fence = accounts(&db).await;
    let name = "account:42";
    let id = 42_i64;
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &id)];

    let run = StalledHolder::take(&server, kind, name).await;
    let token_a = run.token_a;
    fence
        .upsert(&db, key, &[("owner", &"A"), ("balance", &1_i64)], &run.a)
        .await
        .expect("A writes while it holds the lock");
    let (b, token_b) = run.successor_takes_over().await;
    fence
        .upsert(&db, key, &[("owner", &"B"), ("balance", &2_i64)], &b)
        .await
        .expect("B writes");
    run.proxy.thaw();

    if fenced_write {
        let late = fence
            .update(&db, key, &[("owner", &"A"), ("balance", &3_i64)], &run.a)
            .await;
        stale(late, token_a, token_b);
    } else {
        db.execute(
            "UPDATE accounts SET owner = 'A', balance = 3 WHERE id = 42",
            &[],
        )
        .await
        .expect("an unfenced write is not refused");
    }
    drop(run);
    b.release().await;
    let (owner, _, written) = row(&db, id).await.expect("the row");
    assert_eq!(
        written,
        i64::try_from(token_b).unwrap(),
        "no write lowered the token"
    );
    owner
}

/// End to end: the stalled holder's late write is refused by the table, and B's row stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_late_write_is_refused_by_postgres() {
    assert_eq!(stalled_holder_writes(Kind::Lock, true).await, "B");
}

/// The control: the same run with a plain `UPDATE` (no token) loses B's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_stalled_holder_overwrites_its_successor() {
    assert_eq!(stalled_holder_writes(Kind::Lock, false).await, "A");
}

/// End to end for leaders: a leader frozen past its lease updates the row with its term once
/// it resumes; the table refuses it, and the next leader's row stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leaders_late_write_is_refused_by_postgres() {
    assert_eq!(stalled_holder_writes(Kind::Leader, true).await, "B");
}

/// The control for leaders: a plain `UPDATE` loses the next leader's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_stalled_leader_overwrites_the_next_leaders_row() {
    assert_eq!(stalled_holder_writes(Kind::Leader, false).await, "A");
}
