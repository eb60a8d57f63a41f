//! Random identities: owner tokens and client ids.

use std::sync::Arc;

use rand::Rng;

use crate::holders::{self, Site, ALPHABET};

/// Length of an owner token.
pub(crate) const TOKEN_LEN: usize = 21;

/// 126 random bits as 21 characters of URL-safe base 64, appended to `s`: a fresh owner token
/// for one acquisition, so a release or extension can prove it is the holder (the usual
/// value is a random UUID, which has 122).
fn push_owner_token(s: &mut String) {
    let bits = rand::rng().random::<u128>();
    let mut chars = [0u8; TOKEN_LEN];
    for (i, c) in chars.iter_mut().enumerate() {
        *c = ALPHABET[(bits >> (6 * i)) as usize & 63];
    }
    // Written as one str, not 21 chars (each `char` push encodes UTF-8 and checks capacity).
    s.push_str(std::str::from_utf8(&chars).unwrap_or_default());
}

/// A fresh owner token that also says who holds the lock (see [`holders`](crate::holders)):
/// the token, a tab, then the description, 41 or 42 bytes. A setnx lock keeps only its token
/// as its value, so the description rides in it; release and renewal compare the whole value.
/// Built in one buffer and shared (the guard and the watchdog both keep it): two allocations
/// per acquisition. The description up to its time is composed once per thread and site, not
/// per acquisition.
pub(crate) fn owner_token_described(site: Site) -> Arc<str> {
    thread_local! {
        static DESCRIBED: std::cell::RefCell<((usize, usize), String, String)> =
            const { std::cell::RefCell::new(((0, 0), String::new(), String::new())) };
    }
    DESCRIBED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != site.id() || cached.1.is_empty() {
            cached.1.clear();
            holders::push_up_to_time(&mut cached.1, site);
            cached.0 = site.id();
        }
        // Composed in a buffer the thread keeps, then copied once into the shared value.
        let mut s = std::mem::take(&mut cached.2);
        s.clear();
        push_owner_token(&mut s);
        s.push('\t');
        s.push_str(&cached.1);
        holders::push_time(&mut s);
        let value = Arc::from(s.as_str());
        cached.2 = s;
        value
    })
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
        assert_eq!(a.len(), super::TOKEN_LEN);
        assert!(a.bytes().all(|c| super::ALPHABET.contains(&c)));
        assert_ne!(a, b);
        assert_eq!(super::client_id().len(), 16);
    }

    #[test]
    fn a_described_token_stays_within_one_allocation_on_the_server() {
        let long = super::Site::Fn("a::long::module::path::to::a::locked::fn::with::a::long::name");
        let described = super::owner_token_described(long);
        // Redis keeps a string of at most 44 bytes in one allocation with its header.
        assert!(described.len() <= 44, "{described}");
        let (token, holder) = described.split_once('\t').expect("a tab");
        assert_eq!(token.len(), super::TOKEN_LEN);
        let read = crate::holders::parse(holder).expect("a description");
        assert_eq!(read.site, crate::holders::site_number(long));
        // The cached description follows the site.
        let here =
            super::owner_token_described(super::Site::Caller(std::panic::Location::caller()));
        let site = crate::holders::parse(here.split_once('\t').expect("tab").1).expect("read");
        assert_ne!(site.site, read.site);
    }
}
