//! S13: what a fenced write costs against the same write unfenced, on each store distlock
//! fences. Redis: `FencedRedis::set` and `hincr_by` (one script each: the token compared
//! with the key's mark, the mark raised, the write) against plain `SET` and `HINCRBY`.
//! PostgreSQL: `fenced::postgres::Fence::upsert` and `update` (the statement writes the token
//! too, and the table's trigger compares it with the row's) against the same statement on a
//! table without the fence. The fenced figures are in the `distlock fenced` column, the plain
//! ones in `limit` (the bare write is the floor, as the bare lock is elsewhere).
//!
//! One task writes; the eight series (4 writes, fenced and plain) take turns of `SLICE`
//! writes in an order drawn afresh every pass, so noise lands on all alike. The fenced writes
//! carry the token of one fenced lock held for the round (the same holder writing again, as
//! within one tenure); the lock is taken before the turns and released after them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use distlock::fenced::postgres::Fence;
use distlock::fenced::FencedRedis;
use distlock::FencingToken;
use distlock_testkit::{PostgresServer, RedisServer};
use tokio_postgres::types::ToSql;

use crate::columns::Kind;
use crate::cost::Meter;
use crate::results::Results;
use crate::scenarios::{micros, percentile, Metrics, Scenario, TurnOrder, SLICE_CYCLES};

mod table;
pub use table::{rows, DEFINITIONS, NOTES};

/// Writes per turn of a series: S1's turn.
const SLICE: usize = SLICE_CYCLES;
/// The round's fenced lock: longer than any round, and no watchdog, so no renewal reaches
/// the server during a turn and counts as a write's command.
const LOCK_TTL: Duration = Duration::from_secs(300);
/// PostgreSQL's settings for S13: `pg_stat_statements` counts the statements the server runs,
/// the trigger's own included (`track = all`).
pub const POSTGRES_SETTINGS: &[&str] = &[
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=all",
];
/// The value of a `SET`: as long as a small JSON document.
const VALUE: &str = "{\"owner\":\"worker-7\",\"balance\":100}";

/// The four writes, each measured fenced and plain.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    RedisSet,
    RedisHincrBy,
    PgUpsert,
    PgUpdate,
}

impl Write {
    const ALL: [Write; 4] = [
        Write::RedisSet,
        Write::RedisHincrBy,
        Write::PgUpsert,
        Write::PgUpdate,
    ];

    /// Short name, in keys and messages.
    fn id(self) -> &'static str {
        match self {
            Write::RedisSet => "set",
            Write::RedisHincrBy => "hincrby",
            Write::PgUpsert => "upsert",
            Write::PgUpdate => "update",
        }
    }

    fn redis(self) -> bool {
        matches!(self, Write::RedisSet | Write::RedisHincrBy)
    }

    /// The names of this write's figures (a cell's figures are keyed by name alone).
    fn names(self) -> Names {
        match self {
            Write::RedisSet => Names {
                p50: "set_p50_us",
                p99: "set_p99_us",
                ratio: "set_p50_x_plain",
                server_cpu: "set_server_cpu_us",
                commands: "set_cmds",
                bytes: Some("set_in_bytes"),
            },
            Write::RedisHincrBy => Names {
                p50: "hincrby_p50_us",
                p99: "hincrby_p99_us",
                ratio: "hincrby_p50_x_plain",
                server_cpu: "hincrby_server_cpu_us",
                commands: "hincrby_cmds",
                bytes: Some("hincrby_in_bytes"),
            },
            Write::PgUpsert => Names {
                p50: "upsert_p50_us",
                p99: "upsert_p99_us",
                ratio: "upsert_p50_x_plain",
                server_cpu: "upsert_exec_us",
                commands: "upsert_statements",
                bytes: None,
            },
            Write::PgUpdate => Names {
                p50: "update_p50_us",
                p99: "update_p99_us",
                ratio: "update_p50_x_plain",
                server_cpu: "update_exec_us",
                commands: "update_statements",
                bytes: None,
            },
        }
    }
}

struct Names {
    p50: &'static str,
    p99: &'static str,
    /// Fenced p50 over plain p50, in one round.
    ratio: &'static str,
    /// redis-server CPU, or PostgreSQL execution time.
    server_cpu: &'static str,
    /// Redis: commands (Lua calls included); PostgreSQL: statements (the trigger's included).
    commands: &'static str,
    bytes: Option<&'static str>,
}

/// What S13 writes to, connected once for all rounds: the single node, and the private
/// PostgreSQL (or why there is none).
pub struct Stores {
    locks: distlock::Client,
    /// One connection for both: the fenced writes go through `fenced` (a clone of it).
    redis: redis::aio::MultiplexedConnection,
    fenced: FencedRedis<redis::aio::MultiplexedConnection>,
    url: String,
    postgres: Result<Postgres, String>,
}

