//! Lock names and the Redis keys derived from them.
//!
//! Every key of one lock (the lock itself, its fencing counter, later its wake-up channel)
//! must hash to one Redis Cluster slot so that one script can touch them all. Cluster hashes
//! only the first `{...}` of a key, so the keys are laid out as `<prefix>:<tagged name><suffix>`
//! where the tagged name holds the hash tag: the user's own `{...}` if the name has a complete
//! one (so `order:{42}` and `payment:{42}` can share a slot on purpose), else the whole name
//! wrapped in braces. Suffixes come after the tag and so never move the slot.

use crate::error::Error;

/// A validated lock name with its Redis keys.
#[derive(Debug, Clone)]
pub(crate) struct LockKey {
    /// The name as the user wrote it, for errors and logs (shortened if very long).
    display: String,
    /// `<prefix>:<tagged name>`: the lock's own key; other keys add a suffix.
    base: Vec<u8>,
}

/// How much of a long name error messages show.
const DISPLAY_MAX: usize = 120;

impl LockKey {
    /// Checks `name` and builds its keys. Refused: empty names, names longer than `max_len`
    /// bytes, and names that are not UTF-8 (names appear in errors, logs and channel names,
    /// and a stray byte string is far more often a bug than a choice; encode binary ids as hex).
    pub(crate) fn new(prefix: &str, name: &[u8], max_len: usize) -> Result<Self, Error> {
        let display = shorten(&String::from_utf8_lossy(name));
        let invalid = |reason: String| Error::InvalidKey {
            key: display.clone(),
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
        let mut base = Vec::with_capacity(prefix.len() + name.len() + 3);
        if !prefix.is_empty() {
            base.extend_from_slice(prefix.as_bytes());
            base.push(b':');
        }
        if has_hash_tag(name) {
            base.extend_from_slice(name.as_bytes());
        } else {
            base.push(b'{');
            base.extend_from_slice(name.as_bytes());
            base.push(b'}');
        }
        Ok(LockKey {
            display: shorten(name),
            base,
        })
    }

    /// The name for messages.
    pub(crate) fn name(&self) -> &str {
        &self.display
    }

    /// The key that holds the lock.
    pub(crate) fn lock(&self) -> &[u8] {
        &self.base
    }

    /// A helper key of this lock, in the same slot.
    pub(crate) fn derived(&self, suffix: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.base.len() + 1 + suffix.len());
        k.extend_from_slice(&self.base);
        k.push(b':');
        k.extend_from_slice(suffix.as_bytes());
        k
    }

    /// The pub/sub channel its releases are announced on.
    pub(crate) fn channel(&self) -> Vec<u8> {
        self.derived("wake")
    }

    /// The counter that issues fencing tokens. It has no expiry: a counter that expired would
    /// restart at 1 and break the promise that tokens only grow.
    pub(crate) fn fence(&self) -> Vec<u8> {
        self.derived("fence")
    }
}

/// True when Redis Cluster would hash only a part of `name`: a `{` followed later by a `}`
/// with at least one byte between them (an empty `{}` makes Cluster hash the whole key).
fn has_hash_tag(name: &str) -> bool {
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
