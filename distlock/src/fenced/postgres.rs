//! PostgreSQL writes the table fences (feature `postgres`): a row keeps the highest fencing
//! token written to it in a column of its own, and a trigger refuses any update that would
//! lower it, so a holder whose lease ended while it stalled cannot overwrite what its
//! successor wrote.
//!
//! Two calls: [`Fence::install`] once (at start-up or in a migration: [`Fence::schema_sql`]),
//! which adds the token column and the trigger to the application's own table, and
//! [`Fence::upsert`] or [`Fence::update`] for each fenced write. A refusal is
//! [`Error::StaleToken`] with the row's token; any failure of the database is
//! [`Error::Store`], with the driver's error as its source.
//!
//! ```no_run
//! # async fn demo(locks: distlock::Client, db: tokio_postgres::Client) -> Result<(), distlock::Error> {
//! use distlock::fenced::postgres::Fence;
//!
//! // `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)`, the
//! // application's own; the fence adds `fencing_token bigint NOT NULL DEFAULT 0` and a trigger.
//! let fence = Fence::new("accounts", "fencing_token");
//! fence.install(&db).await?;
//!
//! let guard = locks.lock("account:42").fencing(true).acquire().await?;
//! // Refused with `Error::StaleToken` if a newer holder of the lock wrote the row meanwhile.
//! fence
//!     .upsert(&db, &[("id", &42_i64)], &[("balance", &100_i64)], &guard)
//!     .await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The rule, where it lives
//!
//! The trigger (one PL/pgSQL function, `distlock_refuse_stale_token`, shared by every fenced
//! table; the column's name is the trigger's argument) compares the token an update writes
//! with the row's, under the row's lock: lower is refused (SQLSTATE `23514`,
//! `check_violation`, constraint name `distlock_fence`), equal or higher is written. The
//! fenced writes here only put the token in the row; the trigger decides. So every other
//! statement that writes the token column is fenced too (a stale `UPDATE` by hand is
//! refused), while a statement that does not set the column at all keeps the row's token
//! and is **not** fenced: write through [`Fence`], or set the column.
//!
//! A refusal is an error inside PostgreSQL: the statement changed nothing, and a transaction
//! it ran in is aborted (roll it back), which is what a stale holder's other writes in it
//! deserve. [`classify`] makes the same distinction for statements of your own.
//!
//! # The mark's lifetime
//!
//! A row's token column is its mark, kept as long as the row: a deleted row forgets it, and a
//! stalled holder's late upsert could insert it again. Delete under fencing with a fenced
//! update (a `deleted` flag, a tombstone) rather than `DELETE`. An insert of a new row is
//! never refused: there is nothing it could overwrite.
//!
//! # The driver
//!
//! [`tokio-postgres`](tokio_postgres), not `sqlx`: it is what the pools most services use are
//! built on (`deadpool-postgres`, `bb8-postgres`: pass the pooled `Client`, `&**conn` with
//! deadpool), it runs on Tokio as distlock
//! does, it takes a [`Client`](tokio_postgres::Client) or a
//! [`Transaction`](tokio_postgres::Transaction) alike ([`GenericClient`]), and it adds no
//! compile-time query checking, macros or database connection at build time: the statements
//! here are built at run time from the application's table and column names. The feature
//! enables no TLS and no connecting of its own: the application connects.

use std::fmt::Write as _;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use crate::error::Error;
use crate::fenced::TokenSource;
use crate::token::FencingToken;

/// The name of the trigger function, in the table's schema (or the first of `search_path`).
const FUNCTION: &str = "distlock_refuse_stale_token";

/// The constraint name a refusal carries (with SQLSTATE `23514`, `check_violation`).
pub const REFUSAL_CONSTRAINT: &str = "distlock_fence";

/// The trigger's name on a table is this followed by the token column's name.
const TRIGGER_PREFIX: &str = "distlock_fence_";

/// PostgreSQL's longest identifier (`NAMEDATALEN - 1` bytes); longer ones are truncated.
const MAX_IDENTIFIER: usize = 63;

/// Serializes concurrent installs (two instances starting at once would race on
/// `CREATE OR REPLACE FUNCTION`): the key of a transaction-scoped advisory lock, "dlfence1".
const INSTALL_LOCK: i64 = 0x646c_6665_6e63_6531;

/// The function the trigger runs. `TG_ARGV[0]` is the token column; `%I` quotes it.
const FUNCTION_BODY: &str = r#"RETURNS trigger LANGUAGE plpgsql AS $distlock$
DECLARE
    written bigint;
    highest bigint;
