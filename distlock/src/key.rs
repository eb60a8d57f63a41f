//! Lock names and the Redis keys derived from them.
//!
//! Names come from request data (an attribute's `key = "order:<id>"` renders its parameters
//! verbatim), so the mapping from names to keys must be injective: no name may reach another
//! name's lock, a helper key of any lock, or a process's record, whatever braces, suffixes or
//! prefixes it spells. And every key of one lock must hash to one Redis Cluster slot, so that
//! one script can touch them all; a name's own hash tag (`order:{42}`) still chooses the slot,
//! so that `order:{42}` and `payment:{42}` can share one on purpose.
//!
//! # Layout
//!
//! A key is `<prefix>:<body>` for the lock itself, and `<prefix>:#<kind>:<body>` for a helper
//! key of the lock (`fence`, `waited`, `forced`, a read/write lock's `readers` and `intents`,
//! a semaphore's `slots`) or a process's record (`process`, the body made from the process's
//! tag as if it were a name); without a prefix the `<prefix>:` is left out. The body is the
//! name:
//!
//! | the name                                          | body               | for example              |
//! |---------------------------------------------------|--------------------|--------------------------|
//! | has no hash tag, starts with neither `{` nor `}`  | `{` name `}`       | `order:42` -> `{order:42}` |
//! | has no hash tag, starts with `{` or `}`           | `{{` name `}`      | `}x` -> `{{}x}`          |
//! | has a hash tag, starts with neither `{` nor `#`   | name               | `order:{42}` -> `order:{42}` |
//! | has a hash tag, starts with `{` or `#`            | `#` name           | `{k}:waited` -> `#{k}:waited` |
//!
//! ("Has a hash tag" as Redis Cluster reads one: a `{` and, after it, a `}` with at least one
//! byte between them.)
//!
//! Why no two (kind, name) pairs share a key under one prefix: the text after `<prefix>:`
//! tells what it is by its first two bytes. `{{` is the second form; `{` and any other byte
//! the first; `#` and `{` or `#` the fourth; `#` and a letter a helper key, whose kind runs to
//! the next `:` (no kind holds one) and whose body follows in the same four forms; any other
//! first byte is the third form. Within its form the name is held whole, so the key gives it
//! back. The property tests below check this over every short name made of the bytes that
//! matter (braces, `#`, `:`, letters of the kinds) and over random adversarial names.
//!
//! Why every key of a lock shares a slot: nothing before the body holds a brace (prefixes
//! refusing them), so Redis hashes what the body's first tag holds, in every key of the lock.
//! The braces the first two forms add always enclose at least one byte (the second form's
//! inner `{` is there for exactly that: `}x` wrapped as `{}x}` would be an empty tag, and Redis
//! would hash each key whole).
//!
//! Why this layout rather than one that marks every tagged name: the lock key of every name
//! but those starting with a brace, and tagged ones starting with `#`, is the key earlier
//! versions used, so old and new clients keep excluding each other during a rolling upgrade.
//! Every name that reached a helper key or another name's lock in earlier versions
//! (`{k}:waited`, `{f}:fence`, `{<tag>}:process`, `{order:42}`) starts with `{` and moved.
//! Helper keys all moved: old waiters miss new releases (their bounded fallback covers it),
//! and fencing counters start anew (the clock floor keeps tokens growing). A counter an
//! earlier version left behind (it never expired) stays where it was: a tagged name spelled
//! like it (`order:{42}:fence`) finds a string without expiry and is refused as the
//! application's data, never shared.
//!
//! A lock's pub/sub channel is its lock key's string: channels are a namespace of their own,
//! injective as the keys are, in the lock's slot for sharded pub/sub, and the scripts publish
//! on `KEYS[1]` without an argument more.
//!
//! Prefixes are not separated from each other: a client with prefix `a` and one with prefix
//! `a:b` share a server's keys (`a:b:{x}` is `b:{x}` under the first and `x` under the second).
//! Give deployments that share a server prefixes where neither is the other followed by `:`.

use std::ops::Range;
use std::sync::Arc;

use redis::{RedisWrite, ToRedisArgs};

use crate::error::{Error, LockName};
use crate::mode::Primitive;

mod set;

use set::Members;

/// A validated lock name with its Redis keys. Cheap to clone (one reference count): the guard,
/// the watchdog and the per-task table each keep one, and the hot path makes no copies.
#[derive(Debug, Clone)]
pub(crate) struct LockKey {
    /// `<prefix>:<body>`: the lock's own key (and channel).
    base: Arc<[u8]>,
    /// Where the body starts in `base`: helper keys put their kind there.
    body: usize,
    /// Where the name as the user wrote it sits in `base` (UTF-8, checked by `new`).
    name: Range<usize>,
    /// The name for messages where it is not the name in `base`: shortened when too long to
    /// show whole, or a set's list of names.
    shortened: Option<Arc<str>>,
    /// A set of names taken together (`Client::lock_many`), in their fixed order; `base` is
    /// then the first one's (see `set`).
    set: Option<Arc<Members>>,
    /// What the name names, for messages: the request's mode, or the election made on it.
    primitive: Primitive,
}

