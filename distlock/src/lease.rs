//! Lease arithmetic: how long a granted lock may be trusted, on the local clock.
//!
//! Deadlines are kept on a clock that counts time while the host is suspended
//! (`CLOCK_BOOTTIME` on Linux): on `CLOCK_MONOTONIC`, which `Instant` reads there, a laptop or
//! VM that slept through the lease would wake with `is_held()` still true, though the server's
//! lease ran out long ago. Elsewhere the deadlines fall back to `Instant`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::error::Error;
use crate::sync::lock;
use crate::telemetry::Labels;

mod native;
pub(crate) use native::NativeRenewal;

/// Shortest accepted ttl. Below this the clock-drift allowance (2 ms) eats the lease.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest accepted ttl. A lock held for longer is almost always a holder that died; keep
/// ttls short and let the watchdog renew them instead.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The ttl in whole milliseconds, as `PX` takes it, or why it is refused. Checked before
/// anything is sent: Redis itself would answer `ERR invalid expire time` for zero.
pub(crate) fn ttl_ms(ttl: Duration) -> Result<u64, Error> {
    if ttl.is_zero() {
        return Err(Error::config(
            "ttl must be above zero: a lock without a lease never frees if its holder dies",
        ));
    }
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::config(format!(
            "ttl {ttl:?} is out of range {MIN_TTL:?}..={MAX_TTL:?}"
        )));
    }
    // Round up so the server never holds the lock for less than asked.
    Ok(ttl.as_nanos().div_ceil(1_000_000) as u64)
}

/// Allowance for the server's clock running faster than ours: 1 % of the ttl plus 2 ms, the
/// Redlock description's figure, applied to single nodes too.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// When a lease granted for `ttl` on a request sent at `sent` stops being trustworthy, on the
/// monotonic clock: for comparing leases (the guard's own deadline is kept on the boot clock,
/// see [`LeaseState`]).
pub(crate) fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + trusted(ttl)
}

/// How much of a lease of `ttl` is trusted: the server started its `PX` countdown after the
/// request was sent, and its clock may run a little fast.
fn trusted(ttl: Duration) -> Duration {
    ttl.saturating_sub(drift(ttl))
}

/// `now + d`, or a time so far ahead that it never comes when `d` is too large to add (a
/// caller's `Duration::MAX` means "no limit", not a panic).
pub(crate) fn after(start: Instant, d: Duration) -> Instant {
    start
        .checked_add(d)
        .or_else(|| start.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(start)
}

/// Both clocks read together: the monotonic one (`Instant`: timers, retries, the watchdog's
/// schedule) and [`boot_now`]'s (lease deadlines). Taken once before an acquire request is sent,
/// it is the one reading the lease is measured from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pub(crate) at: Instant,
    boot: Duration,
}

impl Stamp {
    pub(crate) fn now() -> Stamp {
        Stamp {
            at: Instant::now(),
            boot: boot_now(),
        }
    }

    /// The instant `at` with its boot-clock time as of now, for tests that place requests
    /// in the past or the future.
    #[cfg(test)]
    pub(crate) fn of(at: Instant) -> Stamp {
        Stamp {
            at,
            boot: boot_of(at),
        }
    }
}

/// A reading of [`boot_now`]'s clock, to measure from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BootReading(Duration);

impl BootReading {
    /// How long ago it was taken (on the boot clock: a suspension counts).
    pub(crate) fn elapsed(self) -> Duration {
        boot_now().saturating_sub(self.0)
    }
}

/// What the guard and the watchdog both know about one held lease.
///
/// Once lost, a lease stays lost: a renewal that succeeds after the local deadline has passed
/// does not revive it, because the holder may already have acted on the loss.
///
/// The validity always follows the **latest-sent** renewal's answer, which reports the lease
/// the server now holds: a guard never trusts a longer lease than the server was last told,
/// and an answer that arrives after a later one (the watchdog's and a manual `extend` racing)
/// is ignored rather than moving the validity back to an older state.
pub(crate) struct LeaseState {
    /// When the lease stops being trustworthy (on [`boot_now`]'s clock), and when the request
    /// it is based on was sent.
    valid: Mutex<(Duration, Instant)>,
    lost: AtomicBool,
    /// Set when `Client::shutdown` took the hold back (and released it): lost, without the
    /// warning of a lease that ran out.
    revoked: AtomicBool,
    /// Wakes `Guard::lost()` waiters when the lease is declared lost.
    changed: Notify,
    /// Who holds it, for the lease-lost event.
    pub(crate) labels: Arc<Labels>,
    /// Whether the watchdog may renew it with the server's native command (setnx).
    pub(crate) native: NativeRenewal,
}

