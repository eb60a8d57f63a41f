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
/// `TG_ARGV[1]`, when given, is the permit slots' column: element `s + 1` is permit slot
/// `s`'s mark, and no element may go down (or go from a token to NULL).
const FUNCTION_BODY: &str = r#"RETURNS trigger LANGUAGE plpgsql AS $distlock$
DECLARE
    written bigint;
    highest bigint;
    marks bigint[];
    old_marks bigint[];
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
    IF TG_NARGS > 1 THEN
        EXECUTE format('SELECT ($1).%1$I::bigint[], ($2).%1$I::bigint[]', TG_ARGV[1])
            INTO marks, old_marks USING NEW, OLD;
        FOR i IN coalesce(array_lower(old_marks, 1), 1)..coalesce(array_upper(old_marks, 1), 0) LOOP
            IF old_marks[i] IS NOT NULL AND (marks[i] IS NULL OR marks[i] < old_marks[i]) THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'check_violation',
                    CONSTRAINT = 'distlock_fence',
                    MESSAGE = format(
                        'stale fencing token %s of permit slot %s for %I.%I: %s was written already',
                        coalesce(marks[i]::text, 'NULL'), i - 1, TG_TABLE_SCHEMA, TG_TABLE_NAME,
                        old_marks[i]),
                    DETAIL = format('token=%s slot=%s highest=%s', marks[i], i - 1, old_marks[i]),
                    HINT = 'a newer holder of the permit slot wrote; take a permit again to write';
            END IF;
        END LOOP;
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
    slots: Option<String>,
}

impl Fence {
    /// The fence of `table` (in the first schema of `search_path` that has it), whose token
    /// is kept in `column`.
    pub fn new(table: impl Into<String>, column: impl Into<String>) -> Fence {
        Fence {
            schema: None,
            table: table.into(),
            column: column.into(),
            slots: None,
        }
    }

    /// The rows also keep a mark per semaphore permit slot, in `column` (`bigint[]`: element
    /// `s + 1` is slot `s`'s mark), so that they take the tokens of fenced permits
    /// ([`FencingToken::slot`]): a permit's token is compared with its slot's mark only, and
    /// refused when that slot's next holder wrote, never because a holder of another slot
    /// did. A lock's token is still compared with the token column.
    ///
    /// ```
    /// use distlock::fenced::postgres::Fence;
    ///
    /// let fence = Fence::new("shards", "fencing_token").permit_slots("fencing_slots");
    /// assert!(fence.schema_sql()?.contains(
    ///     r#"ADD COLUMN IF NOT EXISTS "fencing_slots" bigint[] NOT NULL DEFAULT '{}'"#
    /// ));
    /// # Ok::<(), distlock::Error>(())
    /// ```
    pub fn permit_slots(mut self, column: impl Into<String>) -> Fence {
        self.slots = Some(column.into());
        self
    }

    /// The table is in `schema` (the trigger function is created there too).
    pub fn in_schema(mut self, schema: impl Into<String>) -> Fence {
        self.schema = Some(schema.into());
        self
    }

    /// The statements [`install`](Self::install) runs, for a migration tool: the trigger
    /// function (created or replaced), the token column (`bigint NOT NULL DEFAULT 0`, added
    /// if missing; an existing column is left as it is), the permit slots' column if asked
    /// for ([`permit_slots`](Self::permit_slots): `bigint[] NOT NULL DEFAULT '{}'`, the same
    /// way) and the trigger on the table (created or replaced; PostgreSQL 14 or later).
    /// Idempotent.
    pub fn schema_sql(&self) -> Result<String, Error> {
        let table = self.table()?;
        let column = ident(&self.column)?;
        let function = self.function()?;
        let trigger = ident(&trigger_name(&self.column))?;
        let mut argument = literal(&self.column);
        let mut slots_column = String::new();
        if let Some(slots) = &self.slots {
            let _ = write!(argument, ", {}", literal(slots));
            slots_column = format!(
                "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {} bigint[] NOT NULL DEFAULT '{{}}';\n",
                ident(slots)?
            );
        }
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
        sql.push_str(&slots_column);
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
    /// may write several times in one tenure). A permit's token is written to (and compared
    /// with) its slot's mark: see [`permit_slots`](Self::permit_slots).
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
        let sql = self.upsert_sql(key, values, token.slot())?;
        let (token_sql, subscript) = (sql_token(token)?, subscript(token)?);
        // As the statement numbers them: keys, values, token, the slot's subscript.
        let params: Vec<&(dyn ToSql + Sync)> = key
            .iter()
            .chain(values)
            .map(|(_, v)| *v)
            .chain([&token_sql as _])
            .chain(subscript.as_ref().map(|s| s as _))
            .collect();
        db.execute(&sql, &params)
            .await
            .map(drop)
            .map_err(|e| refused_or_store(e, token))
    }