struct Postgres {
    db: tokio_postgres::Client,
    /// A second connection for the readings, so they never queue behind a write.
    meter: tokio_postgres::Client,
    fence: Fence,
}

/// Connects S13's stores: the single node, and `postgres` (started by `main` on its own
/// thread with `POSTGRES_SETTINGS`, or why not) with a fenced and a plain table.
pub async fn connect(
    node: &RedisServer,
    postgres: Option<&Result<PostgresServer, String>>,
) -> Result<Stores, String> {
    let failed = |e: &dyn std::fmt::Display| format!("connect failed: {e}");
    let locks = distlock::Client::connect(&node.url())
        .await
        .map_err(|e| failed(&e))?;
    let redis = redis::Client::open(node.url())
        .map_err(|e| failed(&e))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| failed(&e))?;
    let postgres = match postgres {
        Some(Ok(server)) => connect_postgres(server).await,
        Some(Err(why)) => Err(why.clone()),
        None => Err("PostgreSQL not started".to_owned()),
    };
    if let Err(why) = &postgres {
        eprintln!("S13: no PostgreSQL figures: {why}");
    }
    Ok(Stores {
        locks,
        fenced: FencedRedis::new(redis.clone()),
        redis,
        url: node.url(),
        postgres,
    })
}

async fn connect_postgres(server: &PostgresServer) -> Result<Postgres, String> {
    let sql = |e: tokio_postgres::Error| format!("PostgreSQL: {e}");
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (db, connection) = tokio_postgres::connect(&server.conninfo(), tokio_postgres::NoTls)
            .await
            .map_err(sql)?;
        tokio::spawn(connection);
        clients.push(db);
    }
    let (meter, db) = (clients.remove(1), clients.remove(0));
    // The application's table twice: one gets the fence, the other stays as it was.
    db.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
         CREATE TABLE s13_fenced (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
         CREATE TABLE s13_plain (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);",
    )
    .await
    .map_err(sql)?;
    let fence = Fence::new("s13_fenced", "fencing_token");
    fence
        .install(&db)
        .await
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    Ok(Postgres { db, meter, fence })
}

/// Why `kind` has no S13 figure, if it has none.
fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::DistlockFenced | Kind::Limit => None,
        Kind::Distlock => Some("the fenced writes are in the distlock fenced column"),
        Kind::Rslock | Kind::Redlock | Kind::DlRedis => Some("no fenced writes"),
    }
}

/// One series, a write fenced or plain, and what its turns measured.
struct Series {
    write: Write,
    fenced: bool,
    /// The Redis key, or the PostgreSQL row's id.
    key: String,
    row: i64,
    samples: Vec<Duration>,
    /// Summed over the turns: `cmds_per_cycle` (Redis commands or PostgreSQL statements),
    /// `server_cpu_us_per_cycle` (redis-server's CPU, or PostgreSQL's execution time), and for
    /// Redis the cost meter's other figures.
    costs: Metrics,
    failed: Option<String>,
}

/// One round of S13: every series `writes` times, in turns of `SLICE`.
pub async fn round(stores: &mut Stores, writes: usize, round: usize, results: &mut Results) {
    let started = Instant::now();
    for kind in Kind::ALL {
        if let Some(why) = skips(kind) {
            results.cell(Scenario::S13, kind).na = Some(why.to_owned());
        }
    }
    let name = format!("bench:S13:r{round}");
    let taken = stores
        .locks
        .lock(&name)
        .ttl(LOCK_TTL)
        .watchdog(false)
        .fencing(true)
        .acquire()
        .await;
    let guard = match taken {
        Ok(guard) => guard,
        Err(e) => return fail(results, format!("the round's fenced lock: {e}")),
    };
    let Some(token) = guard.fencing_token() else {
        return fail(results, "the round's fenced lock has no token".to_owned());
    };
    let row = round as i64;
    let mut series: Vec<Series> = Write::ALL
        .into_iter()
        .filter(|w| w.redis() || stores.postgres.is_ok())
        .flat_map(|write| [(write, true), (write, false)])
        .map(|(write, fenced)| Series {
            write,
            fenced,
            key: format!(
                "{name}:{}:{}",
                write.id(),
                if fenced { "fenced" } else { "plain" }
            ),
            row,
            samples: Vec::with_capacity(writes),
            costs: Metrics::new(),
            failed: None,
        })
        .collect();
    if let Ok(pg) = &stores.postgres {
        if let Err(e) = insert_rows(pg, row).await {
            return fail(results, e);
        }
    }
    let mut meter = match Meter::connect(&stores.url).await {
        Ok(meter) => Some(meter),
        Err(e) => {
            eprintln!("S13 cost meter: {e}; no Redis cost rows this round");
            None
        }
    };
    let mut order = TurnOrder::new(series.len());
    for start in (0..writes).step_by(SLICE) {
        let turn = SLICE.min(writes - start);
        for i in order.next_pass() {
            let s = &mut series[i];
            if s.failed.is_none() {
                if let Err(e) = measured_turn(stores, meter.as_mut(), s, turn, token).await {
                    s.failed = Some(e);
                }
            }
        }
    }
    if let Err(e) = guard.release().await {
        eprintln!("S13: releasing the round's lock: {e}");
    }
    record(series, meter.is_some(), results);
    eprintln!("  S13  {:>6.2} s", started.elapsed().as_secs_f64());
}

