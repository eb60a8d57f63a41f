//! For operators: who holds a lock, listing locks, and removing one by force.
//!
//! Every hold carries a short description of who took it (the process's tag, the call site's
//! number, the time), written by the acquire script in the same step as the hold (setnx: after
//! the owner token in the lock's value; reentrant and write holds: as the value of the
//! acquisition's field); the process's record says what the tag and number stand for (host,
//! pid, site; see `identity` and `nodes::records`). Inspection reads both; the lock path pays about 20 bytes per
//! hold and one write per call site and server.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::algorithm::{evalsha, invoke, Lua};
use crate::client::Client;
use crate::error::{Error, Op};
use crate::identity::{self, Described};
use crate::key::{name_of, Kind, LockKey};
use crate::mode::LockMode;
use crate::nodes::records;
use crate::telemetry;
use crate::token::FencingToken;

mod rwlock;
mod semaphore;

pub use semaphore::Permit;

static INSPECT: std::sync::LazyLock<Lua> =
    std::sync::LazyLock::new(|| Lua::new(include_str!("inspect.lua")));
static FORCE_UNLOCK: std::sync::LazyLock<Lua> =
    std::sync::LazyLock::new(|| Lua::new(include_str!("force_unlock.lua")));

/// How long the record of a forced unlock is kept beside the lock.
pub const FORCED_RECORD_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Who took a hold, as stored with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner as the scripts compare it (setnx: the random token; other modes: client id
    /// and task context).
    pub owner: String,
    /// The holder's process, as a tag drawn once per process: it names the record of the
    /// process's host, pid and sites (the hash `<prefix>:#process:{<tag>}`), and still tells
    /// holders apart where that record is gone (a restarted server, before the holder
    /// rewrites it within a minute).
    pub process: Option<String>,
    /// The machine the holder runs on.
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// Where it was taken: the locked fn (attributes) or the `file:line` of the call.
    pub site: Option<String>,
    /// When it was granted, by the holder's clock: the send time of the attempt the server
    /// granted (on one node, Sentinel or a Cluster; a quorum's lock and a set of names keep
    /// the time their acquisition began), not when a wait or an outage began. A hold handed
    /// from task to task in its process keeps the time of its first holder. For people: it
    /// is no lock state (leases run on the server's clock).
    pub acquired_at: Option<SystemTime>,
}

/// One reading owner of a read/write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reader {
    /// Client id and task context.
    pub owner: String,
    /// Its read holds (re-entries count).
    pub holds: u32,
    /// Its lease's remaining time.
    pub remaining: Duration,
}

/// The last forced unlock of a lock, kept beside it for a week.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedUnlock {
    /// Why, as the operator said.
    pub reason: String,
    /// Host and pid of the process that forced it.
    pub by: String,
    /// When, by the server's clock.
    pub at: SystemTime,
    /// The mode the lock was held in (`None` for a record this version cannot read).
    pub mode: Option<LockMode>,
    /// The owner that lost it.
    pub previous_owner: String,
}

/// A lock's state; see [`Client::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// The mode it is held in; `None` when it is free (a read/write lock with only a waiting
    /// writer's intent is free).
    pub mode: Option<LockMode>,
    /// How long the key lives unless renewed (the latest lease of any holder or intent).
    pub remaining: Option<Duration>,
    /// The exclusive holder (setnx, reentrant, or the writer), with the description of its
    /// first acquisition.
    pub holder: Option<Holder>,
    /// The exclusive holder's acquisitions (re-entry depth), the read holds in all, or a
    /// semaphore's permits held.
    pub hold_count: u32,
    /// Readers of a read/write lock.
    pub readers: Vec<Reader>,
    /// Writers waiting for a read/write lock (they keep new readers out).
    pub waiting_writers: Vec<String>,
    /// A semaphore's number of permits, as its holders recorded it.
    pub permits: Option<u32>,
    /// A semaphore's permits held now, the first whose lease ends first.
    pub permit_holders: Vec<Permit>,
    /// The current holder's fencing token, when it took the lock with fencing (read holds:
    /// the last fenced writer's). For a setnx lock, whose value has no room for it, this is
    /// the last token issued for the name: the holder's if it asked for one.
    pub fencing_token: Option<FencingToken>,
    /// The last token issued for this name (held or not).
    pub last_fencing_token: Option<FencingToken>,
    /// The last forced unlock, if one happened in the past week.
    pub last_forced_unlock: Option<ForcedUnlock>,
}

