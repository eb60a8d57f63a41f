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
//! key of the lock (`fence`, `waited`, `forced`) or a process's record (`process`, the body
//! made from the process's tag as if it were a name); without a prefix the `<prefix>:` is left
//! out. The body is the name:
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

use crate::error::Error;

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
}

impl Kind {
    /// Every kind, for the tests.
    #[cfg(test)]
    const ALL: [Kind; 4] = [Kind::Fence, Kind::Waited, Kind::Forced, Kind::Process];

    /// What goes between `<prefix>:` and the body.
    fn infix(self) -> &'static [u8] {
        match self {
            Kind::Fence => b"#fence:",
            Kind::Waited => b"#waited:",
            Kind::Forced => b"#forced:",
            Kind::Process => b"#process:",
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
            name: shorten(&String::from_utf8_lossy(name)),
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
        let (base, body, start) = encode(prefix, None, name);
        let shortened = (name.len() > DISPLAY_MAX).then(|| Arc::from(shorten(name)));
        Ok(LockKey {
            base: base.into(),
            body,
            name: start..start + name.len(),
            shortened,
            set: None,
        })
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
    let separator: &[u8] = if prefix.is_empty() { b"" } else { b":" };
    let infix = kind.map_or(&b""[..], Kind::infix);
    let (open, close) = wrapping(name);
    let body = prefix.len() + separator.len() + infix.len();
    // One allocation: every part has a known length.
    let mut key = Vec::with_capacity(body + open.len() + name.len() + close.len());
    for part in [
        prefix.as_bytes(),
        separator,
        infix,
        open,
        name.as_bytes(),
        close,
    ] {
        key.extend_from_slice(part);
    }
    (key, body, body + open.len())
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
mod tests {
    #[test]
    fn slots_are_computed_like_redis_cluster() {
        // `CLUSTER KEYSLOT` answers.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"distlock:{order:42}:fence"), slot(b"order:42"));
        assert_eq!(slot(b"a{}b"), slot(b"a{}b")); // empty tag: whole key
    }

    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn key(name: &str) -> LockKey {
        LockKey::new("p", name.as_bytes(), 1 << 20).expect("valid name")
    }

    /// Every key `name` has under `prefix`: the lock key, then one per kind.
    fn keys(prefix: &str, name: &str) -> Vec<(Option<Kind>, Vec<u8>)> {
        let k = LockKey::new(prefix, name.as_bytes(), 1 << 20).expect("valid name");
        let mut all = vec![(None, k.lock().to_vec())];
        for kind in Kind::ALL {
            all.push((Some(kind), k.helper(kind)));
        }
        all
    }

    /// Checks the layout's promises over `names` under `prefix`: no key is made twice (from
    /// another name or another kind), every key of a name shares its slot, the lock key gives
    /// the name back and no helper key passes for a lock key.
    fn check(prefix: &str, names: impl IntoIterator<Item = String>) -> Result<(), String> {
        let mut seen: HashMap<Vec<u8>, (Option<Kind>, String)> = HashMap::new();
        for name in names {
            let all = keys(prefix, &name);
            let first = slot(&all[0].1);
            for (kind, key) in all {
                let shown = String::from_utf8_lossy(&key).into_owned();
                if let Some(earlier) = seen.insert(key.clone(), (kind, name.clone())) {
                    if earlier != (kind, name.clone()) {
                        return Err(format!("`{shown}` is {earlier:?} and {:?}", (kind, &name)));
                    }
                }
                if slot(&key) != first {
                    return Err(format!("`{shown}` of `{name}` is in another slot"));
                }
                let back = name_of(prefix, &key);
                match kind {
                    None if back.as_deref() != Some(name.as_str()) => {
                        return Err(format!("`{shown}` reads back as {back:?}, not `{name}`"));
                    }
                    Some(kind) if back.is_some() => {
                        return Err(format!(
                            "{kind:?} key `{shown}` passes for the lock {back:?}"
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    #[test]
    fn the_layout_as_documented() {
        let cases = [
            ("order:42", "p:{order:42}", "p:#fence:{order:42}"),
            ("}x", "p:{{}x}", "p:#fence:{{}x}"),
            ("{x", "p:{{{x}", "p:#fence:{{{x}"),
            ("#x", "p:{#x}", "p:#fence:{#x}"),
            ("order:{42}", "p:order:{42}", "p:#fence:order:{42}"),
            ("{k}:waited", "p:#{k}:waited", "p:#fence:#{k}:waited"),
            ("#a{b}", "p:##a{b}", "p:#fence:##a{b}"),
        ];
        for (name, lock, fence) in cases {
            let k = key(name);
            assert_eq!(k.lock(), lock.as_bytes(), "{name}");
            assert_eq!(k.helper(Kind::Fence), fence.as_bytes(), "{name}");
            assert_eq!(k.name(), name);
            assert_eq!(k.channel(), k.lock());
        }
        assert_eq!(key("x").helper(Kind::Waited), b"p:#waited:{x}");
        assert_eq!(key("x").helper(Kind::Forced), b"p:#forced:{x}");
        assert_eq!(record_key("p", "ABCDEFGH"), b"p:#process:{ABCDEFGH}");
        assert_eq!(record_key("", "ABCDEFGH"), b"#process:{ABCDEFGH}");
        let bare = LockKey::new("", b"order:{42}", 1024).unwrap();
        assert_eq!(bare.lock(), b"order:{42}");
        assert_eq!(bare.helper(Kind::Fence), b"#fence:order:{42}");
        assert_eq!(lock_of_channel(&key("x").channel()), key("x").lock());
    }

    #[test]
    fn helper_arguments_match_the_helper_keys() {
        let k = key("order:42");
        let mut cmd = redis::cmd("X");
        for kind in Kind::ALL {
            cmd.arg(k.helper_arg(kind));
        }
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .skip(1)
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let expected: Vec<Vec<u8>> = Kind::ALL.iter().map(|&kind| k.helper(kind)).collect();
        assert_eq!(args, expected);
    }

    /// Every name of up to 6 bytes drawn from the bytes the layout gives a meaning to (braces,
    /// `#`, `:`), a kind's first letter and another letter: 55,986 names, each key once.
    #[test]
    fn every_short_name_has_keys_of_its_own() {
        const BYTES: &[u8] = b"{}#:fa";
        let mut names = vec![String::new()];
        let mut all = Vec::new();
        for _ in 0..6 {
            names = names
                .iter()
                .flat_map(|n| BYTES.iter().map(move |&b| format!("{n}{}", b as char)))
                .collect();
            all.extend(names.iter().cloned());
        }
        for prefix in ["p", "", "p:q"] {
            check(prefix, all.iter().cloned()).unwrap();
        }
    }

    #[test]
    fn a_users_hash_tag_chooses_the_slot() {
        assert_eq!(key("order:{42}").slot(), key("payment:{42}").slot());
        assert_eq!(key("{42}:order").slot(), key("payment:{42}").slot());
        assert_eq!(key("order:{42}").slot(), slot(b"42"));
        assert_eq!(key("order:42").slot(), slot(b"order:42"));
    }

    #[test]
    fn keys_of_other_prefixes_or_shapes_are_not_lock_names() {
        for key in [
            &b"other:{x}"[..],
            b"p:#fence:{x}",
            b"p:{x",
            b"p:{}",
            b"p:#x",
            b"p:x",
            b"p:{x{y}}",
            b"p:\xff",
        ] {
            assert_eq!(name_of("p", key), None, "{}", String::from_utf8_lossy(key));
        }
        assert_eq!(name_of("", b"{x}").as_deref(), Some("x"));
        assert_eq!(name_of("p", b"p:x{y}").as_deref(), Some("x{y}"));
    }

    fn adversarial_name() -> impl Strategy<Value = String> {
        let fragment = prop::sample::select(vec![
            "{",
            "}",
            "{}",
            "}{",
            "#",
            "##",
            ":",
            "fence",
            ":fence",
            "waited",
            ":waited",
            "forced",
            "process",
            ":process",
            "#fence:",
            "#waited:",
            "#process:",
            "p:",
            "p",
            "distlock:",
            "{x}",
            "{p}",
            "x",
            "42",
            "ü",
            "é{",
            " ",
            "\t",
        ]);
        prop::collection::vec(fragment, 1..8).prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn adversarial_names_never_share_a_key(
            names in prop::collection::vec(adversarial_name(), 2..12),
            prefix in prop::sample::select(vec!["distlock", "", "p", "a:b", "#", "p:#fence"]),
        ) {
            let result = check(prefix, names);
            prop_assert!(result.is_ok(), "{}", result.unwrap_err());
        }
    }

    /// The lifetime of a fencing counter, as the docs give it (lib.rs and the README, "Keys"):
    /// `fence.lua` is where it is set.
    #[test]
    fn fencing_counters_live_a_day_after_their_last_use() {
        let day_ms = 24 * 3600 * 1000;
        assert!(
            include_str!("fence.lua").contains(&format!("local FENCE_KEPT_MS = '{day_ms}'")),
            "fence.lua and the docs disagree on the counters' lifetime"
        );
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        let err = |n: &[u8]| LockKey::new("p", n, 16).unwrap_err().to_string();
        assert!(err(b"").contains("empty"));
        assert!(err(&[b'a'; 17]).contains("limit is 16"));
        assert!(err(b"\xff\xfe").contains("not UTF-8"));
    }

    #[test]
    fn long_names_are_shortened_for_display() {
        let long = "x".repeat(1000);
        let k = LockKey::new("p", long.as_bytes(), 4096).unwrap();
        assert!(k.name().len() < 200);
        assert!(k.name().ends_with("(1000 bytes)"));
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(validate_prefix("locks").is_ok());
        assert!(validate_prefix("locks#1").is_ok());
        assert!(validate_prefix("lo{cks}").is_err());
    }
}
