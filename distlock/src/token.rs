//! Random identities: owner tokens and client ids.

use std::sync::Arc;

use rand::Rng;

/// 128 random bits as 32 hex digits: a fresh owner token for one acquisition, so a release
/// or extension can prove it is the holder (seeds 000-003: the value is a random UUID).
/// Shared, since the guard and the watchdog both keep it: one allocation per acquisition.
pub(crate) fn owner_token() -> Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = rand::rng().random::<u128>();
    let mut digits = [0u8; 32];
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[(bits >> (124 - 4 * i)) as usize & 0xf];
    }
    // ASCII hex digits: always UTF-8.
    Arc::from(std::str::from_utf8(&digits).unwrap_or_default())
}

/// The nonce of an acquisition that needs none (a setnx lock on one node: its token already
/// names the acquisition, and its release is heard once). Shared, so it costs no allocation.
pub(crate) fn no_nonce() -> Arc<str> {
    static EMPTY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));
    EMPTY.clone()
}

/// An id unique to one release call, in this process and across processes: what a quorum's
/// setnx release publishes (see `notify`).
pub(crate) fn wake_id() -> String {
    static PROCESS: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| rand::rng().random());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}.{n:x}", *PROCESS)
}

/// 64 random bits as 16 hex digits, naming one client (one process's connection set).
pub(crate) fn client_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_fixed_width_and_distinct() {
        let a = super::owner_token();
        let b = super::owner_token();
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
        assert_eq!(super::client_id().len(), 16);
    }
}
