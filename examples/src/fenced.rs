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
//! Here the store is one table, `fenced_records (name, value)`, fenced by distlock's
//! PostgreSQL fence ([`distlock::fenced::postgres`]): [`create_schema`] creates the table and
//! installs the fence (a `fencing_token` column and a trigger that refuses any update lowering
//! it), and [`fenced_write`] is the library's fenced upsert, with the refusal turned into a
//! value: a refused write changes nothing and says so. Because the trigger holds the rule,
//! other statements cannot slip a stale token past the fence either. An equal token is
//! accepted: one holder may write several times during one tenure.

use distlock::fenced::postgres::Fence;
use distlock::fenced::TokenSource;
use distlock::{Error, FencingToken};
use tokio_postgres::Client;

/// Creates the table (idempotent); [`create_schema`] adds the fence.
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS fenced_records (
    name  text PRIMARY KEY,
    value text NOT NULL
);
"#;

/// The fence on `fenced_records`: its token in `fencing_token`.
pub fn fence() -> Fence {
    Fence::new("fenced_records", "fencing_token")
}

/// Creates the table of [`SCHEMA`] and installs the fence on it.
pub async fn create_schema(db: &Client) -> Result<(), Error> {
    db.batch_execute(SCHEMA).await.map_err(|e| Error::Store {
        source: Box::new(e),
    })?;
    fence().install(db).await
}

/// What became of a [`fenced_write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The value is stored with this token.
    Applied,
    /// Refused: a larger token was written before (`latest`); nothing changed.
    Refused {
        /// The token stored with the record now.
        latest: FencingToken,
    },
}

/// Stores `value` under `name` with the writer's fencing token, unless a larger token was
/// written for `name` before. `token`: the writer's token, its guard (`&guard`) or its lease.
pub async fn fenced_write(
    db: &Client,
    name: &str,
    value: &str,
    token: impl TokenSource,
) -> Result<Write, Error> {
    match fence()
        .upsert(db, &[("name", &name)], &[("value", &value)], token)
        .await
    {
        Ok(()) => Ok(Write::Applied),
        Err(Error::StaleToken { highest, .. }) => Ok(Write::Refused { latest: highest }),
        Err(e) => Err(e),
    }
}

/// The stored value and token of `name`, if any.
pub async fn read(
    db: &Client,
    name: &str,
) -> Result<Option<(String, FencingToken)>, tokio_postgres::Error> {
    let row = db
        .query_opt(
            "SELECT value, fencing_token FROM fenced_records WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(|row| {
        let token: i64 = row.get(1);
        (
            row.get(0),
            FencingToken::new(u64::try_from(token).unwrap_or(0)),
        )
    }))
}

/// A token as the `bigint` column holds it: tokens distlock mints are below 2^63.
pub fn as_sql(token: FencingToken) -> i64 {
    i64::try_from(token).expect("fencing tokens distlock mints are below 2^63")
}
