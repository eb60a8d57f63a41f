//! Random identities: owner tokens and client ids.

use std::sync::Arc;

use rand::Rng;

/// 128 random bits as 32 hex digits, appended to `s`: a fresh owner token for one acquisition,
/// so a release or extension can prove it is the holder (seeds 000-003: the value is a random
/// UUID).
fn push_owner_token(s: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = rand::rng().random::<u128>();
    s.extend((0..32).map(|i| char::from(HEX[(bits >> (124 - 4 * i)) as usize & 0xf])));
}

/// A fresh owner token that also says who holds the lock (see [`holder`]): the 32 random hex
/// digits, a tab, then the description. A setnx lock keeps only its token as its value, so
/// the description rides in it; release and renewal compare the whole value. Built in one
/// buffer and shared (the guard and the watchdog both keep it): two allocations per
/// acquisition.
pub(crate) fn owner_token_described(site: &dyn std::fmt::Display) -> Arc<str> {
    let mut s = String::with_capacity(33 + PROCESS.len() + 96);
    push_owner_token(&mut s);
    s.push('\t');
    push_holder(&mut s, site);
    Arc::from(s)
}

/// `host=<host>\tpid=<pid>`, computed once per process.
static PROCESS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("host={}\tpid={}", clean(&hostname()), std::process::id()));

/// Who takes a lock, stored with it for [`Client::inspect`](crate::Client::inspect):
/// `host=<host>\tpid=<pid>\tsite=<fn or file:line>\tat=<unix ms>`. Tabs and newlines in the
/// parts are replaced, so the fields always split.
pub(crate) fn holder(site: &dyn std::fmt::Display) -> String {
    let mut s = String::with_capacity(PROCESS.len() + 96);
    push_holder(&mut s, site);
    s
}

/// [`holder`], appended to `s`.
fn push_holder(s: &mut String, site: &dyn std::fmt::Display) {
    use std::fmt::Write as _;
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let start = s.len();
    s.push_str(&PROCESS);
    let _ = write!(s, "\tsite={site}\tat={at}");
    if s[start..].contains('\n') {
        let cleaned = s[start..].replace('\n', " ");
        s.truncate(start);
        s.push_str(&cleaned);
    }
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
    fn owner_token() -> String {
        let mut s = String::new();
        super::push_owner_token(&mut s);
        s
    }

    #[test]
    fn tokens_are_fixed_width_and_distinct() {
        let a = owner_token();
        let b = owner_token();
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
        assert_eq!(super::client_id().len(), 16);
        let described = super::owner_token_described(&"a\nsite");
        let (token, holder) = described.split_once('\t').expect("a tab");
        assert_eq!(token.len(), 32);
        assert!(holder.starts_with("host=") && holder.contains("\tsite=a site\tat="));
    }
}