fn fail(results: &mut Results, e: String) {
    eprintln!("S13: {e}");
    for kind in [Kind::DistlockFenced, Kind::Limit] {
        results.cell(Scenario::S13, kind).errors.push(e.clone());
    }
}

/// The round's row in both tables, so every write of the round updates (none inserts), and
/// the fenced row's token starts at 0.
async fn insert_rows(pg: &Postgres, row: i64) -> Result<(), String> {
    for table in ["s13_fenced", "s13_plain"] {
        let insert = format!("INSERT INTO {table} (id, owner, balance) VALUES ($1, 'worker-7', 0)");
        pg.db
            .execute(&insert, &[&row])
            .await
            .map_err(|e| format!("PostgreSQL: {e}"))?;
    }
    Ok(())
}

/// One turn of `s`, its costs read around it: the Redis cost meter's figures, or the
/// statements PostgreSQL ran and the time it took to execute them.
async fn measured_turn(
    stores: &mut Stores,
    meter: Option<&mut Meter>,
    s: &mut Series,
    writes: usize,
    token: FencingToken,
) -> Result<(), String> {
    let mut costs = Metrics::new();
    if s.write.redis() {
        let mut meter = meter;
        if let Some(m) = meter.as_deref_mut() {
            m.start().await?;
        }
        turn(stores, s, writes, token).await?;
        if let Some(m) = meter {
            m.stop().await?.per_cycle(1, &mut costs);
        }
    } else {
        let pg = stores.postgres.as_ref().map_err(Clone::clone)?;
        let before = statements(pg).await?;
        turn(stores, s, writes, token).await?;
        let pg = stores.postgres.as_ref().map_err(Clone::clone)?;
        let after = statements(pg).await?;
        costs.insert("cmds_per_cycle", (after.0 - before.0) as f64);
        costs.insert("server_cpu_us_per_cycle", (after.1 - before.1) * 1e3);
    }
    for (name, v) in costs {
        *s.costs.entry(name).or_insert(0.0) += v;
    }
    Ok(())
}

/// Statements PostgreSQL has run so far, nested ones included, and the milliseconds the
/// top-level ones took to execute (theirs include the nested ones'); the readings' own are
/// left out (they name the view).
async fn statements(pg: &Postgres) -> Result<(i64, f64), String> {
    let row = pg
        .meter
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint, \
                    coalesce(sum(total_exec_time) FILTER (WHERE toplevel), 0)::float8 \
             FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .await
        .map_err(|e| format!("pg_stat_statements: {e}"))?;
    Ok((row.get(0), row.get(1)))
}

/// `writes` writes of `s`, each timed.
async fn turn(
    stores: &mut Stores,
    s: &mut Series,
    writes: usize,
    token: FencingToken,
) -> Result<(), String> {
    let shown = |e: &dyn std::fmt::Display| e.to_string();
    for _ in 0..writes {
        let balance = s.samples.len() as i64;
        let started = Instant::now();
        match (s.write, s.fenced) {
            (Write::RedisSet, true) => {
                let set = stores.fenced.set(&s.key, VALUE, token);
                set.await.map_err(|e| shown(&e))?;
            }
            (Write::RedisSet, false) => {
                let set = redis::cmd("SET").arg(&s.key).arg(VALUE).clone();
                let reply = set.query_async::<()>(&mut stores.redis).await;
                reply.map_err(|e| shown(&e))?;
            }
            (Write::RedisHincrBy, true) => {
                let incr = stores.fenced.hincr_by(&s.key, "balance", 1, token);
                incr.await.map_err(|e| shown(&e))?;
            }
            (Write::RedisHincrBy, false) => {
                let incr = redis::cmd("HINCRBY")
                    .arg(&s.key)
                    .arg("balance")
                    .arg(1)
                    .clone();
                let reply = incr.query_async::<i64>(&mut stores.redis).await;
                reply.map_err(|e| shown(&e))?;
            }
            (write, fenced) => {
                let pg = stores.postgres.as_ref().map_err(Clone::clone)?;
                postgres_write(pg, write, fenced, s.row, balance, token).await?;
            }
        }
        s.samples.push(started.elapsed());
    }
    Ok(())
}

