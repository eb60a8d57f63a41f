//! The validated lock description that the expansion stage consumes.
//!
//! Everything here has passed every compile-time check: durations are
//! resolved (defaults filled in), every placeholder names a real binding, and
//! the fn is an `async fn` with a return type. Spans are kept so generated
//! code (type assertions, feature guards) can point at the user's own tokens;
//! defaults carry `Span::call_site()`, i.e. the attribute.

use std::time::Duration;

use proc_macro2::Span;
use syn::{Expr, ExprPath, Ident, ItemFn, LitStr, Member};

/// A lease is a crash-safety bound, not the expected run time: with the
/// watchdog renewing it, ttl only decides how long a crashed holder blocks
/// others. 30 s rides out a couple of failed renewals yet frees a dead
/// holder's lock within half a minute.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The ttl range the runtime accepts (`distlock::MIN_TTL..=distlock::MAX_TTL`; a unit test
/// checks they agree):
/// below 10 ms the clock-drift allowance eats the lease, and a lock held for more than 30 days
/// is a holder that died.
pub const MIN_TTL: Duration = Duration::from_millis(10);
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Long enough to queue behind a typical short critical section, short enough
/// to fail well inside common request timeouts.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// How long a master waits for replicas to confirm an acquisition with `replicas = n` and no
/// `replicas_timeout`: replicas on a healthy network confirm in about a millisecond, and the
/// master answers nothing else on that connection while it waits, so the bound stays short.
pub const DEFAULT_REPLICAS_TIMEOUT: Duration = Duration::from_millis(100);

/// The default renewal period is `ttl / WATCHDOG_DIVISOR`, leaving two more
/// renewal attempts before the lease would expire.
pub const WATCHDOG_DIVISOR: u32 = 3;

/// Which attribute is being expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// `#[distributed_lock]`
    Distributed,
    /// `#[read_lock]`
    Read,
    /// `#[write_lock]`
    Write,
    /// `#[semaphore]`
    Semaphore,
}

impl AttrKind {
    pub const ALL: [AttrKind; 4] = [Self::Distributed, Self::Read, Self::Write, Self::Semaphore];

    pub fn name(self) -> &'static str {
        match self {
            Self::Distributed => "distributed_lock",
            Self::Read => "read_lock",
            Self::Write => "write_lock",
            Self::Semaphore => "semaphore",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A value together with the span of the token it came from.
#[derive(Clone, Debug)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: Span) -> Self {
        Self { value, span }
    }

    /// A default value, attributed to the attribute itself.
    pub fn default_value(value: T) -> Self {
        Self::new(value, Span::call_site())
    }
}

/// `mode = ".."` of `#[distributed_lock]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    SetNx,
    Reentrant,
    Redlock,
}

impl Mode {
    pub const ALL: [(&'static str, Mode); 3] = [
        ("setnx", Self::SetNx),
        ("reentrant", Self::Reentrant),
        ("redlock", Self::Redlock),
    ];
}

/// What kind of lock to take.
#[derive(Clone, Debug)]
pub enum LockKind {
    /// `#[distributed_lock]`: one holder at a time, with the chosen algorithm.
    Exclusive { mode: Spanned<Mode> },
    /// `#[read_lock]`: shared with other readers, excludes writers.
    Read,
    /// `#[write_lock]`: excludes readers and writers.
    Write,
    /// `#[semaphore]`: up to `permits` holders at once (always >= 1).
    Semaphore { permits: Spanned<u32> },
}

/// Lease renewal while the body runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watchdog {
    /// Fixed lease: the lock lapses after `ttl` even if the body still runs.
    Off,
    /// Renew every period; always strictly below the ttl.
    Every(Duration),
}

/// `on_busy = ".."`: what to do when the lock is not acquired within `wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnBusy {
    Error,
    Skip,
}

