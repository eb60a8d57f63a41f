//! Who is who: owner tokens, client ids, and the short description of who holds a lock.
//!
//! A hold is described as `<process>.<site>.<at>`: the process's tag (8 characters drawn once
//! per process), the number of the call site in that process, and the time it was granted
//! (unix ms, the send time of the granted attempt: see `lock::attempt`), both in base 36. What the tag and the number stand for (host, pid, the locked fn or the
//! `file:line` of the call) is written once per process and server to the process's record
//! (see `nodes::records`), not with every hold. A setnx lock's value is its token and this
//! description, 41 or 42 bytes: at most 44 bytes Redis keeps a string in one allocation with
//! its header, and every byte of the value is copied, compared and sent back on every
//! acquisition and release (examples/bench/RESULTS.md has what the longer description cost).

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::sync::lock;

/// Length of an owner token.
pub(crate) const TOKEN_LEN: usize = 21;

/// [`owner_token`], appended to `s`.
#[cfg(test)]
fn push_owner_token(s: &mut String) {
    s.push_str(std::str::from_utf8(&owner_token()).unwrap_or_default());
}

/// 126 random bits as 21 characters of URL-safe base 64: a fresh owner token for one
/// acquisition, so a release or extension can prove it is the holder (the usual value is a
/// random UUID, which has 122).
fn owner_token() -> [u8; TOKEN_LEN] {
    let bits = rand::rng().random::<u128>();
    let mut chars = [0u8; TOKEN_LEN];
    for (i, c) in chars.iter_mut().enumerate() {
        *c = ALPHABET[(bits >> (6 * i)) as usize & 63];
    }
    chars
}

/// A fresh owner token that also says who holds the lock (see the module doc):
/// the token, a tab, then the description, 41 or 42 bytes. A setnx lock keeps only its token
/// as its value, so the description rides in it; release and renewal compare the whole value.
/// Built in one buffer and shared (the guard and the watchdog both keep it): two allocations
/// per acquisition. The description up to its time is composed once per thread and site, not
/// per acquisition. `at`: when the attempt that carries it is sent, a reading the caller
/// already took.
pub(crate) fn owner_token_described(site: Site, at: Instant) -> Arc<str> {
    thread_local! {
        static DESCRIBED: std::cell::RefCell<((usize, usize), String, Vec<u8>)> =
            const { std::cell::RefCell::new(((0, 0), String::new(), Vec::new())) };
    }
    DESCRIBED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != site.id() || cached.1.is_empty() {
            cached.1.clear();
            push_up_to_time(&mut cached.1, site);
            cached.0 = site.id();
        }
        // Composed as bytes in a buffer the thread keeps (all ASCII, checked once as a
        // whole), then copied once into the shared value.
        let mut s = std::mem::take(&mut cached.2);
        s.clear();
        s.extend_from_slice(&owner_token());
        s.push(b'\t');
        s.extend_from_slice(cached.1.as_bytes());
        let (digits, from) = base36(unix_ms_at(at));
        s.extend_from_slice(&digits[from..]);
        let value = Arc::from(std::str::from_utf8(&s).unwrap_or_default());
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

/// Where a lock is taken: the locked fn (set by the attributes) or the caller's source
/// location. Both live for the whole program, so their address names them.
#[derive(Clone, Copy)]
pub(crate) enum Site {
    Fn(&'static str),
    Caller(&'static Location<'static>),
}

impl Site {
    pub(crate) fn id(self) -> (usize, usize) {
        match self {
            Site::Fn(f) => (f.as_ptr() as usize, f.len()),
            Site::Caller(at) => (at as *const Location<'static> as usize, usize::MAX),
        }
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Fn(name) => f.write_str(name),
            Site::Caller(at) => at.fmt(f),
        }
    }
}

/// The characters of tags and tokens: URL-safe base 64, no `.` and no tab.
pub(crate) const ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// This process's tag: 48 random bits.
pub(crate) fn process_tag() -> &'static str {
    static TAG: LazyLock<String> = LazyLock::new(|| {
        let bits = rand::rng().random::<u64>();
        (0..8)
            .map(|i| ALPHABET[(bits >> (6 * i)) as usize & 63] as char)
            .collect()
    });
    &TAG
}

/// The sites this process has taken locks at, numbered in order of first use.
struct Sites {
    numbers: HashMap<(usize, usize), u32>,
    names: Vec<Arc<str>>,
}

static SITES: LazyLock<Mutex<Sites>> = LazyLock::new(|| {
    Mutex::new(Sites {
        numbers: HashMap::new(),
        names: Vec::new(),
    })
});
/// `SITES.names.len()`, read without the lock on every acquisition.
static SITE_COUNT: AtomicUsize = AtomicUsize::new(0);

fn sites() -> std::sync::MutexGuard<'static, Sites> {
    lock(&SITES)
}

/// How many call sites this process has numbered so far.
pub(crate) fn site_count() -> usize {
    SITE_COUNT.load(Ordering::Acquire)
}

/// The names of this process's call sites, by number.
pub(crate) fn site_names() -> Vec<Arc<str>> {
    sites().names.clone()
}

/// The site's number, given at its first use. Each thread remembers the last site it asked
/// about, so the hot path (one site taking lock after lock) does not take the table's lock.
pub(crate) fn site_number(site: Site) -> u32 {
    thread_local! {
        static LAST: std::cell::Cell<((usize, usize), u32)> =
            const { std::cell::Cell::new(((0, 0), u32::MAX)) };
    }
    let id = site.id();
    let (last, n) = LAST.get();
    if last == id && n != u32::MAX {
        return n;
    }
    let n = numbered(site);
    LAST.set((id, n));
    n
}