/// The plain statements: what the fence's `upsert` and `update` send, without the token.
const PLAIN_UPSERT: &str = "INSERT INTO s13_plain (id, owner, balance) VALUES ($1, $2, $3) \
     ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, balance = EXCLUDED.balance";
const PLAIN_UPDATE: &str = "UPDATE s13_plain SET owner = $1, balance = $2 WHERE id = $3";

/// One PostgreSQL write of `row`, setting its balance to `balance`.
async fn postgres_write(
    pg: &Postgres,
    write: Write,
    fenced: bool,
    row: i64,
    balance: i64,
    token: FencingToken,
) -> Result<(), String> {
    let owner = "worker-7";
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &row)];
    let values: &[(&str, &(dyn ToSql + Sync))] = &[("owner", &owner), ("balance", &balance)];
    let shown = |e: &dyn std::fmt::Display| e.to_string();
    let updated = match (write, fenced) {
        (Write::PgUpsert, true) => {
            let upsert = pg.fence.upsert(&pg.db, key, values, token);
            upsert.await.map(|()| 1).map_err(|e| shown(&e))?
        }
        (Write::PgUpdate, true) => {
            let update = pg.fence.update(&pg.db, key, values, token);
            update.await.map_err(|e| shown(&e))?
        }
        (Write::PgUpsert, false) => {
            let params: [&(dyn ToSql + Sync); 3] = [&row, &owner, &balance];
            let upsert = pg.db.execute(PLAIN_UPSERT, &params);
            upsert.await.map_err(|e| shown(&e))?
        }
        (Write::PgUpdate, false) => {
            let params: [&(dyn ToSql + Sync); 3] = [&owner, &balance, &row];
            let update = pg.db.execute(PLAIN_UPDATE, &params);
            update.await.map_err(|e| shown(&e))?
        }
        _ => return Err("not a PostgreSQL write".to_owned()),
    };
    match updated {
        1 => Ok(()),
        n => Err(format!("{n} rows written, not 1")),
    }
}

/// The series' round into the two cells: the latencies' percentiles, the costs per write,
/// and the fenced p50 over the plain one.
fn record(series: Vec<Series>, metered: bool, results: &mut Results) {
    let mut p50s: BTreeMap<(&'static str, bool), f64> = BTreeMap::new();
    let mut figures: BTreeMap<bool, Metrics> = BTreeMap::new();
    for mut s in series {
        let kind = if s.fenced {
            Kind::DistlockFenced
        } else {
            Kind::Limit
        };
        let names = s.write.names();
        if let Some(e) = s.failed {
            eprintln!("S13 {} {}: {e}", kind.name(), s.write.id());
            results.cell(Scenario::S13, kind).errors.push(e);
            continue;
        }
        s.samples.sort_unstable();
        let p50 = micros(percentile(&s.samples, 0.50));
        p50s.insert((names.ratio, s.fenced), p50);
        let n = s.samples.len().max(1) as f64;
        let m = figures.entry(s.fenced).or_default();
        m.insert(names.p50, p50);
        m.insert(names.p99, micros(percentile(&s.samples, 0.99)));
        let redis_metered = metered || !s.write.redis();
        let cost = |name: &str| s.costs.get(name).map(|v| v / n);
        if let (true, Some(v)) = (redis_metered, cost("cmds_per_cycle")) {
            m.insert(names.commands, v);
        }
        if let (true, Some(v)) = (redis_metered, cost("server_cpu_us_per_cycle")) {
            m.insert(names.server_cpu, v);
        }
        if let (Some(name), true, Some(v)) = (names.bytes, metered, cost("in_bytes_per_cycle")) {
            m.insert(name, v);
        }
    }
    for write in Write::ALL {
        let ratio = write.names().ratio;
        if let (Some(fenced), Some(plain)) = (p50s.get(&(ratio, true)), p50s.get(&(ratio, false))) {
            figures
                .entry(true)
                .or_default()
                .insert(ratio, fenced / plain);
            figures.entry(false).or_default().insert(ratio, 1.0);
        }
    }
    for (fenced, metrics) in figures {
        let kind = if fenced {
            Kind::DistlockFenced
        } else {
            Kind::Limit
        };
        results.cell(Scenario::S13, kind).rounds.push(metrics);
    }
}
