//! For operators: who holds a lock, listing locks, and removing one by force.
//!
//! Every hold carries a short description of who took it (the process's tag, the call site's
//! number, the time), written by the acquire script in the same step as the hold (setnx: after
//! the owner token in the lock's value; reentrant and write holds: as the value of the
//! acquisition's field); the process's record says what the tag and number stand for (host,
//! pid, site; see `identity` and `nodes::records`). Inspection reads both; the lock path pays about 20 bytes per
//! hold and one write per call site and server.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::algorithm::{evalsha, Lua};
use crate::error::{Error, Op};
use crate::identity::{self, Described};
use crate::key::{Kind, LockKey};
use crate::mode::LockMode;
use crate::runtime::Shared;
use crate::telemetry;
use crate::token::FencingToken;

mod rwlock;
mod semaphore;

pub use semaphore::PermitHolder;

/// The old name of [`PermitHolder`], kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `PermitHolder`: an inspection record of who holds a permit, not a permit"
)]
pub type Permit = PermitHolder;

/// The old name of [`ReadHolder`], kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `ReadHolder`: an inspection record of who holds the read side, not a read guard"
)]
pub type Reader = ReadHolder;

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

/// Who holds the read side of a read/write lock, as [`Client::inspect`](crate::Client::inspect)
/// reads it: one reading owner, a record, not a read guard (that is the reader's
/// [`Guard`](crate::Guard)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadHolder {
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

/// A lock's state; see [`Client::inspect`](crate::Client::inspect).
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
    pub readers: Vec<ReadHolder>,
    /// Writers waiting for a read/write lock (they keep new readers out).
    pub waiting_writers: Vec<String>,
    /// A semaphore's number of permits, as its holders recorded it.
    pub permits: Option<u32>,
    /// A semaphore's permits held now, the first whose lease ends first.
    pub permit_holders: Vec<PermitHolder>,
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

/// Reads who holds the lock `name` (see [`Client::inspect`](crate::Client::inspect)): every
/// node at once, through the nodes layer; the lock as a majority of them reads it (one
/// holder, or free), or while none does (a quorum forming or coming apart) the first reading
/// that finds it held; its holders completed from their processes' records.
pub(crate) async fn read(shared: &Shared, name: &[u8]) -> Result<LockInfo, Error> {
    let key = shared.key(name)?;
    let mut cmd = evalsha(
        &INSPECT,
        INSPECTED_KEYS,
        INSPECTED_KEYS,
        INSPECTED_KEYS * key.lock().len() + 48,
    );
    inspected_keys(&mut cmd, &key);
    let nodes = &shared.nodes;
    let readings = nodes
        .read_every(&key, &INSPECT, &cmd, |reply| parse_info(&key, reply))
        .await?;
    let alike = |(info, ..): &Parsed| (info.mode, info.holder.as_ref().map(|h| h.owner.clone()));
    let chosen = match readings.agreed(alike) {
        Some(agreed) => agreed.answers.first().map(|&(node, _)| node),
        None => readings
            .all()
            .find(|(_, (info, ..))| info.is_held())
            .map(|&(node, _)| node),
    };
    let Some((node, (mut info, described, permits))) =
        chosen.and_then(|node| Some((node, readings.into_answer(node)?)))
    else {
        return Err(Error::config("the client has no nodes"));
    };
    let prefix = &shared.prefix;
    if let (Some(holder), Some(described)) = (&mut info.holder, described) {
        (holder.host, holder.pid, holder.site) = nodes.look_up(node, prefix, &described).await;
    }
    semaphore::look_up(nodes, node, prefix, &mut info.permit_holders, &permits).await;
    Ok(info)
}

/// The names of the locks held now under the client's key prefix (see
/// [`Client::list`](crate::Client::list)).
pub(crate) async fn list(shared: &Shared) -> Result<Vec<String>, Error> {
    shared.nodes.lock_names(&shared.prefix).await
}

/// Removes the lock `name` whoever holds it, on every node (see
/// [`Client::force_unlock`](crate::Client::force_unlock)). True when a node had it.
pub(crate) async fn force_unlock(
    shared: &Shared,
    name: &[u8],
    reason: &str,
) -> Result<bool, Error> {
    let key = shared.key(name)?;
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(Error::config(
            "force_unlock needs a reason: it is logged and kept beside the lock",
        ));
    }
    let by = identity::process_description();
    let sharded = if shared.nodes.publishes_sharded() {
        "s"
    } else {
        ""
    };
    let mut cmd = evalsha(
        &FORCE_UNLOCK,
        5,
        9,
        5 * key.lock().len() + reason.len() + 256,
    );
    cmd.arg(key.lock())
        .arg(key.helper_arg(Kind::Forced))
        .arg(key.helper_arg(Kind::Readers))
        .arg(key.helper_arg(Kind::Intents))
        .arg(key.helper_arg(Kind::Slots))
        .arg(reason)
        .arg(&by)
        .arg(FORCED_RECORD_KEPT.as_millis() as u64)
        .arg(sharded);
    let replies = shared
        .nodes
        .on_every_node(Op::ForceUnlock, &key, &FORCE_UNLOCK, &cmd, Ok)
        .await;
    let (mut removed, mut last_error) = (None, None);
    for reply in replies {
        match reply {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::Int(1)) => removed = Some(items.get(1).and_then(text)),
                Some(Value::Int(-1)) => {
                    return Err(Error::WrongType {
                        name: key.lock_name(),
                        found: items.get(1).and_then(text).unwrap_or_default(),
                    })
                }
                _ => {}
            },
            Ok(_) => {}
            Err(e) => last_error = Some(e),
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

/// How many keys the inspection script reads (`inspect.lua`'s KEYS).
pub(crate) const INSPECTED_KEYS: usize = 6;

/// The inspection script's KEYS, in its order: the lock, its fencing counter, its last forced
/// unlock, a read/write lock's readers and intents, a semaphore's permit slots.
pub(crate) fn inspected_keys(cmd: &mut redis::Cmd, key: &LockKey) {
    cmd.arg(key.lock())
        .arg(key.helper_arg(Kind::Fence))
        .arg(key.helper_arg(Kind::Forced))
        .arg(key.helper_arg(Kind::Readers))
        .arg(key.helper_arg(Kind::Intents))
        .arg(key.helper_arg(Kind::Slots));
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
    let [kind, pttl, payload, counter, forced, now, readers, intents, slots] = items.as_slice()
    else {
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
                    name: key.lock_name(),
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
            let members = pairs(payload);
            permits_read =
                semaphore::parse(&mut info, &members, &pairs(slots), now).ok_or_else(|| {
                    Error::WrongType {
                        name: key.lock_name(),
                        found: "sorted set that is not a semaphore".to_owned(),
                    }
                })?;
        }
        other => {
            return Err(Error::WrongType {
                name: key.lock_name(),
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