impl OnBusy {
    pub const ALL: [(&'static str, OnBusy); 2] = [("error", Self::Error), ("skip", Self::Skip)];
}

/// `on_lost = ".."`: what to do when the lease is lost while the body runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLost {
    Cancel,
    Continue,
}

impl OnLost {
    pub const ALL: [(&'static str, OnLost); 2] =
        [("cancel", Self::Cancel), ("continue", Self::Continue)];
}

/// `on_error = ".."`: where a lock error goes (busy with `on_busy = "error"`, a lease lost,
/// no client, Redis down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Through the fn's `Result` error type.
    Return,
    /// A `tracing` warning; the fn returns `Default::default()`, so it may return anything
    /// with a default (`()` included).
    Log,
}

impl OnError {
    pub const ALL: [(&'static str, OnError); 2] = [("return", Self::Return), ("log", Self::Log)];
}

/// The key template, split and resolved against the fn's bindings.
#[derive(Clone, Debug)]
pub struct KeyTemplate {
    /// The literal as written; `lit.value()` is the static template text
    /// (useful as a low-cardinality label for tracing and metrics).
    pub lit: LitStr,
    pub segments: Vec<KeySegment>,
}

#[derive(Clone, Debug)]
pub enum KeySegment {
    /// Text taken as is (`{` and `}` included).
    Literal(String),
    Placeholder(Placeholder),
}

#[derive(Clone, Debug)]
pub struct Placeholder {
    /// The binding or `self`, carrying the span of the parameter (or receiver)
    /// it names, so generated code resolves to that very binding.
    pub root: Ident,
    /// Field accesses after the root, in template order.
    pub fields: Vec<Member>,
    /// The placeholder inside the key literal (the whole literal where the
    /// compiler cannot point inside strings), for diagnostics.
    pub span: Span,
}

/// A fully validated lock attribute plus the fn it applies to.
#[derive(Clone, Debug)]
pub struct LockModel {
    pub kind: LockKind,
    /// The key template; of a list, the first.
    pub key: KeyTemplate,
    /// `key = [..]`: every template of the list, in the order written, taken at once
    /// (`Client::lock_many`). `None` for one key.
    pub keys: Option<Vec<KeyTemplate>>,
    /// Always > 0.
    pub ttl: Spanned<Duration>,
    /// `0` means a single attempt.
    pub wait: Spanned<Duration>,
    pub watchdog: Spanned<Watchdog>,
    pub on_busy: Spanned<OnBusy>,
    pub on_lost: Spanned<OnLost>,
    /// Always > 0 when present.
    pub max_hold: Option<Spanned<Duration>>,
    /// `replicas = n` (n >= 1) and its timeout (> 0, default [`DEFAULT_REPLICAS_TIMEOUT`]).
    pub replicas: Option<(u32, Duration)>,
    /// Always > 0 when present.
    pub min_hold: Option<Spanned<Duration>>,
    pub on_error: Spanned<OnError>,
    /// Record the rendered key in traces (off: only the template).
    pub record_name: bool,
    /// Mint a fencing token with the lock (off: no token, a cheaper acquisition).
    pub fencing: bool,
    /// `client = <expr>`, evaluated in the fn's scope; `None` means the
    /// process-wide default client.
    pub client: Option<Expr>,
    /// `map_err = <path>`: fn mapping `distlock::Error` into the fn's error
    /// type; `None` means `From<distlock::Error>`.
    pub map_err: Option<ExprPath>,
    /// The annotated fn, untouched.
    pub item: ItemFn,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_round_trip() {
        for kind in AttrKind::ALL {
            assert_eq!(AttrKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(AttrKind::from_name("lock"), None);
    }

    /// The attributes check durations at compile time against copies of the runtime's
    /// bounds and defaults (a proc-macro crate cannot import them): they must agree.
    #[test]
    fn the_copied_bounds_and_defaults_agree_with_the_runtime() {
        assert_eq!(DEFAULT_TTL, distlock::DEFAULT_TTL);
        assert_eq!(DEFAULT_WAIT, distlock::DEFAULT_WAIT);
        assert_eq!(MIN_TTL, distlock::MIN_TTL);
        assert_eq!(MAX_TTL, distlock::MAX_TTL);
    }
}
