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

/// An owner token that also says who holds the lock (see [`holder`]): the 32 random hex digits,
/// a tab, then the description. A setnx lock keeps only its token as its value, so the
/// description rides in it; release and renewal compare the whole value as before.
pub(crate) fn owner_token_described(holder: &str) -> Arc<str> {
    let token = owner_token();
    let mut s = String::with_capacity(token.len() + 1 + holder.len());
    s.push_str(&token);
    s.push('\t');
    s.push_str(holder);
    Arc::from(s)
}

/// Who takes a lock, stored with it for [`Client::inspect`](crate::Client::inspect):
/// `host=<host>\tpid=<pid>\tsite=<fn or file:line>\tat=<unix ms>`. Tabs and newlines in the
/// parts are replaced, so the fields always split.
pub(crate) fn holder(site: &dyn std::fmt::Display) -> String {
    use std::fmt::Write as _;
    static PROCESS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("host={}\tpid={}", clean(&hostname()), std::process::id())
    });
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut s = String::with_capacity(PROCESS.len() + 64);
    s.push_str(&PROCESS);
    let _ = write!(s, "\tsite={}\tat={at}", site);
    if s.contains('\n') {
        s = s.replace('\n', " ");
    }
    s
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

/// This machine's name, as the kernel knows it (Linux), else the usual variables.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
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
