//! Writes to Redis that the store itself fences: a write carrying a token below the highest
//! the key has seen is refused, so a holder whose lease ended while it stalled cannot
//! overwrite what its successor wrote.
//!
//! A lease cannot stop a holder that stalls past it (a GC pause, a frozen VM, a slow
//! network): only the resource can, by refusing writes that carry an older token. Each write
//! here is one script (`write.lua`) that compares the token with the key's **mark** (the
//! highest token written to it so far), refuses a lower one, raises the mark and writes, in one
//! atomic step.
//!
//! The mark of key `k` is a string key beside it, [`mark_key`]`(k)`: `{<tag>}:#fence-mark:<k>`,
//! with a tag chosen to put it in `k`'s Redis Cluster slot, so one script reaches both on a
//! Cluster. It is kept as long as the resource's own
//! expiry and at least [`MARK_KEPT`] (by default) after its last write: a holder stalled
//! longer than that after its successor's last write could write once more. Tokens have the
//! clock floor of docs/design.md, so this is the same bound as the fencing counter's.
//!
//! A semaphore permit's token (one with a [`slot`](FencingToken::slot)) is compared with the
//! mark of its permit slot alone, [`permit_mark_key`]`(k, slot)`:
//! `{<tag>}:#fence-mark#<slot>:<k>`, in the same Cluster slot and kept the same way. So the
//! expired holder of a permit slot is refused once that slot's next holder wrote, and a live
//! holder of another slot never is: with N permits there are N holders at once, and one mark
//! for all of them would refuse every one but the newest. A lock's token (no slot) is compared
//! with the key's one mark; a key guarded by a lock and a semaphore at once has both, and
//! neither orders the other.
//!
//! The store may be the deployment the locks live on or any other: a `FencedRedis` takes any
//! redis-rs async connection. Each write takes its token from what the holder has in hand
//! ([`TokenSource`]): `distlock::lease()` in a locked fn, `&guard`, `&leadership`, or a
//! [`FencingToken`].
//!
//! With the `postgres` feature, `fenced::postgres` does the same for PostgreSQL tables: a token
//! column and a trigger that refuses a lower token, and fenced upserts and updates. Fencing
//! any other store, and the rule itself: [the fencing guide](crate::guide::fencing).

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, Value};

use crate::algorithm::{evalsha, invoke, Lua};
use crate::error::{Error, Op};
use crate::key::slot;
use crate::token::FencingToken;

/// How long a key's mark is kept after its last write, at least (and never less than the
/// key's own expiry): one day, the fencing counter's retention.
pub const MARK_KEPT: Duration = Duration::from_secs(24 * 3600);

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
mod source;

pub use source::TokenSource;

static WRITE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("write.lua")));

/// The suffix that makes a key's mark.
const MARK_SUFFIX: &[u8] = b":#fence-mark";

/// Redis writes refused when they carry a token below the highest the key has seen. Each
/// takes its token from a [`TokenSource`] (see there for a locked fn's one-line write).
///
/// ```no_run
/// # async fn demo(locks: distlock::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::fenced::FencedRedis;
///
/// let conn = redis::Client::open("redis://127.0.0.1:6379")?
///     .get_multiplexed_async_connection()
///     .await?;
/// let mut store = FencedRedis::new(conn);
/// let guard = locks.lock("account:42").fencing(true).acquire().await?;
/// // Refused with `Error::StaleToken` if a newer holder of the lock wrote meanwhile.
/// store.hincr_by("account:42", "balance", 100, &guard).await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct FencedRedis<C> {
    conn: C,
    mark_kept_ms: u64,
}

impl<C: ConnectionLike + Send> FencedRedis<C> {
    /// Fenced writes over `conn` (a `MultiplexedConnection`, a `ConnectionManager`, a Cluster
    /// connection, ...).
    pub fn new(conn: C) -> Self {
        FencedRedis {
            conn,
            mark_kept_ms: MARK_KEPT.as_millis() as u64,
        }
    }

    /// How long a key's mark is kept after its last write at least (default [`MARK_KEPT`];
    /// never less than the key's own expiry). Longer than any holder may stall.
    pub fn mark_kept(mut self, kept: Duration) -> Self {
        self.mark_kept_ms = (kept.as_millis() as u64).max(1);
        self
    }

    /// The connection back.
    pub fn into_inner(self) -> C {
        self.conn
    }

    /// `SET key value`, fenced.
    pub async fn set(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl ToRedisArgs,
        token: impl TokenSource,
    ) -> Result<(), Error> {
        self.write(key.as_ref(), token.token()?, "set", |cmd| {
            cmd.arg(value);
        })
        .await
        .map(drop)
    }

