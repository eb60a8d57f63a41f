//! S13's rows of the table, its definitions and its columns' notes.

use crate::results::{row, Fmt, RowSpec};

/// The rows of one write (`$series`: its figures' prefix): its latency and its p50 over the
/// plain write's, then what it cost the store, each `(label, figure, format)`.
macro_rules! write_rows {
    ($write:literal, $series:literal, $(($what:literal, $figure:literal, $fmt:ident)),*) => {
        [
            row(
                "S13",
                concat!($write, ": p50 µs / write"),
                concat!($series, "_p50_us"),
                Fmt::Micros,
            ),
            row(
                "S13",
                concat!($write, ": p99 µs / write"),
                concat!($series, "_p99_us"),
                Fmt::Micros,
            ),
            row(
                "S13",
                concat!($write, ": p50 ÷ plain's"),
                concat!($series, "_p50_x_plain"),
                Fmt::Ratio,
            ),
            $(row("S13", concat!($write, ": ", $what), concat!($series, "_", $figure), Fmt::$fmt),)*
        ]
    };
}

/// A Redis write's rows: its costs as `cost::Meter` reads them.
macro_rules! redis_rows {
    ($write:literal, $series:literal) => {
        write_rows!(
            $write,
            $series,
            (
                "server commands / write (commandstats, incl. Lua calls)",
                "cmds",
                Ratio
            ),
            (
                "redis-server CPU µs / write (INFO cpu)",
                "server_cpu_us",
                Ratio
            ),
            ("bytes sent to the server / write", "in_bytes", Count)
        )
    };
}

/// A PostgreSQL write's rows: its costs as `pg_stat_statements` gives them.
macro_rules! postgres_rows {
    ($write:literal, $series:literal) => {
        write_rows!(
            $write,
            $series,
            (
                "statements / write (pg_stat_statements, incl. the trigger's)",
                "statements",
                Ratio
            ),
            (
                "execution µs / write (pg_stat_statements)",
                "exec_us",
                Ratio
            )
        )
    };
}

const SET_ROWS: [RowSpec; 6] = redis_rows!("Redis SET", "set");
const HINCRBY_ROWS: [RowSpec; 6] = redis_rows!("Redis HINCRBY", "hincrby");
const UPSERT_ROWS: [RowSpec; 5] = postgres_rows!("PostgreSQL upsert", "upsert");
const UPDATE_ROWS: [RowSpec; 5] = postgres_rows!("PostgreSQL update", "update");

/// S13's rows of the table.
pub fn rows() -> impl Iterator<Item = &'static RowSpec> {
    SET_ROWS
        .iter()
        .chain(&HINCRBY_ROWS)
        .chain(&UPSERT_ROWS)
        .chain(&UPDATE_ROWS)
}

pub const DEFINITIONS: &[&str] = &[
    "S13: one task writes; eight series (Redis SET and HINCRBY, PostgreSQL upsert and update, each fenced and plain) of S1's count of writes per round (2,000; 500 with --quick) take turns of 50 writes in an order drawn afresh for every pass. The fenced writes carry the token of one fenced lock (`.fencing(true)`, ttl 300 s, no watchdog, so no renewal lands in a turn) taken before the round's turns and released after them: every write of a round is the same holder writing again, accepted. p50/p99: one write, from the call to its return, nearest-rank per round; ÷ plain's: the fenced p50 over the plain p50 of the same round. Redis costs: read around every turn as S1's cost rows are (`INFO commandstats`, `INFO cpu`, total_net_input_bytes, the readings' own cost taken off), summed over the series' turns and divided by its writes. PostgreSQL: statements are `pg_stat_statements` calls (`track = all`: the trigger's own query counts, as Redis counts Lua calls) read on a second connection around every turn; execution µs is their `total_exec_time` (the top-level statements', which holds the trigger's; parsing, planning and the protocol not included), the server's own clock, where its CPU time from /proc would only count 10 ms ticks. The private PostgreSQL (the kit's, `fsync` and `synchronous_commit` off) runs with `pg_stat_statements` loaded for every series alike.",
];

/// How S13's two columns write, printed under the table.
pub const NOTES: &[&str] = &[
    "S13 distlock fenced: Redis through one `FencedRedis::new(conn)` (`set(key, value, token)`, `hincr_by(key, \"balance\", 1, token)`: one EVALSHA of `fenced/write.lua` each, which reads the key's mark, writes, reads the key's PTTL and sets the mark with its lifetime); PostgreSQL through `Fence::new(\"s13_fenced\", \"fencing_token\")`, installed once (the token column and the trigger), `fence.upsert(&db, &[(\"id\", ..)], &[(\"owner\", ..), (\"balance\", ..)], token)` and `fence.update(..)` with the same arguments, each one `execute` of its statement (tokio-postgres prepares a statement given as text before it runs it: two round trips).",
    "S13 limit (plain): the same writes without a token, on the same connections: `SET key value` and `HINCRBY key balance 1` with redis-rs on the same `MultiplexedConnection`; on PostgreSQL `INSERT INTO s13_plain (id, owner, balance) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, balance = EXCLUDED.balance` and `UPDATE s13_plain SET owner = $1, balance = $2 WHERE id = $3` through `execute` with the text (prepared each time, as the fence's), on a table like `s13_fenced` without the fence. Both tables hold one row per round, inserted before the turns, so every write updates it.",
];