    /// Updates the rows whose columns equal `key`, writing `values` and `token`; the number
    /// of rows updated (0 when none has that key: nothing is inserted). Refused with
    /// [`Error::StaleToken`] when a row holds a higher token (nothing changed). A permit's
    /// token is written to (and compared with) its slot's mark: see
    /// [`permit_slots`](Self::permit_slots).
    pub async fn update(
        &self,
        db: &(impl GenericClient + Sync),
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
        token: impl TokenSource,
    ) -> Result<u64, Error> {
        let token = token.token()?;
        let sql = self.update_sql(key, values, token.slot())?;
        let (token_sql, subscript) = (sql_token(token)?, subscript(token)?);
        // As the statement numbers them: values, token, the slot's subscript, keys.
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|(_, v)| *v)
            .chain([&token_sql as _])
            .chain(subscript.as_ref().map(|s| s as _))
            .chain(key.iter().map(|(_, v)| *v))
            .collect();
        db.execute(&sql, &params)
            .await
            .map_err(|e| refused_or_store(e, token))
    }

    /// Where a token of `slot` goes, its parameter `$t` and the slot's subscript `$t+1`: the
    /// column written, its value on insert, its assignment on update.
    fn mark(&self, slot: Option<u32>, t: usize) -> Result<[String; 3], Error> {
        if slot.is_none() {
            let token = ident(&self.column)?;
            let assign = format!("{token} = ${t}");
            return Ok([token, format!("${t}"), assign]);
        }
        let Some(slots) = &self.slots else {
            return Err(Error::config(
                "a semaphore permit's token needs a fence that keeps permit slots (Fence::permit_slots)",
            ));
        };
        let slots = ident(slots)?;
        let s = t + 1;
        Ok([
            slots.clone(),
            format!(
                "array_append(array_fill(NULL::bigint, ARRAY[${s}::integer - 1]), ${t}::bigint)"
            ),
            format!("{slots}[${s}::integer] = ${t}::bigint"),
        ])
    }

    /// `INSERT INTO t (k.., v.., token) VALUES ($1..) ON CONFLICT (k..) DO UPDATE SET v = EXCLUDED.v.., token = $n`
    /// (for a permit's token, the slots' column and its slot's element in place of `token`).
    fn upsert_sql(
        &self,
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
        slot: Option<u32>,
    ) -> Result<String, Error> {
        if key.is_empty() {
            return Err(Error::config(
                "a fenced upsert needs at least one key column",
            ));
        }
        let table = self.table()?;
        let keys = idents(key)?;
        let written = idents(values)?;
        let all: Vec<&str> = keys.iter().chain(&written).map(String::as_str).collect();
        let [column, inserted, assigned] = self.mark(slot, all.len() + 1)?;
        let placeholders: Vec<String> = (1..=all.len())
            .map(|n| format!("${n}"))
            .chain([inserted])
            .collect();
        let set: Vec<String> = written
            .iter()
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .chain([assigned])
            .collect();
        Ok(format!(
            "INSERT INTO {table} ({}, {column}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}",
            all.join(", "),
            placeholders.join(", "),
            keys.join(", "),
            set.join(", "),
        ))
    }

    /// `UPDATE t SET v = $1.., token = $n WHERE k = $n+1 AND ..` (for a permit's token, its
    /// slot's element of the slots' column, and the keys from `$n+2`).
    fn update_sql(
        &self,
        key: &[(&str, &(dyn ToSql + Sync))],
        values: &[(&str, &(dyn ToSql + Sync))],
        slot: Option<u32>,
    ) -> Result<String, Error> {
        if key.is_empty() {
            return Err(Error::config(
                "a fenced update needs at least one key column",
            ));
        }
        let table = self.table()?;
        let written = idents(values)?;
        let keys = idents(key)?;
        let [_, _, assigned] = self.mark(slot, written.len() + 1)?;
        let mut n = written.len() + 1 + usize::from(slot.is_some());
        let set: Vec<String> = written
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ${}", i + 1))
            .chain([assigned])
            .collect();
        let filter: Vec<String> = keys
            .iter()
            .map(|c| {
                n += 1;
                format!("{c} = ${n}")
            })
            .collect();
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
    // `token=<n> [slot=<n>] highest=<n>`; a detail that does not parse still is a refusal.
    let detail = db.detail().unwrap_or_default();
    let highest = detail
        .rsplit_once("highest=")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(u64::MAX);
    let highest = FencingToken::new(highest);
    let slot = detail
        .split_whitespace()
        .find_map(|word| word.strip_prefix("slot=")?.parse().ok());
    Some(slot.map_or(highest, |slot| highest.in_slot(slot)))
}