    /// `SET key value PX ttl`, fenced. The mark is kept at least as long as the key.
    pub async fn set_with_expiry(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl ToRedisArgs,
        ttl: Duration,
        token: impl TokenSource,
    ) -> Result<(), Error> {
        let ms = (ttl.as_millis() as u64).max(1);
        self.write(key.as_ref(), token.token()?, "set_px", |cmd| {
            cmd.arg(value).arg(ms);
        })
        .await
        .map(drop)
    }

    /// `DEL key`, fenced; true when the key was there. The mark stays: a stale holder cannot
    /// write the key back.
    pub async fn del(
        &mut self,
        key: impl AsRef<[u8]>,
        token: impl TokenSource,
    ) -> Result<bool, Error> {
        let n = self
            .write(key.as_ref(), token.token()?, "del", |_| {})
            .await?;
        Ok(int(&n)? > 0)
    }

    /// `INCRBY key n`, fenced; the new value.
    pub async fn incr_by(
        &mut self,
        key: impl AsRef<[u8]>,
        n: i64,
        token: impl TokenSource,
    ) -> Result<i64, Error> {
        let v = self
            .write(key.as_ref(), token.token()?, "incr_by", |cmd| {
                cmd.arg(n);
            })
            .await?;
        int(&v)
    }

    /// `HSET key field value`, fenced.
    pub async fn hset(
        &mut self,
        key: impl AsRef<[u8]>,
        field: impl ToRedisArgs,
        value: impl ToRedisArgs,
        token: impl TokenSource,
    ) -> Result<(), Error> {
        self.write(key.as_ref(), token.token()?, "hset", |cmd| {
            cmd.arg(field).arg(value);
        })
        .await
        .map(drop)
    }

    /// `HDEL key field`, fenced; true when the field was there.
    pub async fn hdel(
        &mut self,
        key: impl AsRef<[u8]>,
        field: impl ToRedisArgs,
        token: impl TokenSource,
    ) -> Result<bool, Error> {
        let n = self
            .write(key.as_ref(), token.token()?, "hdel", |cmd| {
                cmd.arg(field);
            })
            .await?;
        Ok(int(&n)? > 0)
    }

    /// `HINCRBY key field n`, fenced; the new value.
    pub async fn hincr_by(
        &mut self,
        key: impl AsRef<[u8]>,
        field: impl ToRedisArgs,
        n: i64,
        token: impl TokenSource,
    ) -> Result<i64, Error> {
        let v = self
            .write(key.as_ref(), token.token()?, "hincr_by", |cmd| {
                cmd.arg(field).arg(n);
            })
            .await?;
        int(&v)
    }

    /// The highest lock token `key` has seen (its mark), if any write to it was fenced lately.
    pub async fn highest_token(
        &mut self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<FencingToken>, Error> {
        self.read_mark(&mark_key(key.as_ref())).await
    }

    /// The highest token of semaphore permit slot `slot` that `key` has seen (that slot's
    /// mark), if any write to it from that slot was fenced lately.
    pub async fn highest_permit_token(
        &mut self,
        key: impl AsRef<[u8]>,
        slot: u32,
    ) -> Result<Option<FencingToken>, Error> {
        let mark = self.read_mark(&permit_mark_key(key.as_ref(), slot)).await?;
        Ok(mark.map(|token| token.in_slot(slot)))
    }

    async fn read_mark(&mut self, mark: &[u8]) -> Result<Option<FencingToken>, Error> {
        let mark: Option<u64> = redis::cmd("GET")
            .arg(mark)
            .query_async(&mut self.conn)
            .await
            .map_err(failed)?;
        Ok(mark.map(FencingToken::new))
    }

    /// One fenced write: `op` and the arguments `args` adds.
    async fn write(
        &mut self,
        key: &[u8],
        token: FencingToken,
        op: &str,
        args: impl FnOnce(&mut redis::Cmd),
    ) -> Result<Value, Error> {
        let mark = match token.slot() {
            Some(slot) => permit_mark_key(key, slot),
            None => mark_key(key),
        };
        let mut cmd = evalsha(&WRITE, 2, 7, 2 * key.len() + 64);
        cmd.arg(key)
            .arg(mark)
            .arg(token)
            .arg(self.mark_kept_ms)
            .arg(op);
        args(&mut cmd);
        let reply: Value = invoke(&WRITE, &cmd, &mut self.conn).await.map_err(failed)?;
        match reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), result] => Ok(result.clone()),
                [Value::Int(0), highest] => Err(Error::StaleToken {
                    token,
                    highest: match token.slot() {
                        Some(slot) => highest_of(highest).in_slot(slot),
                        None => highest_of(highest),
                    },
                }),
                _ => Err(unexpected()),
            },
            _ => Err(unexpected()),
        }
    }
}