BEGIN
    EXECUTE format('SELECT ($1).%1$I::bigint, ($2).%1$I::bigint', TG_ARGV[0])
        INTO written, highest USING NEW, OLD;
    IF written < highest OR (written IS NULL AND highest IS NOT NULL) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'distlock_fence',
            MESSAGE = format('stale fencing token %s for %I.%I: %s was written already',
                coalesce(written::text, 'NULL'), TG_TABLE_SCHEMA, TG_TABLE_NAME, highest),
            DETAIL = format('token=%s highest=%s', written, highest),
            HINT = 'a newer holder of the lock wrote; take the lock again to write';
    END IF;
    RETURN NEW;
END
$distlock$"#;

/// A table whose rows carry a fencing token that never goes down: the table's name (and
/// schema), the token column's name. Names are taken as PostgreSQL stores them (a table
/// created as `CREATE TABLE Accounts` is `accounts`) and always quoted.
///
/// The table is the application's: any columns and keys, as long as [`upsert`](Self::upsert)'s
/// key columns have a unique index (its `ON CONFLICT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    schema: Option<String>,
    table: String,
    column: String,
}

impl Fence {
    /// The fence of `table` (in the first schema of `search_path` that has it), whose token
    /// is kept in `column`.
    pub fn new(table: impl Into<String>, column: impl Into<String>) -> Fence {
        Fence {
            schema: None,
            table: table.into(),
            column: column.into(),
        }
    }

    /// The table is in `schema` (the trigger function is created there too).
    pub fn in_schema(mut self, schema: impl Into<String>) -> Fence {
        self.schema = Some(schema.into());
        self
    }