impl LeaseState {
    /// A lease granted for `ttl` by a request sent after `sent` was read. The deadline counts
    /// from the boot clock's reading of then, not from one converted afterwards: a host
    /// suspended while the request was on its way would otherwise add the suspension to it.
    pub(crate) fn new(sent: Stamp, ttl: Duration, labels: Arc<Labels>) -> Self {
        LeaseState {
            valid: Mutex::new((sent.boot + trusted(ttl), sent.at)),
            lost: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            changed: Notify::new(),
            labels,
            native: NativeRenewal::new(ttl),
        }
    }

    fn deadline(&self) -> Duration {
        lock(&self.valid).0
    }

    /// When the lease stops being trustworthy, as an `Instant` (for timers and retries).
    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until_from(Instant::now())
    }

    /// [`valid_until`](Self::valid_until), for a caller that has just read the clock
    /// (`instant`): one clock read fewer on the acquisition's path.
    pub(crate) fn valid_until_from(&self, instant: Instant) -> Instant {
        self.validity_from(instant).1
    }

    /// [`is_valid`](Self::is_valid), and the reading of the boot clock it was judged on.
    pub(crate) fn validity_now(&self) -> (bool, BootReading) {
        let now = boot_now();
        let valid = !self.lost.load(Ordering::Acquire) && now < self.deadline();
        (valid, BootReading(now))
    }

    /// True once the lease has run out on the local clock (lost or not): nothing of it is
    /// left to free on the server.
    pub(crate) fn ended(&self) -> bool {
        boot_now() >= self.deadline()
    }

    /// True while the lease can be trusted.
    pub(crate) fn is_valid(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && boot_now() < self.deadline()
    }

    /// [`is_valid`](Self::is_valid) and [`valid_until_from`](Self::valid_until_from)`(instant)`
    /// on one reading of the boot clock, for a caller that has just read `instant`.
    pub(crate) fn validity_from(&self, instant: Instant) -> (bool, Instant) {
        let (deadline, now) = (self.deadline(), boot_now());
        let valid = !self.lost.load(Ordering::Acquire) && now < deadline;
        let until = match deadline.checked_sub(now) {
            Some(left) => after(instant, left),
            None => instant.checked_sub(now - deadline).unwrap_or(instant),
        };
        (valid, until)
    }

    /// Records a successful renewal sent at `sent`, after which the server said the lease has
    /// `remaining` left; refused (returns false and declares the lease lost) if the lease had
    /// already run out on our clock.
    pub(crate) fn renewed(&self, sent: Instant, remaining: Duration) -> bool {
        let mut valid = lock(&self.valid);
        if self.lost.load(Ordering::Acquire) || boot_now() >= valid.0 {
            drop(valid);
            self.declare_lost();
            return false;
        }
        if sent >= valid.1 {
            let remaining = self.native.trusted(remaining);
            *valid = (boot_deadline(sent, remaining), sent);
        }
        true
    }

    pub(crate) fn declare_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            self.labels.lease_lost();
            self.changed.notify_waiters();
        }
    }

    /// Marks the lease lost because the client took its hold back (`Client::shutdown`).
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
        self.lost.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// True once [`revoke`](Self::revoke)d.
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Resolves once the lease is lost: declared so (renewal refused or given up) or run out
    /// on the local clock. The deadline is re-read after every wake because renewals move it.
    pub(crate) async fn until_lost(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lost.load(Ordering::Acquire) {
                return;
            }
            if !self.is_valid() {
                self.declare_lost();
                return;
            }
            // Tokio's timers run on the monotonic clock, which stands still while the host is
            // suspended: woken at least every `RECHECK`, a loss across a suspend is reported
            // within that of the resume.
            let until = self.valid_until().min(Instant::now() + RECHECK);
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }
}