/// The key that holds `key`'s mark: `{<tag>}:#fence-mark:<key>`, where `<tag>` is the
/// smallest number whose Redis Cluster slot is `key`'s, so the mark lives in `key`'s slot
/// whatever braces `key` holds, and each key has a mark of its own.
///
/// ```
/// use distlock::fenced::mark_key;
///
/// // `order:42` is in slot 8,691, as `{633}` is.
/// assert_eq!(mark_key(b"order:42"), b"{633}:#fence-mark:order:42");
/// ```
pub fn mark_key(key: &[u8]) -> Vec<u8> {
    mark_in_slot(key, "")
}

/// The key that holds `key`'s mark for the tokens of semaphore permit slot `permit_slot`:
/// `{<tag>}:#fence-mark#<permit_slot>:<key>`, beside [`mark_key`]'s and in the same Redis
/// Cluster slot. Each permit slot's tokens are compared with its own mark.
///
/// ```
/// use distlock::fenced::permit_mark_key;
///
/// assert_eq!(permit_mark_key(b"order:42", 3), b"{633}:#fence-mark#3:order:42");
/// ```
pub fn permit_mark_key(key: &[u8], permit_slot: u32) -> Vec<u8> {
    mark_in_slot(key, &format!("#{permit_slot}"))
}

/// `{<tag>}:#fence-mark<infix>:<key>`: after the suffix comes `:` for a lock's mark and `#`
/// for a permit slot's, so no two marks share a key.
fn mark_in_slot(key: &[u8], infix: &str) -> Vec<u8> {
    let tag = SLOT_TAGS[usize::from(slot(key))].to_string();
    let mut mark = Vec::with_capacity(tag.len() + MARK_SUFFIX.len() + infix.len() + key.len() + 3);
    mark.push(b'{');
    mark.extend_from_slice(tag.as_bytes());
    mark.push(b'}');
    mark.extend_from_slice(MARK_SUFFIX);
    mark.extend_from_slice(infix.as_bytes());
    mark.push(b':');
    mark.extend_from_slice(key);
    mark
}

/// For each Redis Cluster slot, the smallest number whose decimal digits hash to it: a tag
/// that puts a key in that slot.
static SLOT_TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; 16384];
    let mut left = tags.len();
    let mut n: u32 = 0;
    while left > 0 {
        let t = &mut tags[usize::from(slot(n.to_string().as_bytes()))];
        if *t == u32::MAX {
            *t = n;
            left -= 1;
        }
        n += 1;
    }
    tags.into_boxed_slice()
});

/// The mark a refusal reports; one that does not parse is reported as the highest there is
/// (the refusal stands).
fn highest_of(value: &Value) -> FencingToken {
    let highest = match value {
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX),
        Value::Int(n) => u64::try_from(*n).unwrap_or(u64::MAX),
        _ => u64::MAX,
    };
    FencingToken::new(highest)
}

fn int(value: &Value) -> Result<i64, Error> {
    match value {
        Value::Int(n) => Ok(*n),
        _ => Err(unexpected()),
    }
}

fn failed(source: redis::RedisError) -> Error {
    Error::Redis {
        op: Op::FencedWrite,
        name: None,
        server: None,
        source,
    }
}

fn unexpected() -> Error {
    failed(
        (
            redis::ErrorKind::Parse,
            "unexpected answer to a fenced write",
        )
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The marks are in their key's slot, whatever braces the key holds, and each key and each
    /// permit slot of it has its own.
    #[test]
    fn a_mark_lives_in_its_keys_slot() {
        let keys = [
            &b"order:42"[..],
            b"a{b}c",
            b"{}x",
            b"x{}",
            b"{",
            b"}{",
            b"a{b",
            b"{a}{b}",
            b"",
            b"\xff\x00{",
        ];
        for key in keys {
            let mark = mark_key(key);
            assert_eq!(slot(&mark), slot(key), "{key:?} -> {mark:?}");
        }
        let mut marks: std::collections::HashSet<Vec<u8>> =
            keys.iter().map(|k| mark_key(k)).collect();
        for key in keys {
            for permit_slot in [0, 1, 10, u32::MAX] {
                let mark = permit_mark_key(key, permit_slot);
                assert_eq!(slot(&mark), slot(key), "{key:?} -> {mark:?}");
                assert!(marks.insert(mark), "{key:?} {permit_slot}");
            }
        }
        assert_eq!(marks.len(), keys.len() * 5);
        assert!(SLOT_TAGS.iter().all(|&t| t != u32::MAX));
    }
}