impl LockInfo {
    /// True while someone holds the lock.
    pub fn is_held(&self) -> bool {
        self.mode.is_some()
    }
}

impl Client {
    /// Reads who holds a lock, in any mode, in one atomic step: the holder (host, pid, call
    /// site, when), remaining lease, re-entry count, readers, waiting writers, a semaphore's
    /// permits and their holders, fencing token and the last forced unlock. Changes nothing. On a quorum client the nodes are read one
    /// after another and the first that answers with the lock held is reported (they may
    /// disagree while a quorum forms).
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// let info = locks.inspect("order:42").await?;
    /// if let Some(holder) = &info.holder {
    ///     println!("held by pid {:?} on {:?} since {:?}", holder.pid, holder.host, holder.acquired_at);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: impl AsRef<[u8]>) -> Result<LockInfo, Error> {
        let key = self.inner().key(name.as_ref())?;
        let mut first: Option<Result<LockInfo, Error>> = None;
        for node in &self.inner().nodes.nodes {
            let mut conn = node.conn.clone();
            let mut cmd = evalsha(&INSPECT, 5, 5, 5 * key.lock().len() + 48);
            cmd.arg(key.lock())
                .arg(key.helper_arg(Kind::Fence))
                .arg(key.helper_arg(Kind::Forced))
                .arg(key.helper_arg(Kind::Readers))
                .arg(key.helper_arg(Kind::Intents));
            let reply: Result<Value, _> = invoke(&INSPECT, &cmd, &mut conn).await;
            let mut info = reply
                .map_err(|e| Error::redis(Op::Inspect, key.name(), e))
                .and_then(|v| parse_info(&key, v));
            if let Ok((info, described, permits)) = &mut info {
                let prefix = &self.inner().prefix;
                if let (Some(holder), Some(described)) = (&mut info.holder, described) {
                    (holder.host, holder.pid, holder.site) =
                        records::look_up(&mut conn, prefix, described).await;
                }
                semaphore::look_up(&mut conn, prefix, &mut info.permit_holders, permits).await;
            }
            let info = info.map(|(info, ..)| info);
            if matches!(&info, Ok(i) if i.is_held()) {
                return info;
            }
            if first.as_ref().is_none_or(|f| f.is_err()) {
                first = Some(info);
            }
        }
        first.unwrap_or_else(|| Err(Error::config("the client has no nodes")))
    }

    /// Removes a lock whoever holds it, for an operator clearing a lock whose holder is stuck.
    /// The `reason` (required, non-empty) is logged as a `warn` event and kept beside the lock
    /// for a week with who forced it and when ([`LockInfo::last_forced_unlock`]); waiters are
    /// woken. The holder's next renewal is refused, so its guard reports the lease lost; until
    /// then it may still act as holder, which is what fencing tokens are for. Returns whether
    /// a lock was removed. On a quorum client it is removed from every node.
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>, reason: &str) -> Result<bool, Error> {
        let key = self.inner().key(name.as_ref())?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(Error::config(
                "force_unlock needs a reason: it is logged and kept beside the lock",
            ));
        }
        let by = identity::process_description();
        let mut removed = None;
        let mut last_error = None;
        for node in &self.inner().nodes.nodes {
            let mut conn = node.conn.clone();
            let sharded = if node.conn.sharded() { "s" } else { "" };
            let mut cmd = evalsha(
                &FORCE_UNLOCK,
                4,
                8,
                4 * key.lock().len() + reason.len() + 256,
            );
            cmd.arg(key.lock())
                .arg(key.helper_arg(Kind::Forced))
                .arg(key.helper_arg(Kind::Readers))
                .arg(key.helper_arg(Kind::Intents))
                .arg(reason)
                .arg(&by)
                .arg(FORCED_RECORD_KEPT.as_millis() as u64)
                .arg(sharded);
            let reply: Result<Value, _> = invoke(&FORCE_UNLOCK, &cmd, &mut conn).await;
            match reply {
                Ok(Value::Array(items)) => match items.first() {
                    Some(Value::Int(1)) => {
                        let mode = items.get(1).and_then(text);
                        removed = Some(mode);
                    }
                    Some(Value::Int(-1)) => {
                        return Err(Error::WrongType {
                            name: key.name().to_owned(),
                            found: items.get(1).and_then(text).unwrap_or_default(),
                        })
                    }
                    _ => {}
                },
                Ok(_) => {}
                Err(e) => last_error = Some(Error::redis(Op::ForceUnlock, key.name(), e)),
            }
        }
        if let Some(mode) = removed {
            let mode = mode
                .as_deref()
                .and_then(LockMode::named)
                .map(LockMode::as_str);
            telemetry::forced_unlock(mode, key.name(), reason);
            return Ok(true);
        }
        match last_error {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }

    /// The names of the locks held now under this client's key prefix (a `SCAN`: fine for an
    /// operator, not for a hot path), sorted.
    pub async fn list(&self) -> Result<Vec<String>, Error> {
        let prefix = self.inner().prefix.clone();
        let pattern = if prefix.is_empty() {
            "*".to_owned()
        } else {
            format!("{}:*", glob_escape(&prefix))
        };
        let mut names = BTreeSet::new();
        for node in &self.inner().nodes.nodes {
            let mut conn = node.conn.clone();
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| Error::Redis {
                        op: Op::Inspect,
                        name: None,
                        server: None,
                        source: e,
                    })?;
                let mut pipe = redis::pipe();
                // Lock keys only: helper keys and records have shapes of their own.
                let candidates: Vec<(Vec<u8>, String)> = keys
                    .into_iter()
                    .filter_map(|k| name_of(&prefix, &k).map(|name| (k, name)))
                    .collect();
                for (k, _) in &candidates {
                    pipe.cmd("PTTL").arg(k);
                }
                let ttls: Vec<i64> = if candidates.is_empty() {
                    Vec::new()
                } else {
                    pipe.query_async(&mut conn)
                        .await
                        .map_err(|e| Error::Redis {
                            op: Op::Inspect,
                            name: None,
                            server: None,
                            source: e,
                        })?
                };
                // Locks always expire: a key without expiry is the application's.
                for ((_, name), ttl) in candidates.into_iter().zip(ttls) {
                    if ttl > 0 {
                        names.insert(name);
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(names.into_iter().collect())
    }
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A fencing token as the scripts store it: decimal digits.
fn token(digits: &str) -> Option<FencingToken> {
    digits.parse().ok().map(FencingToken::new)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn pairs(v: &Value) -> Vec<(String, String)> {
    let Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .chunks(2)
        .filter_map(|c| Some((text(c.first()?)?, text(c.get(1)?)?)))
        .collect()
}

/// Reads a hold's description: `<tag>.<site>.<at>` (see `identity`), returned too for the
/// look-up of the process's record, or the `host=..\tpid=..\tsite=..\tat=..` that earlier
/// builds wrote whole.
fn described(owner: String, text: &str) -> (Holder, Option<Described>) {
    let mut h = Holder {
        owner,
        ..Holder::default()
    };
    if let Some(d) = identity::parse(text) {
        h.process = Some(d.process.clone());
        h.acquired_at = Some(d.at);
        return (h, Some(d));
    }
    for part in text.split('\t') {
        match part.split_once('=') {
            Some(("host", v)) => h.host = Some(v.to_owned()),
            Some(("pid", v)) => h.pid = v.parse().ok(),
            Some(("site", v)) => h.site = Some(v.to_owned()),
            Some(("at", v)) => {
                h.acquired_at = v
                    .parse::<u64>()
                    .ok()
                    .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
            }
            _ => {}
        }
    }
    (h, None)
}

/// The lock's state, and the descriptions of its reported holder and of a semaphore's
/// permits where they point to a process's record.
pub(crate) type Parsed = (LockInfo, Option<Described>, Vec<Option<Described>>);

/// The lock's state (see [`Parsed`]); also an election observer's read (see
/// `election::observe`).
pub(crate) fn parse_info(key: &LockKey, reply: Value) -> Result<Parsed, Error> {
    let bad = || {
        Error::redis(
            Op::Inspect,
            key.name(),
            redis::RedisError::from((redis::ErrorKind::Parse, "unexpected inspect reply")),
        )
    };
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let [kind, pttl, payload, counter, forced, now, readers, intents] = items.as_slice() else {
        return Err(bad());
    };
    let kind = text(kind).ok_or_else(bad)?;
    let pttl = match pttl {
        Value::Int(ms) if *ms >= 0 => Some(Duration::from_millis(*ms as u64)),
        _ => None,
    };
    let now = match now {
        Value::Int(ms) => *ms,
        _ => return Err(bad()),
    };
    let mut description_read = None;
    let mut permits_read = Vec::new();
    let mut info = LockInfo {
        name: key.name().to_owned(),
        mode: None,
        remaining: None,
        holder: None,
        hold_count: 0,
        readers: Vec::new(),
        waiting_writers: Vec::new(),
        permits: None,
        permit_holders: Vec::new(),
        fencing_token: None,
        last_fencing_token: text(counter).and_then(|c| token(&c)),
        last_forced_unlock: None,
    };
    let forced = pairs(forced);
    if !forced.is_empty() {
        let get = |k: &str| {
            forced
                .iter()
                .find(|(f, _)| f == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        info.last_forced_unlock = Some(ForcedUnlock {
            reason: get("reason"),
            by: get("by"),
            at: UNIX_EPOCH + Duration::from_millis(get("at").parse().unwrap_or(0)),
            mode: LockMode::named(&get("mode")),
            previous_owner: get("previous"),
        });
    }
    match kind.as_str() {
        "none" => {}
        "string" => {
            if pttl.is_none() {
                return Err(Error::WrongType {
                    name: key.name().to_owned(),
                    found: "string without expiry".to_owned(),
                });
            }
            let value = text(payload).unwrap_or_default();
            let (owner, description) = value.split_once('\t').unwrap_or((&value, ""));
            info.mode = Some(LockMode::SetNx);
            info.remaining = pttl;
            let (holder, d) = described(owner.to_owned(), description);
            info.holder = Some(holder);
            description_read = d;
            info.hold_count = 1;
            info.fencing_token = info.last_fencing_token;
        }
        "hash" => {
            let fields = pairs(payload);
            info.remaining = pttl;
            let field = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
            if let Some(owner) = field("owner") {
                // Reentrant: the holder's acquisitions are its `h:` fields.
                let holds: Vec<&str> = fields
                    .iter()
                    .filter(|(f, _)| f.starts_with("h:"))
                    .map(|(_, v)| v.as_str())
                    .collect();
                info.mode = Some(LockMode::Reentrant);
                info.hold_count = holds.len() as u32;
                let (holder, d) = earliest(owner, &holds);
                info.holder = Some(holder);
                description_read = d;
                info.fencing_token = field("fence").and_then(token);
            } else {
                let sets = [pairs(readers), pairs(intents)];
                description_read = rwlock::parse(&mut info, &fields, &sets, now);
            }
        }
        "zset" if pttl.is_some() => {
            info.remaining = pttl;
            permits_read = semaphore::parse(&mut info, &pairs(payload), now).ok_or_else(|| {
                Error::WrongType {
                    name: key.name().to_owned(),
                    found: "sorted set that is not a semaphore".to_owned(),
                }
            })?;
        }
        other => {
            return Err(Error::WrongType {
                name: key.name().to_owned(),
                found: other.to_owned(),
            })
        }
    }
    Ok((info, description_read, permits_read))
}

/// The first acquisition's description among several (re-entries come later).
fn earliest(owner: &str, descriptions: &[&str]) -> (Holder, Option<Described>) {
    descriptions
        .iter()
        .map(|d| described(owner.to_owned(), d))
        .min_by_key(|(h, _)| h.acquired_at)
        .unwrap_or_else(|| described(owner.to_owned(), ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_parse_and_tolerate_garbage() {
        let (h, d) = described("o".into(), "host=h1\tpid=42\tsite=a.rs:3\tat=1000");
        assert_eq!(d, None);
        assert_eq!(h.host.as_deref(), Some("h1"));
        assert_eq!(h.pid, Some(42));
        assert_eq!(h.site.as_deref(), Some("a.rs:3"));
        assert_eq!(h.acquired_at, Some(UNIX_EPOCH + Duration::from_secs(1)));
        let (h, _) = described("o".into(), "1");
        assert_eq!(h.host, None);
        assert_eq!(h.owner, "o");
    }
}