/// Longest sleep of [`LeaseState::until_lost`] before it reads the clock again.
const RECHECK: Duration = Duration::from_secs(1);

/// The deadline, on [`boot_now`]'s clock, of a lease of `ttl` granted on a request sent at
/// `sent`.
fn boot_deadline(sent: Instant, ttl: Duration) -> Duration {
    boot_of(sent) + trusted(ttl)
}

/// The instant `t` on [`boot_now`]'s clock.
fn boot_of(t: Instant) -> Duration {
    let (now, boot) = (Instant::now(), boot_now());
    match t.checked_duration_since(now) {
        Some(ahead) => boot + ahead,
        None => boot.saturating_sub(now - t),
    }
}

/// Time on a clock that keeps counting while the host is suspended: `CLOCK_BOOTTIME` on
/// Linux; elsewhere the time since the first call, on `Instant`.
fn boot_now() -> Duration {
    #[cfg(test)]
    let slept = tests::SUSPENDED.with(|s| s.get());
    #[cfg(not(test))]
    let slept = Duration::ZERO;
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes to it.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32) + slept;
        }
    }
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed() + slept
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Time the host "slept" in this test thread: added to the boot clock only.
        pub(super) static SUSPENDED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    }

    fn labels() -> Arc<Labels> {
        Arc::new(Labels {
            mode: "setnx",
            label: "test".into(),
            name: None,
            site: None,
        })
    }

    #[test]
    fn a_lease_does_not_survive_a_suspend_of_the_host() {
        let lease = LeaseState::new(Stamp::now(), Duration::from_secs(10), labels());
        assert!(lease.is_valid());
        // The monotonic clock stands still while the host sleeps; the boot clock does not.
        SUSPENDED.with(|s| s.set(Duration::from_secs(3600)));
        let valid = lease.is_valid();
        let until = lease.valid_until();
        SUSPENDED.with(|s| s.set(Duration::ZERO));
        assert!(
            !valid,
            "a lease that ran out while the host slept is still trusted"
        );
        assert!(until <= Instant::now());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_boot_clock_counts_what_the_monotonic_one_does_not() {
        let read = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: as in `boot_now`.
            assert_eq!(unsafe { libc::clock_gettime(clock, &mut ts) }, 0);
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let before = read(libc::CLOCK_BOOTTIME);
        let ours = boot_now();
        let after = read(libc::CLOCK_BOOTTIME);
        assert!(before <= ours && ours <= after, "not CLOCK_BOOTTIME");
        assert!(read(libc::CLOCK_MONOTONIC) <= read(libc::CLOCK_BOOTTIME));
    }

    #[test]
    fn ttl_bounds() {
        assert!(ttl_ms(Duration::ZERO)
            .unwrap_err()
            .to_string()
            .contains("above zero"));
        assert!(ttl_ms(Duration::from_millis(9)).is_err());
        assert!(ttl_ms(Duration::from_secs(31 * 24 * 3600)).is_err());
        assert!(ttl_ms(Duration::MAX).is_err());
        assert_eq!(ttl_ms(Duration::from_secs(10)).unwrap(), 10_000);
        assert_eq!(ttl_ms(Duration::from_micros(10_500)).unwrap(), 11);
    }

    #[test]
    fn the_latest_sent_renewal_decides_even_when_it_shortens() {
        let sent = Stamp::now();
        let t = sent.at;
        let lease = LeaseState::new(sent, Duration::from_secs(10), labels());
        // A renewal sent later that found less on the server wins...
        assert!(lease.renewed(t + Duration::from_millis(1), Duration::from_millis(500)));
        let short = lease.deadline();
        assert!(lease.valid_until() < t + Duration::from_secs(1));
        // ...and an answer to an earlier-sent request arriving after it changes nothing.
        assert!(lease.renewed(t, Duration::from_secs(10)));
        assert_eq!(lease.deadline(), short);
    }

    #[test]
    fn huge_durations_mean_no_limit() {
        let t = Instant::now();
        assert!(after(t, Duration::MAX) > t + Duration::from_secs(3600 * 24 * 365));
    }

    #[test]
    fn validity_leaves_room_for_drift() {
        assert_eq!(
            trusted(Duration::from_secs(10)),
            Duration::from_millis(9_898)
        );
    }
}