fn store(error: tokio_postgres::Error) -> Error {
    Error::Store {
        source: Box::new(error),
    }
}

/// A permit's token's slot as the array subscript of its mark (slot + 1), if it has one.
fn subscript(token: FencingToken) -> Result<Option<i32>, Error> {
    token
        .slot()
        .map(|slot| {
            i32::try_from(u64::from(slot) + 1).map_err(|_| {
                Error::config(format!(
                    "permit slot {slot} is beyond what a PostgreSQL array holds"
                ))
            })
        })
        .transpose()
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
            fence.upsert_sql(key, values, None).unwrap(),
            r#"INSERT INTO "billing"."accounts" ("id", "owner", "balance", "fencing_token") VALUES ($1, $2, $3, $4) ON CONFLICT ("id", "owner") DO UPDATE SET "balance" = EXCLUDED."balance", "fencing_token" = $4"#
        );
        assert_eq!(
            fence.update_sql(key, values, None).unwrap(),
            r#"UPDATE "billing"."accounts" SET "balance" = $1, "fencing_token" = $2 WHERE "id" = $3 AND "owner" = $4"#
        );
        assert!(fence.update_sql(&[], values, None).is_err());
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
        // A permit's token: its slot's element, the subscript after the token.
        assert!(fence.upsert_sql(key, values, Some(0)).is_err(), "no slots");
        let fence = fence.permit_slots("fencing_slots");
        assert_eq!(
            fence.upsert_sql(key, values, Some(2)).unwrap(),
            r#"INSERT INTO "billing"."accounts" ("id", "owner", "balance", "fencing_slots") VALUES ($1, $2, $3, array_append(array_fill(NULL::bigint, ARRAY[$5::integer - 1]), $4::bigint)) ON CONFLICT ("id", "owner") DO UPDATE SET "balance" = EXCLUDED."balance", "fencing_slots"[$5::integer] = $4::bigint"#
        );
        assert_eq!(
            fence.update_sql(key, values, Some(2)).unwrap(),
            r#"UPDATE "billing"."accounts" SET "balance" = $1, "fencing_slots"[$3::integer] = $2::bigint WHERE "id" = $4 AND "owner" = $5"#
        );
        assert_eq!(subscript(FencingToken::new(9).in_slot(2)).unwrap(), Some(3));
        assert!(subscript(FencingToken::new(9).in_slot(u32::MAX)).is_err());
        assert!(fence.schema_sql().unwrap().contains(
            r#"EXECUTE FUNCTION "billing"."distlock_refuse_stale_token"('fencing_token', 'fencing_slots');"#
        ));
    }
}