/// How much of a long name error messages show.
const DISPLAY_MAX: usize = 120;

/// What a helper key holds; spelled `#<kind>:` before the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The fencing counter.
    Fence,
    /// A setnx lock's waited-for mark, set by a waiter's busy attempt so that the release
    /// publishes; it expires when the holder's lease, as the waiter saw it, would have ended,
    /// and goes with the lock at its release.
    Waited,
    /// The record of the lock's last forced unlock, kept a while for operators.
    Forced,
    /// A process's record (host, pid, call sites); its body is the process's tag.
    Process,
    /// A read/write lock's readers: a sorted set of owners scored by their lease's end.
    Readers,
    /// A read/write lock's waiting writers: a sorted set of owners scored by their intent's
    /// end.
    Intents,
    /// A semaphore's permit slots: a hash from each fenced permit's owner to its slot.
    Slots,
}

impl Kind {
    /// Every kind, for the tests.
    #[cfg(test)]
    const ALL: [Kind; 7] = [
        Kind::Fence,
        Kind::Waited,
        Kind::Forced,
        Kind::Process,
        Kind::Readers,
        Kind::Intents,
        Kind::Slots,
    ];

    /// What goes between `<prefix>:` and the body.
    fn infix(self) -> &'static [u8] {
        match self {
            Kind::Fence => b"#fence:",
            Kind::Waited => b"#waited:",
            Kind::Forced => b"#forced:",
            Kind::Process => b"#process:",
            Kind::Readers => b"#readers:",
            Kind::Intents => b"#intents:",
            Kind::Slots => b"#slots:",
        }
    }
}

/// How a name is written into a key (see the module doc): the bytes before and after it.
fn wrapping(name: &str) -> (&'static [u8], &'static [u8]) {
    let first = name.as_bytes().first().copied();
    if has_hash_tag(name) {
        match first {
            Some(b'{' | b'#') => (b"#", b""),
            _ => (b"", b""),
        }
    } else {
        match first {
            Some(b'{' | b'}') => (b"{{", b"}"),
            _ => (b"{", b"}"),
        }
    }
}

impl LockKey {
    /// Checks `name` and builds its keys. Refused: empty names, names longer than `max_len`
    /// bytes, and names that are not UTF-8 (names appear in errors, logs and channel names,
    /// and a stray byte string is far more often a bug than a choice; encode binary ids as hex).
    /// Anything else is a name of its own, braces and all.
    pub(crate) fn new(prefix: &str, name: &[u8], max_len: usize) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidName {
            name: shorten(&String::from_utf8_lossy(name)).into(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if name.len() > max_len {
            return Err(invalid(format!(
                "the name is {} bytes; the limit is {max_len} (ClientBuilder::max_name_len)",
                name.len()
            )));
        }
        let name = std::str::from_utf8(name).map_err(|e| {
            invalid(format!(
                "the name is not UTF-8 ({e}); encode binary ids, e.g. as hex"
            ))
        })?;
        let (parts, body, start) = layout(prefix, None, name);
        // Straight into the shared buffer: one allocation, where a `Vec` first took two.
        let len = parts.iter().map(|p| p.len()).sum();
        let mut base: Arc<[u8]> = std::iter::repeat_n(0, len).collect();
        let mut at = 0;
        if let Some(bytes) = Arc::get_mut(&mut base) {
            for part in parts {
                bytes[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        }
        let shortened = (name.len() > DISPLAY_MAX).then(|| Arc::from(shorten(name)));
        Ok(LockKey {
            base,
            body,
            name: start..start + name.len(),
            shortened,
            set: None,
            primitive: Primitive::Lock,
        })
    }

    /// The same key, named in messages as a `primitive` (the key of a lock by default).
    pub(crate) fn naming(self, primitive: Primitive) -> Self {
        LockKey { primitive, ..self }
    }

    /// The name for errors, with what it names: a set's is its members' primitive's set.
    pub(crate) fn lock_name(&self) -> LockName {
        let primitive = match self.set {
            Some(_) => self.primitive.set(),
            None => self.primitive,
        };
        LockName::new(self.name(), primitive)
    }

    /// The name for messages.
    pub(crate) fn name(&self) -> &str {
        match &self.shortened {
            Some(short) => short,
            // Checked to be UTF-8 in `new`; the fallback is never taken.
            None => std::str::from_utf8(&self.base[self.name.clone()]).unwrap_or_default(),
        }
    }

    /// The key that holds the lock.
    pub(crate) fn lock(&self) -> &[u8] {
        &self.base
    }

    /// The Redis Cluster slot of every key of this lock.
    pub(crate) fn slot(&self) -> u16 {
        slot(&self.base)
    }

    /// The key that holds the lock, shared: a reference count, not a copy.
    pub(crate) fn shared(&self) -> &Arc<[u8]> {
        &self.base
    }

    /// The pub/sub channel its releases are announced on: the lock key's string (see the
    /// module doc; [`lock_of_channel`] maps it back).
    pub(crate) fn channel(&self) -> Vec<u8> {
        self.base.to_vec()
    }

    /// A helper key of this lock.
    #[cfg(test)]
    pub(crate) fn helper(&self, kind: Kind) -> Vec<u8> {
        [
            &self.base[..self.body],
            kind.infix(),
            &self.base[self.body..],
        ]
        .concat()
    }

    /// [`helper`](Self::helper) as a command argument, written without a copy of its own.
    pub(crate) fn helper_arg(&self, kind: Kind) -> Helper<'_> {
        Helper {
            before: &self.base[..self.body],
            infix: kind.infix(),
            body: &self.base[self.body..],
        }
    }
}

/// The key of `kind` for `name` under `prefix` (the lock key for `None`), where the body
/// starts in it, and where the name does.
fn encode(prefix: &str, kind: Option<Kind>, name: &str) -> (Vec<u8>, usize, usize) {
    let (parts, body, start) = layout(prefix, kind, name);
    (parts.concat(), body, start)
}

/// [`encode`]'s key as the pieces it is made of, in order.
fn layout<'a>(prefix: &'a str, kind: Option<Kind>, name: &'a str) -> ([&'a [u8]; 6], usize, usize) {
    let separator: &[u8] = if prefix.is_empty() { b"" } else { b":" };
    let infix = kind.map_or(&b""[..], Kind::infix);
    let (open, close) = wrapping(name);
    let body = prefix.len() + separator.len() + infix.len();
    let parts = [
        prefix.as_bytes(),
        separator,
        infix,
        open,
        name.as_bytes(),
        close,
    ];
    (parts, body, body + open.len())
}