fn numbered(site: Site) -> u32 {
    let mut sites = sites();
    if let Some(&n) = sites.numbers.get(&site.id()) {
        return n;
    }
    let n = sites.names.len() as u32;
    // Tabs and newlines in a site would split the lines of a listing.
    let name = site.to_string().replace(['\n', '\t'], " ");
    sites.names.push(Arc::from(name));
    sites.numbers.insert(site.id(), n);
    SITE_COUNT.store(sites.names.len(), Ordering::Release);
    n
}

/// `<tag>.<site>.` of a site, the description up to its time (see [`push_time`]).
pub(crate) fn push_up_to_time(s: &mut String, site: Site) {
    s.push_str(process_tag());
    s.push('.');
    push_base36(s, u64::from(site_number(site)));
    s.push('.');
}

/// The time of an acquisition, ending its description.
pub(crate) fn push_time(s: &mut String) {
    push_base36(s, unix_ms());
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long a thread's reading of the wall clock serves [`unix_ms_at`].
const WALL_READING_KEPT: Duration = Duration::from_secs(1);

/// `at` in unix ms: this thread's last reading of the wall clock, if under a second old,
/// moved on by the monotonic time since. A description's time is for people reading it (when
/// a hold was taken); a wall-clock step shows in it within a second, and an acquisition
/// reads no clock for it.
fn unix_ms_at(at: Instant) -> u64 {
    thread_local! {
        static READING: std::cell::Cell<Option<(Instant, u64)>> = const { std::cell::Cell::new(None) };
    }
    let moved_on = READING.get().and_then(|(read_at, ms)| {
        let since = at.checked_duration_since(read_at)?;
        (since < WALL_READING_KEPT)
            .then(|| ms + since.as_secs() * 1000 + u64::from(since.subsec_millis()))
    });
    moved_on.unwrap_or_else(|| {
        let ms = unix_ms();
        READING.set(Some((at, ms)));
        ms
    })
}

/// Who takes a lock, as stored with a hold (see the module doc).
pub(crate) fn describe(site: Site) -> String {
    let mut s = String::with_capacity(24);
    push_up_to_time(&mut s, site);
    push_time(&mut s);
    s
}

fn push_base36(s: &mut String, n: u64) {
    let (digits, from) = base36(n);
    s.push_str(std::str::from_utf8(&digits[from..]).unwrap_or_default());
}

/// `n` in base 36 at the end of the array; returns where it starts.
fn base36(mut n: u64) -> ([u8; 13], usize) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = [0u8; 13];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            return (digits, i);
        }
    }
}

/// A stored description, read back: the process's tag, the site's number and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    pub(crate) process: String,
    pub(crate) site: u32,
    pub(crate) at: SystemTime,
}

/// Reads a description written by [`describe`]; `None` for anything else.
pub(crate) fn parse(text: &str) -> Option<Described> {
    let mut parts = text.split('.');
    let (process, site, at) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || process.len() != 8
        || !process.bytes().all(|c| ALPHABET.contains(&c))
    {
        return None;
    }
    let base36 = |s: &str| u64::from_str_radix(s, 36).ok();
    Some(Described {
        process: process.to_owned(),
        site: u32::try_from(base36(site)?).ok()?,
        at: UNIX_EPOCH + Duration::from_millis(base36(at)?),
    })
}

/// The record's field holding a site's name.
pub(crate) fn site_field(n: u32) -> String {
    let mut s = String::from("s:");
    push_base36(&mut s, u64::from(n));
    s
}

/// `host=<host>\tpid=<pid>`: who forced an unlock, kept in its record.
pub(crate) fn process_description() -> String {
    format!("host={}\tpid={}", host(), std::process::id())
}

/// This machine's name, as the kernel knows it (Linux), else the usual variables; computed
/// once per process.
pub(crate) fn host() -> &'static str {
    static HOST: LazyLock<String> = LazyLock::new(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .unwrap_or_else(|| "unknown".to_owned())
            .replace(['\t', '\n'], " ")
    });
    &HOST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_short_and_read_back() {
        let long = Site::Fn("a::very::long::module::path::of::a::locked::function::name");
        let d = describe(long);
        assert!(d.len() <= 20, "{d}");
        let read = parse(&d).expect("parses");
        assert_eq!(read.process, process_tag());
        assert_eq!(read.site, site_number(long));
        let age = SystemTime::now().duration_since(read.at).expect("past");
        assert!(age < Duration::from_secs(60));
        // The same site keeps its number; another gets the next.
        assert_eq!(site_number(long), read.site);
        let other = Site::Fn("other\tsite");
        assert_ne!(site_number(other), read.site);
        let n = site_number(other) as usize;
        assert_eq!(&*sites().names[n], "other site");
    }

    #[test]
    fn anything_else_is_not_a_description() {
        for text in [
            "",
            "host=h\tpid=1",
            "abc.1.2",
            "ABCDEFGH.1",
            "ABCDEFGH.1.2.3",
            "ABCDEFGH.z!.1",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }

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
        let described = super::owner_token_described(long, Instant::now());
        // Redis keeps a string of at most 44 bytes in one allocation with its header.
        assert!(described.len() <= 44, "{described}");
        let (token, holder) = described.split_once('\t').expect("a tab");
        assert_eq!(token.len(), super::TOKEN_LEN);
        let read = crate::identity::parse(holder).expect("a description");
        assert_eq!(read.site, crate::identity::site_number(long));
        // The cached description follows the site.
        let here = super::owner_token_described(
            super::Site::Caller(std::panic::Location::caller()),
            Instant::now(),
        );
        let site = crate::identity::parse(here.split_once('\t').expect("tab").1).expect("read");
        assert_ne!(site.site, read.site);
    }
}
