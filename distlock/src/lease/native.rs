//! Whether the watchdog may renew one lease with the server's own `SET key token IFEQ token PX
//! ttl` instead of the extend script, and what the guard may then trust.
//!
//! The script never shortens a lease (`setnx/extend.lua`); the native command sets it to
//! exactly the renewal's ttl. The two agree as long as the server's lease can never be longer
//! than that ttl, which holds from the acquisition (the same ttl) until someone asks for a
//! longer one: [`Guard::extend`](crate::Guard::extend) beyond the ttl, or a `min_hold`
//! release. From that moment the lease is renewed by the script only ([`LONGER`]).
//!
//! A native renewal sent before that moment may still run on the server after the longer
//! extension (another connection, a stalled socket) and cut the lease back to the ttl, counted
//! from when it ran. Such a renewal is counted while its answer has not come ([`IN_FLIGHT`]):
//! an answer proves it ran, before whatever is sent next. If one was out when the longer lease
//! was asked, the lease is [`CAPPED`]: every later answer is trusted for at most the ttl. That
//! is safe whatever runs later, since a late native renewal still leaves the ttl from when it
//! ran, and a script never shortens. A `min_hold` release needs the server itself to keep the
//! longer lease after the guard is gone, so such holds never renew natively at all: a lease
//! is renewed by script until its guard decides ([`NativeRenewal::decided`]).
//!
//! One atomic word holds all of it, so a renewal starting and a longer lease asked are
//! ordered: either the renewal sees [`LONGER`] and goes as the script, or the guard sees it
//! in flight.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A lease longer than the renewal's ttl was asked for: scripts only from now on.
const LONGER: u64 = 1 << 63;
/// A native renewal was out when [`LONGER`] was set: answers are trusted for the ttl at most.
const CAPPED: u64 = 1 << 62;
/// The guard has not said yet whether the hold has a `min_hold`: scripts only until it does.
const UNDECIDED: u64 = 1 << 61;
/// Native renewals sent whose answer has not come (the low bits).
const IN_FLIGHT: u64 = UNDECIDED - 1;

/// One lease's native-renewal state (see the module).
pub(crate) struct NativeRenewal {
    state: AtomicU64,
    /// The renewal's ttl: what a native renewal sets the lease to.
    ttl: Duration,
}

impl NativeRenewal {
    pub(crate) fn new(ttl: Duration) -> NativeRenewal {
        NativeRenewal {
            state: AtomicU64::new(UNDECIDED),
            ttl,
        }
    }

    /// Counts a native renewal about to be sent; false when the lease must be renewed by the
    /// script (a longer lease was asked).
    pub(crate) fn begin(&self) -> bool {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & (LONGER | UNDECIDED) == 0).then_some(s + 1)
            })
            .is_ok()
    }

    /// A native renewal counted by [`begin`](Self::begin) was answered, or never left.
    pub(crate) fn end(&self) {
        // Never below zero, whatever a caller does.
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & IN_FLIGHT > 0).then(|| s - 1)
            });
    }

    /// Call before sending a request for a lease of `ttl_ms`: one longer than the renewal's
    /// ttl switches the lease to the script for good, and caps what is trusted if a native
    /// renewal is still out.
    pub(crate) fn asking(&self, ttl_ms: u64) {
        if u128::from(ttl_ms) > self.ttl.as_nanos().div_ceil(1_000_000) {
            let before = self.state.fetch_or(LONGER, Ordering::AcqRel);
            if before & IN_FLIGHT > 0 {
                self.state.fetch_or(CAPPED, Ordering::AcqRel);
            }
        }
    }

    /// Called by the guard, before native renewals may start: never for a hold with a
    /// `min_hold` (see the module). A lease handed to another guard keeps what it was asked.
    pub(crate) fn decided(&self, min_hold: bool) {
        if min_hold {
            self.state.fetch_or(LONGER, Ordering::AcqRel);
        }
        self.state.fetch_and(!UNDECIDED, Ordering::AcqRel);
    }

    /// How much of an answer's `lease` may be trusted: all of it, or at most the ttl once
    /// [`CAPPED`].
    pub(crate) fn trusted(&self, lease: Duration) -> Duration {
        if self.state.load(Ordering::Acquire) & CAPPED == 0 {
            lease
        } else {
            lease.min(self.ttl)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn a_longer_lease_asked_stops_native_renewals() {
        let native = NativeRenewal::new(TTL);
        assert!(!native.begin(), "native before the guard decided");
        native.decided(false);
        assert!(native.begin());
        native.end();
        // Not longer than the ttl: native renewals go on.
        native.asking(10_000);
        assert!(native.begin());
        native.end();
        native.asking(10_001);
        assert!(!native.begin());
        // Nothing was out when it was asked: answers are trusted in full.
        assert_eq!(
            native.trusted(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn a_native_renewal_out_when_a_longer_lease_is_asked_caps_the_trust() {
        let native = NativeRenewal::new(TTL);
        native.decided(false);
        assert!(native.begin());
        native.asking(60_000);
        native.end();
        assert!(!native.begin());
        assert_eq!(native.trusted(Duration::from_secs(60)), TTL);
        assert_eq!(
            native.trusted(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn a_min_hold_lease_is_never_renewed_natively() {
        let native = NativeRenewal::new(TTL);
        native.decided(true);
        assert!(!native.begin());
        // Handed on to a guard without one: still never.
        native.decided(false);
        assert!(!native.begin());
        native.end();
        assert_eq!(
            native.trusted(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }
}
