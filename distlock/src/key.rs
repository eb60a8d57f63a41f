//! Lock names and the Redis keys derived from them.
//!
//! Every key of one lock (the lock itself, its fencing counter, later its wake-up channel)
//! must hash to one Redis Cluster slot so that one script can touch them all. Cluster hashes
//! only the first `{...}` of a key, so the keys are laid out as `<prefix>:<tagged name><suffix>`
//! where the tagged name holds the hash tag: the user's own `{...}` if the name has a complete
//! one (so `order:{42}` and `payment:{42}` can share a slot on purpose), else the whole name
//! wrapped in braces. Suffixes come after the tag and so never move the slot.

use std::ops::Range;
use std::sync::Arc;

use redis::{RedisWrite, ToRedisArgs};

use crate::error::Error;

/// A validated lock name with its Redis keys. Cheap to clone (one reference count): the guard,
/// the watchdog and the per-task table each keep one, and the hot path makes no copies.
#[derive(Debug, Clone)]
pub(crate) struct LockKey {
    /// `<prefix>:<tagged name>`: the lock's own key; other keys add a suffix.
    base: Arc<[u8]>,
    /// Where the name as the user wrote it sits in `base` (UTF-8, checked by `new`).
    name: Range<usize>,
    /// The name shortened for messages, only when it is too long to show whole.
    shortened: Option<Arc<str>>,
}

/// How much of a long name error messages show.
const DISPLAY_MAX: usize = 120;

/// Suffix of the pub/sub channel releases are announced on.
pub(crate) const CHANNEL_SUFFIX: &[u8] = b":wake";
/// Suffix of the mark a waiter sets on a busy setnx lock, so that its release publishes (the
/// setnx scripts derive it from the lock key, spelled `':waited'` there). It expires when the
/// holder's lease, as the waiter saw it, would have ended, and goes with the lock at its release.
pub(crate) const WAITED_SUFFIX: &[u8] = b":waited";
/// Suffix of the fencing counter.
const FENCE_SUFFIX: &[u8] = b":fence";
/// Suffix of the record of the last forced unlock (kept a while beside the lock, for operators).
pub(crate) const FORCED_SUFFIX: &[u8] = b":forced";

impl LockKey {
    /// Checks `name` and builds its keys. Refused: empty names, names longer than `max_len`
    /// bytes, and names that are not UTF-8 (names appear in errors, logs and channel names,
    /// and a stray byte string is far more often a bug than a choice; encode binary ids as hex).
    pub(crate) fn new(prefix: &str, name: &[u8], max_len: usize) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidKey {
            key: shorten(&String::from_utf8_lossy(name)),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if name.len() > max_len {
            return Err(invalid(format!(
                "the name is {} bytes; the limit is {max_len} (ClientBuilder::max_key_len)",
                name.len()
            )));
        }
        let name = std::str::from_utf8(name).map_err(|e| {
            invalid(format!(
                "the name is not UTF-8 ({e}); encode binary ids, e.g. as hex"
            ))
        })?;
        let separator = (!prefix.is_empty()).then_some(b':');
        let (open, close) = if has_hash_tag(name) {
            (None, None)
        } else {
            (Some(b'{'), Some(b'}'))
        };
        let start = prefix.len() + usize::from(separator.is_some()) + usize::from(open.is_some());
        // One allocation: every part has a known length.
        let base: Arc<[u8]> = prefix
            .bytes()
            .chain(separator)
            .chain(open)
            .chain(name.bytes())
            .chain(close)
            .collect();
        let shortened = (name.len() > DISPLAY_MAX).then(|| Arc::from(shorten(name)));
        Ok(LockKey {
            base,
            name: start..start + name.len(),
            shortened,
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
        crate::conn::slot(&self.base)
    }

    /// The key that holds the lock, shared: a reference count, not a copy.
    pub(crate) fn shared(&self) -> &Arc<[u8]> {
        &self.base
    }

    /// The pub/sub channel its releases are announced on.
    pub(crate) fn channel(&self) -> Vec<u8> {
        [&self.base[..], CHANNEL_SUFFIX].concat()
    }

    /// The counter that issues fencing tokens. It has no expiry: a counter that expired would
    /// restart at 1 and break the promise that tokens only grow.
    pub(crate) fn fence(&self) -> Vec<u8> {
        [&self.base[..], FENCE_SUFFIX].concat()
    }

    /// [`channel`](Self::channel) as a command argument, written without a copy of its own.
    pub(crate) fn channel_arg(&self) -> Suffixed<'_> {
        Suffixed(&self.base, CHANNEL_SUFFIX)
    }

    /// [`fence`](Self::fence) as a command argument, written without a copy of its own.
    pub(crate) fn fence_arg(&self) -> Suffixed<'_> {
        Suffixed(&self.base, FENCE_SUFFIX)
    }

    /// The record of the last forced unlock, as a command argument.
    pub(crate) fn forced_arg(&self) -> Suffixed<'_> {
        Suffixed(&self.base, FORCED_SUFFIX)
    }
}

/// A key made of the lock key and a suffix, written straight into a command's buffer.
pub(crate) struct Suffixed<'a>(&'a [u8], &'static [u8]);

impl ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        use std::io::Write as _;
        let mut arg = out.writer_for_next_arg();
        // Writes into a growing in-memory buffer cannot fail.
        let _ = arg.write_all(self.0);
        let _ = arg.write_all(self.1);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LockKey {
        LockKey::new("p", name.as_bytes(), 1024).expect("valid name")
    }

    #[test]
    fn plain_names_are_wrapped_in_a_hash_tag() {
        assert_eq!(key("order:42").lock(), b"p:{order:42}");
        assert_eq!(key("order:42").fence(), b"p:{order:42}:fence");
        assert_eq!(key("order:42").channel(), b"p:{order:42}:wake");
        assert_eq!(key("order:42").name(), "order:42");
        let bare = LockKey::new("", b"order:{42}", 1024).unwrap();
        assert_eq!(bare.lock(), b"order:{42}");
        assert_eq!(bare.name(), "order:{42}");
    }

    #[test]
    fn suffixed_arguments_match_the_derived_keys() {
        let k = key("order:42");
        let mut cmd = redis::cmd("X");
        cmd.arg(k.fence_arg()).arg(k.channel_arg());
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .skip(1)
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(args, vec![k.fence(), k.channel()]);
    }

    #[test]
    fn every_key_of_a_lock_shares_its_slot() {
        for name in [
            "order:42",
            "order:{42}",
            "a{b",
            "a{}b",
            "{x}y{z}",
            "ü:{}{7}",
        ] {
            let k = key(name);
            let slot = k.slot();
            assert_eq!(crate::conn::slot(&k.fence()), slot, "{name}");
            assert_eq!(crate::conn::slot(&k.channel()), slot, "{name}");
        }
        // A user's tag chooses the slot on purpose: locks sharing it share a slot.
        assert_eq!(key("order:{42}").slot(), key("payment:{42}").slot());
    }

    #[test]
    fn a_users_hash_tag_is_kept() {
        assert_eq!(key("order:{42}").lock(), b"p:order:{42}");
        assert_eq!(key("order:{42}:x").fence(), b"p:order:{42}:x:fence");
    }

    #[test]
    fn incomplete_or_empty_tags_are_wrapped() {
        assert_eq!(key("a{b").lock(), b"p:{a{b}");
        assert_eq!(key("a{}b").lock(), b"p:{a{}b}");
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
        assert!(validate_prefix("lo{cks}").is_err());
    }
}
