//! Random identities: owner tokens and client ids.

use std::panic::Location;
use std::sync::Arc;

use rand::Rng;

/// 128 random bits as 32 hex digits, appended to `s`: a fresh owner token for one acquisition,
/// so a release or extension can prove it is the holder (seeds 000-003: the value is a random
/// UUID).
fn push_owner_token(s: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = rand::rng().random::<u128>();
    let mut digits = [0u8; 32];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[(bits >> (124 - 4 * i)) as usize & 0xf];
    }
    // Written as one str, not 32 chars (each `char` push encodes UTF-8 and checks capacity).
    s.push_str(std::str::from_utf8(&digits).unwrap_or_default());
}

/// Where a lock is taken, for its holder description: the locked fn (set by the attributes)
/// or the caller's source location. Both live for the whole program, so their address names
/// them.
#[derive(Clone, Copy)]
pub(crate) enum Site {
    Fn(&'static str),
    Caller(&'static Location<'static>),
}

impl Site {
    fn id(self) -> (usize, usize) {
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

/// A fresh owner token that also says who holds the lock (see [`holder`]): the 32 random hex
/// digits, a tab, then the description. A setnx lock keeps only its token as its value, so
/// the description rides in it; release and renewal compare the whole value. Built in one
/// buffer and shared (the guard and the watchdog both keep it): two allocations per
/// acquisition. The description up to its time is formatted once per thread and site, not
/// per acquisition (formatting it was a tenth of the client's work per uncontended cycle).
pub(crate) fn owner_token_described(site: Site) -> Arc<str> {
    thread_local! {
        static DESCRIBED: std::cell::RefCell<((usize, usize), String, String)> =
            const { std::cell::RefCell::new(((0, 0), String::new(), String::new())) };
    }
    DESCRIBED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != site.id() || cached.1.is_empty() {
            cached.1.clear();
            push_holder_up_to_time(&mut cached.1, &site);
            cached.0 = site.id();
        }
        // Composed in a buffer the thread keeps, then copied once into the shared value.
        let mut s = std::mem::take(&mut cached.2);
        s.clear();
        push_owner_token(&mut s);
        s.push('\t');
        s.push_str(&cached.1);
        push_decimal(&mut s, unix_ms());
        let value = Arc::from(s.as_str());
        cached.2 = s;
        value
    })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn push_decimal(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
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
    push_holder_up_to_time(s, site);
    push_decimal(s, unix_ms());
}

/// [`holder`] without the time's digits: `host=..\tpid=..\tsite=..\tat=`.
fn push_holder_up_to_time(s: &mut String, site: &dyn std::fmt::Display) {
    use std::fmt::Write as _;
    let start = s.len();
    s.push_str(&PROCESS);
    let _ = write!(s, "\tsite={site}\tat=");
    if s[start..].contains(['\n', '\t']) {
        // The site's own tabs and newlines would split the fields.
        let site_at = start + PROCESS.len() + "\tsite=".len();
        let cleaned = s[site_at..s.len() - "\tat=".len()].replace(['\n', '\t'], " ");
        s.truncate(site_at);
        s.push_str(&cleaned);
        s.push_str("\tat=");
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
        let described = super::owner_token_described(super::Site::Fn("a\nsite"));
        let (token, holder) = described.split_once('\t').expect("a tab");
        assert_eq!(token.len(), 32);
        assert!(holder.starts_with("host=") && holder.contains("\tsite=a site\tat="));
        let at: u64 = holder
            .rsplit_once("\tat=")
            .expect("time")
            .1
            .parse()
            .expect("ms");
        assert!(at > 1_700_000_000_000);
        // The cached description follows the site, and tabs in a site do not split fields.
        let other = super::owner_token_described(super::Site::Fn("b\tc"));
        assert!(other.contains("\tsite=b c\tat="), "{other}");
        let here =
            super::owner_token_described(super::Site::Caller(std::panic::Location::caller()));
        assert!(here.contains("\tsite=distlock/src/token.rs:"), "{here}");
    }
}