    /// The statements [`install`](Self::install) runs, for a migration tool: the trigger
    /// function (created or replaced), the token column (`bigint NOT NULL DEFAULT 0`, added
    /// if missing; an existing column is left as it is) and the trigger on the table (created
    /// or replaced; PostgreSQL 14 or later). Idempotent.
    pub fn schema_sql(&self) -> Result<String, Error> {
        let table = self.table()?;
        let column = ident(&self.column)?;
        let function = self.function()?;
        let trigger = ident(&trigger_name(&self.column))?;
        let argument = literal(&self.column);
        let mut sql = String::new();
        let _ = writeln!(sql, "SELECT pg_advisory_xact_lock({INSTALL_LOCK});");
        let _ = writeln!(
            sql,
            "CREATE OR REPLACE FUNCTION {function}() {FUNCTION_BODY};"
        );
        let _ = writeln!(
            sql,
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} bigint NOT NULL DEFAULT 0;"
        );
        let _ = writeln!(
            sql,
            "CREATE OR REPLACE TRIGGER {trigger} BEFORE UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION {function}({argument});"
        );
        Ok(sql)
    }

    /// Installs the fence on the table (the statements of [`schema_sql`](Self::schema_sql),
    /// in one transaction; concurrent installs wait for each other). Run it at start-up or
    /// in a migration; again is harmless. It needs the rights of the table's owner (to add the
    /// column and the trigger) and `CREATE` on the schema (for the function).
    pub async fn install(&self, db: &(impl GenericClient + Sync)) -> Result<(), Error> {
        let sql = self.schema_sql()?;
        db.batch_execute(&sql).await.map_err(store)
    }

    /// Inserts the row, or updates the row with the same `key`, writing `values` and `token`:
    /// `INSERT .. ON CONFLICT (key columns) DO UPDATE`. Refused with [`Error::StaleToken`]
    /// when the row holds a higher token (nothing changed); an equal token writes (one holder
    /// may write several times in one tenure).
    ///
    /// `key` and `values` are `(column, value)` pairs; the key columns need a unique index.
    pub async fn upsert(
        &self,
        db: &(impl GenericClient + Sync),
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
        token: impl TokenSource,
    ) -> Result<(), Error> {
        let token = token.token()?;
        let sql = self.upsert_sql(key, values)?;
        let token_sql = sql_token(token)?;
        // As the statement numbers them: keys, values, token.
        let params: Vec<&(dyn ToSql + Sync)> = key
            .iter()
            .chain(values)
            .map(|(_, v)| *v)
            .chain([&token_sql as _])
            .collect();
        db.execute(&sql, &params)
            .await
            .map(drop)
            .map_err(|e| refused_or_store(e, token))
    }

    /// Updates the rows whose columns equal `key`, writing `values` and `token`; the number
    /// of rows updated (0 when none has that key: nothing is inserted). Refused with
    /// [`Error::StaleToken`] when a row holds a higher token (nothing changed).
    pub async fn update(
        &self,
        db: &(impl GenericClient + Sync),
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
        token: impl TokenSource,
    ) -> Result<u64, Error> {
        let token = token.token()?;
        let sql = self.update_sql(key, values)?;
        let token_sql = sql_token(token)?;
        // As the statement numbers them: values, token, keys.
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|(_, v)| *v)
            .chain([&token_sql as _])
            .chain(key.iter().map(|(_, v)| *v))
            .collect();
        db.execute(&sql, &params)
            .await
            .map_err(|e| refused_or_store(e, token))
    }

    /// `INSERT INTO t (k.., v.., token) VALUES ($1..) ON CONFLICT (k..) DO UPDATE SET v = EXCLUDED.v.., token = EXCLUDED.token`.
    fn upsert_sql(
        &self,
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<String, Error> {
        if key.is_empty() {
            return Err(Error::config(
                "a fenced upsert needs at least one key column",
            ));
        }
        let table = self.table()?;
        let token = ident(&self.column)?;
        let keys = idents(key)?;
        let written = idents(values)?;
        let all: Vec<&str> = keys.iter().chain(&written).map(String::as_str).collect();
        let placeholders: Vec<String> = (1..=all.len() + 1).map(|n| format!("${n}")).collect();
        let set: Vec<String> = written
            .iter()
            .chain([&token])
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        Ok(format!(
            "INSERT INTO {table} ({}, {token}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}",
            all.join(", "),
            placeholders.join(", "),
            keys.join(", "),
            set.join(", "),
        ))
    }

    /// `UPDATE t SET v = $1.., token = $n WHERE k = $n+1 AND ..`.
    fn update_sql(
        &self,
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<String, Error> {
        if key.is_empty() {
            return Err(Error::config(
                "a fenced update needs at least one key column",
            ));
        }
        let table = self.table()?;
        let token = ident(&self.column)?;
        let written = idents(values)?;
        let keys = idents(key)?;
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        let set: Vec<String> = written
            .iter()
            .chain([&token])
            .map(|c| format!("{c} = {}", next()))
            .collect();
        let filter: Vec<String> = keys.iter().map(|c| format!("{c} = {}", next())).collect();
        Ok(format!(
            "UPDATE {table} SET {} WHERE {}",
            set.join(", "),
            filter.join(" AND ")
        ))
    }

    fn table(&self) -> Result<String, Error> {
        self.qualified(&self.table)
    }

    fn function(&self) -> Result<String, Error> {
        self.qualified(FUNCTION)
    }

    fn qualified(&self, name: &str) -> Result<String, Error> {
        Ok(match &self.schema {
            Some(schema) => format!("{}.{}", ident(schema)?, ident(name)?),
            None => ident(name)?,
        })
    }
}

/// A failed statement of your own on a fenced table, as distlock reports it:
/// [`Error::StaleToken`] when the fence refused it (`token` is what the statement wrote),
/// [`Error::Store`] for any other failure.
///
/// ```no_run
/// # async fn demo(db: tokio_postgres::Client, guard: distlock::Guard) -> Result<(), distlock::Error> {
/// use distlock::fenced::postgres::classify;
///
/// let token = guard.fencing_token().expect("taken with fencing");
/// let sql_token = i64::try_from(token).expect("below 2^63");
/// db.execute(
///     "UPDATE accounts SET balance = balance + 100, fencing_token = $1 WHERE id = 42",
///     &[&sql_token],
/// )
/// .await
/// .map_err(|e| classify(e, token))?;
/// # Ok(())
/// # }
/// ```
pub fn classify(error: tokio_postgres::Error, token: FencingToken) -> Error {
    refused_or_store(error, token)
}

fn refused_or_store(error: tokio_postgres::Error, token: FencingToken) -> Error {
    match refusal(&error) {
        Some(highest) => Error::StaleToken { token, highest },
        None => store(error),
    }
}

/// The row's token, when `error` is the trigger refusing a lower one.
fn refusal(error: &tokio_postgres::Error) -> Option<FencingToken> {
    let db = error.as_db_error()?;
    if db.code() != &SqlState::CHECK_VIOLATION || db.constraint() != Some(REFUSAL_CONSTRAINT) {
        return None;
    }
    // `token=<n> highest=<n>`; a detail that does not parse still is a refusal.
    let highest = db
        .detail()
        .and_then(|d| d.rsplit_once("highest="))
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(u64::MAX);
    Some(FencingToken::new(highest))
}

fn store(error: tokio_postgres::Error) -> Error {
    Error::Store {
        source: Box::new(error),
    }
}

/// Tokens distlock mints are below 2⁶³; one made by hand above is refused before it is sent.
fn sql_token(token: FencingToken) -> Result<i64, Error> {
    i64::try_from(token).map_err(|_| {
        Error::config(format!(
            "fencing token {token} does not fit a bigint column (tokens distlock mints are below 2^63)"
        ))
    })
}

fn idents(columns: &[(&str, &(dyn ToSql + Sync))]) -> Result<Vec<String>, Error> {
    columns.iter().map(|(name, _)| ident(name)).collect()
}

/// `name` as a quoted identifier: in double quotes, each `"` doubled. PostgreSQL identifiers
/// cannot hold NUL; an empty one is refused too.
fn ident(name: &str) -> Result<String, Error> {
    if name.is_empty() || name.contains('\0') {
        return Err(Error::config(format!(
            "{name:?} cannot be a PostgreSQL identifier (empty, or holds NUL)"
        )));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// `text` as a string literal: in single quotes, each `'` doubled; with backslashes, as an
/// escape string (`E'..'`, each `\` doubled), whatever `standard_conforming_strings` says
/// (PostgreSQL's own `quote_literal`).
fn literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// `distlock_fence_<column>`, or, when that is longer than PostgreSQL keeps, the prefix and a
/// hash of the column's name (two long names must not truncate to one trigger).
fn trigger_name(column: &str) -> String {
    let name = format!("{TRIGGER_PREFIX}{column}");
    if name.len() <= MAX_IDENTIFIER {
        return name;
    }
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let hash = column.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{TRIGGER_PREFIX}{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_literals_escaped() {
        assert_eq!(ident("accounts").unwrap(), r#""accounts""#);
        assert_eq!(
            ident(r#"a"; DROP TABLE x; --"#).unwrap(),
            r#""a""; DROP TABLE x; --""#
        );
        assert!(ident("").is_err() && ident("a\0b").is_err());
        assert_eq!(literal("token"), "'token'");
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\'b"), r"E'a\\''b'");
    }

    #[test]
    fn a_long_columns_trigger_name_fits_and_stays_its_own() {
        assert_eq!(
            trigger_name("fencing_token"),
            "distlock_fence_fencing_token"
        );
        let a = trigger_name(&format!("{}a", "x".repeat(60)));
        let b = trigger_name(&format!("{}b", "x".repeat(60)));
        assert!(a.len() <= MAX_IDENTIFIER && b.len() <= MAX_IDENTIFIER);
        assert_ne!(a, b);
    }

    #[test]
    fn the_statements_put_each_parameter_in_its_place() {
        let fence = Fence::new("accounts", "fencing_token").in_schema("billing");
        let (id, owner, balance) = (1_i64, "o", 2_i64);
        let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &id), ("owner", &owner)];
        let values: &[(&str, &(dyn ToSql + Sync))] = &[("balance", &balance)];
        assert_eq!(
            fence.upsert_sql(key, values).unwrap(),
            r#"INSERT INTO "billing"."accounts" ("id", "owner", "balance", "fencing_token") VALUES ($1, $2, $3, $4) ON CONFLICT ("id", "owner") DO UPDATE SET "balance" = EXCLUDED."balance", "fencing_token" = EXCLUDED."fencing_token""#
        );
        assert_eq!(
            fence.update_sql(key, values).unwrap(),
            r#"UPDATE "billing"."accounts" SET "balance" = $1, "fencing_token" = $2 WHERE "id" = $3 AND "owner" = $4"#
        );
        assert!(fence.update_sql(&[], values).is_err());
        // What `refusal` looks for is what the trigger raises.
        assert!(FUNCTION_BODY.contains(&format!("CONSTRAINT = '{REFUSAL_CONSTRAINT}'")));
        assert!(FUNCTION_BODY.contains("ERRCODE = 'check_violation'"));
        let sql = fence.schema_sql().unwrap();
        assert!(
            sql.contains(r#"CREATE OR REPLACE FUNCTION "billing"."distlock_refuse_stale_token"()"#)
        );
        assert!(sql.contains(
            r#"EXECUTE FUNCTION "billing"."distlock_refuse_stale_token"('fencing_token');"#
        ));
    }
}