/// The key of a process's record, made like a helper key of a lock named by the process's tag
/// (which no lock has: no lock key or helper key is ever this).
pub(crate) fn record_key(prefix: &str, process: &str) -> Vec<u8> {
    encode(prefix, Some(Kind::Process), process).0
}

/// The lock a channel announces the releases of: the channel is the lock key itself.
pub(crate) fn lock_of_channel(channel: &[u8]) -> &[u8] {
    channel
}

/// The lock name a key under `prefix` was made from, if it is a lock key (not a helper key,
/// a record, or a key the layout never makes).
pub(crate) fn name_of(prefix: &str, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let body = if prefix.is_empty() {
        key
    } else {
        key.strip_prefix(prefix)?.strip_prefix(':')?
    };
    let name = if let Some(inner) = body.strip_prefix("{{") {
        inner.strip_suffix('}')?
    } else if let Some(inner) = body.strip_prefix('{') {
        inner.strip_suffix('}')?
    } else if let Some(inner) = body.strip_prefix('#') {
        inner
    } else {
        body
    };
    // Only the layout's own spelling of the name: anything else decodes to a name whose key
    // is another.
    (!name.is_empty() && encode(prefix, None, name).0 == key.as_bytes()).then(|| name.to_owned())
}

/// A helper key, written straight into a command's buffer.
pub(crate) struct Helper<'a> {
    before: &'a [u8],
    infix: &'static [u8],
    body: &'a [u8],
}

impl<'a> Helper<'a> {
    /// The key, in the pieces it is written from.
    pub(crate) fn parts(&self) -> [&'a [u8]; 3] {
        [self.before, self.infix, self.body]
    }
}

impl ToRedisArgs for Helper<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        use std::io::Write as _;
        let mut arg = out.writer_for_next_arg();
        // Writes into a growing in-memory buffer cannot fail.
        let _ = arg.write_all(self.before);
        let _ = arg.write_all(self.infix);
        let _ = arg.write_all(self.body);
    }
}

/// True when Redis Cluster would hash only a part of `name`: a `{` followed later by a `}`
/// with at least one byte between them (an empty `{}` makes Cluster hash the whole key).
pub(crate) fn has_hash_tag(name: &str) -> bool {
    match name.find('{') {
        Some(open) => match name[open + 1..].find('}') {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

fn shorten(s: &str) -> String {
    if s.len() <= DISPLAY_MAX {
        return s.to_owned();
    }
    let mut end = DISPLAY_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &s[..end], s.len())
}

/// Checks a key prefix: braces in it would become the hash tag of every lock.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.contains(['{', '}']) {
        return Err(Error::config(format!(
            "key prefix `{prefix}` contains `{{` or `}}`, which would become the Redis Cluster hash tag of every lock"
        )));
    }
    Ok(())
}

/// The Redis Cluster slot of a key: CRC16 of its hash tag (or of the whole key without one),
/// modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let len = key[open + 1..].iter().position(|&b| b == b'}')?;
        (len > 0).then(|| &key[open + 1..open + 1 + len])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests;
