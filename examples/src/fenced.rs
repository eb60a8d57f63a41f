//! The fenced-write example (`--bin fenced_write`): a PostgreSQL table that refuses a write
//! carrying a fencing token below the last one written.
//!
//! A lock lease cannot stop a holder that stalls past it (a GC pause, a frozen VM, a slow
//! disk): its lease runs out, the next holder takes the lock and writes, and then the stalled
//! one wakes up and writes too, believing it still holds the lock. Every acquisition's
//! [`fencing_token`](distlock::Guard::fencing_token) is larger than every earlier one of the
//! same lock; a store that remembers the largest token it has seen and refuses smaller ones
//! turns that late write into a refusal.
//!
//! Here the store is one table, `fenced_records (name, value, fencing_token)`, guarded twice:
//! [`fenced_write`] writes only if no larger token was written before (a conditional upsert;
//! a refused write changes nothing and says so), and a trigger refuses *any* update that would
//! lower a row's token, so other statements cannot slip a stale write past the fence either.
//! An equal token is accepted: one holder may write several times during one tenure.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// Creates the table and its trigger (idempotent).
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS fenced_records (
    name          text   PRIMARY KEY,
    value         text   NOT NULL,
    fencing_token bigint NOT NULL
);

CREATE OR REPLACE FUNCTION fenced_records_refuse_stale() RETURNS trigger AS $$
BEGIN
    IF NEW.fencing_token < OLD.fencing_token THEN
        RAISE EXCEPTION 'stale fencing token % for %: % was written already',
            NEW.fencing_token, OLD.name, OLD.fencing_token
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE TRIGGER fenced_records_fence
    BEFORE UPDATE ON fenced_records
    FOR EACH ROW EXECUTE FUNCTION fenced_records_refuse_stale();
"#;

/// Creates the table and trigger of [`SCHEMA`].
pub async fn create_schema(db: &Client) -> Result<(), tokio_postgres::Error> {
    db.batch_execute(SCHEMA).await
}

/// What became of a [`fenced_write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The value is stored with this token.
    Applied,
    /// Refused: a larger token was written before (`latest`); nothing changed.
    Refused {
        /// The token stored with the record now.
        latest: u64,
    },
}

/// Stores `value` under `name` with the writer's fencing token, unless a larger token was
/// written for `name` before.
pub async fn fenced_write(
    db: &Client,
    name: &str,
    value: &str,
    token: u64,
) -> Result<Write, tokio_postgres::Error> {
    let written = db
        .execute(
            "INSERT INTO fenced_records (name, value, fencing_token) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE
                 SET value = EXCLUDED.value, fencing_token = EXCLUDED.fencing_token
                 WHERE fenced_records.fencing_token <= EXCLUDED.fencing_token",
            &[&name, &value, &as_sql(token)],
        )
        .await?;
    if written == 1 {
        return Ok(Write::Applied);
    }
    let latest = read(db, name).await?.map_or(0, |(_, latest)| latest);
    Ok(Write::Refused { latest })
}

/// The stored value and token of `name`, if any.
pub async fn read(db: &Client, name: &str) -> Result<Option<(String, u64)>, tokio_postgres::Error> {
    let row = db
        .query_opt(
            "SELECT value, fencing_token FROM fenced_records WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(|row| {
        let token: i64 = row.get(1);
        (row.get(0), u64::try_from(token).unwrap_or(0))
    }))
}

/// Whether `error` is the trigger refusing a stale token.
pub fn is_stale_token_error(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::CHECK_VIOLATION)
}

/// Tokens come from a Redis `INCR`, a signed 64-bit counter, so they always fit a `bigint`.
pub fn as_sql(token: u64) -> i64 {
    i64::try_from(token).expect("fencing tokens are Redis INCR values, below 2^63")
}
