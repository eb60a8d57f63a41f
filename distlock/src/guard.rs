//! A held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, LockName};
use crate::handoff::{self, Tenure, Transfer};
use crate::lease::{self, LeaseState};
use crate::release::{Hold, Until};
use crate::runtime::Shared;
use crate::token::FencingToken;
use crate::watchdog::Watching;

/// What a hold registered with the client, undone on release or drop.
pub(crate) struct Registration {
    /// The watchdog renewing the lease, if it is on.
    pub(crate) watch: Option<Watching>,
    /// Recorded in the client's table of holds (see `Inner::hold`).
    pub(crate) held: bool,
}

/// Proof of holding a lock, until [`release`](Guard::release) or drop.
///
/// How long the hold can be trusted is measured on the local monotonic clock from the moment
/// the acquire request was sent, minus an allowance for clock drift; wall-clock jumps do not
/// affect it. While the watchdog renews the lease, that moment moves forward. If a renewal is
/// refused, or none succeeds before the lease runs out, the lease is **lost**:
/// [`is_held`](Guard::is_held) turns false and [`lost`](Guard::lost) resolves. Nothing is
/// silent.
///
/// Dropping a guard releases the lock in a spawned task (never blocking the dropping
/// thread); outside a Tokio runtime the lock simply expires with its ttl. So does dropping
/// the future of [`release`](Guard::release) before it finished: the release is completed in
/// the background.
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    shared: Arc<Shared>,
    /// The hold on the servers: what the release names.
    hold: Hold,
    fence: Option<FencingToken>,
    acquired_at: Instant,
    lease: Arc<LeaseState>,
    /// Keep the lock at least this long after it was acquired (see `LockRequest::min_hold`).
    min_hold: Option<Duration>,
    registration: Registration,
    /// Set once a release has been answered: until then, dropping the guard (or the future of
    /// its release) sends the release in the background.
    released: bool,
    /// Set when the hold may pass straight to a local waiter (see [`crate::handoff`]).
    tenure: Option<Tenure>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.hold.key.name())
            .field("fencing_token", &self.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Guard {
    pub(crate) fn new(shared: &Arc<Shared>, hold: Hold, parts: GuardParts) -> Guard {
        let GuardParts {
            fence,
            acquired_at,
            lease,
            min_hold,
            registration,
            tenure,
        } = parts;
        lease.native.decided(min_hold.is_some());
        Guard {
            shared: shared.clone(),
            hold,
            fence,
            acquired_at,
            lease,
            min_hold,
            registration,
            released: false,
            tenure,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.hold.key.name()
    }

    /// The name for errors, with what it names (a lock, a semaphore, an election, ...).
    pub(crate) fn lock_name(&self) -> LockName {
        self.hold.key.lock_name()
    }

    /// The owner as the scripts store it (see `inspect::Holder::owner`).
    #[cfg(feature = "testing")]
    pub(crate) fn owner(&self) -> &str {
        &self.hold.id.owner
    }

    /// The fencing token, when the lock was taken with
    /// [`fencing(true)`](crate::LockRequest::fencing) (`None` otherwise): a number strictly
    /// greater than that of every earlier fenced acquisition of this lock name (re-entry keeps
    /// its tenure's number). Pass it to the resource you protect and have it refuse writes
    /// carrying a smaller one: that stops a holder that lost its lease (a long GC pause, a
    /// frozen VM) from overwriting its successor's work, which no lease alone can prevent.
    ///
    /// An `Option` where [`Leadership::term`](crate::Leadership::term) is not: fencing costs
    /// a script and a counter per acquisition, so a lock mints a token only when asked (a
    /// plain `SET NX` otherwise), while an election always takes its lock with fencing, its
    /// term being the token.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fence
    }

    /// How long the lease can still be trusted (zero once it ran out or was lost).
    pub fn remaining(&self) -> Duration {
        if self.is_held() {
            self.lease
                .valid_until()
                .saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        }
    }

    /// True while the lease can be trusted: not released, not lost, not run out. The lease
    /// is measured from when the acquire (or the latest renewal) was sent, by what the
    /// server answered, minus an allowance for clock drift; it never exceeds the lease the
    /// server holds.
    pub fn is_held(&self) -> bool {
        !self.released && self.lease.is_valid()
    }

    /// How long ago the lock was taken.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Resolves when the lease is lost (renewal refused, or none succeeded before the lease
    /// ran out on the local clock) with the [`Error::LeaseLost`] to report. Never resolves
    /// while the lease is healthy: race it against the work the lock protects.
    ///
    /// ```no_run
    /// # async fn demo(guard: distlock::Guard) -> Result<(), distlock::Error> {
    /// # async fn work() {}
    /// tokio::select! {
    ///     _ = work() => guard.release().await,
    ///     lost = guard.lost() => Err(lost),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) -> Error {
        self.lease.until_lost().await;
        self.lost_error()
    }

    /// Makes the lease last at least `ttl` from now. A lease that already has longer left
    /// keeps it (a lease is never shortened: with reentrant and read/write locks another hold
    /// of the same owner may count on it); either way the guard then trusts exactly what the
    /// server reported. Fails with [`Error::LeaseLost`] if the lock is no longer ours (it
    /// expired, and maybe someone else holds it now; their hold is untouched).
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = lease::ttl_ms(ttl)?;
        if !self.is_held() {
            return Err(self.lost_error());
        }
        // Before it is sent: a native renewal must not cut a longer lease back.
        self.lease.native.asking(ttl_ms);
        let sent = Instant::now();
        let hold = &self.hold;
        let remaining = hold
            .nodes
            .extend(hold.algorithm, &hold.key, &hold.id, ttl_ms)
            .await?;
        match remaining {
            Some(remaining) if self.lease.renewed(sent, remaining) => Ok(()),
            _ => {
                self.lease.declare_lost();
                Err(self.lost_error())
            }
        }
    }

    /// Gives the lock back. Fails with [`Error::NotOwner`] if it had already expired (the lock
    /// is then left alone: it may be someone else's now).
    ///
    /// A release whose reply is lost is sent again (it names this acquisition, so a second
    /// try frees nothing more), and a transport failure is tried again, at least three times
    /// and for about the client's response timeout (a silent connection replaced, a
    /// reconnection, a Sentinel client following a failover); after that the transport error
    /// is returned and the release goes on in the background while the lease lasts. Dropping
    /// this future before it finished also finishes the release in the background.
    ///
    /// When another task of this client waits for the same setnx lock on the same terms, the
    /// hold passes straight to it and no command is sent (see
    /// [`ClientBuilder::local_handoff`](crate::ClientBuilder::local_handoff) for the bounds):
    /// Redis keeps the lock, its value and its lease, and the waiter's guard carries on with
    /// them. Dropping the guard does the same.
    ///
    /// With [`LockRequest::min_hold`](crate::LockRequest::min_hold), a release before that
    /// time leaves the lock in place until then: the lease is made to last that long (one
    /// owner-checked extension) or, when it already does, a background task releases the
    /// lock at that time (and if this process ends first, the lease ends it within its ttl).
    // Not an `async fn`: that would keep the guard twice in the future (as its argument
    // and as the local it is moved to), and every release moves the future.
    #[allow(clippy::manual_async_fn)]
    pub fn release(mut self) -> impl std::future::Future<Output = Result<(), Error>> + Send {
        async move {
            if self.lease.is_revoked() {
                // `Client::shutdown` took the hold back, maybe while the work ran.
                self.unregister();
                self.released = true;
                return Err(self.lost_error());
            }
            if self.hand_off() {
                return Ok(());
            }
            // From here on the release may reach the server at any await: a hold it gave back
            // must never pass to a local waiter, whatever happens to this future (dropped,
            // it would otherwise be handed on by `Drop` while another client holds the lock).
            self.tenure = None;
            self.unregister();
            let labels = self.lease.labels.clone();
            if let Some(left) = self.min_hold_left() {
                let remaining = self.remaining();
                // Never released early, whatever happens next.
                self.released = true;
                // Boxed: rare, and it would size every release's future.
                let kept = Box::pin(self.hold.clone().keep(
                    left,
                    remaining,
                    self.lease.valid_until(),
                ))
                .await;
                return match kept {
                    Ok(true) => Ok(()),
                    Ok(false) => {
                        labels.released(self.acquired_at, false);
                        Err(self.not_owner())
                    }
                    Err(e) => Err(e),
                };
            }
            // Patience for a reconnection or a failover; then `Drop` carries on in the
            // background. One clock read: whether the lease was still ours as the release
            // went out, and where the patience counts from; the lease's end is read only if a
            // try fails.
            let (held, start) = self.lease.validity_now();
            let patience = Some((start, self.shared.response_timeout));
            let until = Until::Lease(&self.lease);
            let result = self.hold.release(until, patience, held).await;
            match result {
                Ok(released) => {
                    self.released = true;
                    labels.released(self.acquired_at, released);
                    if released {
                        Ok(())
                    } else {
                        Err(self.not_owner())
                    }
                }
                // `Drop` carries on in the background.
                Err(e) => Err(e),
            }
        }
    }

    /// Passes the hold to the next task of this process waiting for the lock, when both
    /// sides allow it (see [`crate::handoff`]): no command is sent, the server's hold and its
    /// lease go on under the waiter's guard. True when the waiter took it.
    fn hand_off(&mut self) -> bool {
        let Some(tenure) = &self.tenure else {
            return false;
        };
        // Nobody in this process waits for any lock: the common case, decided without a
        // clock read or a lookup.
        if self.released || !handoff::slots_open() || self.hold.nodes.tasks.is_closed() {
            return false;
        }
        let channels = self.shared.notifier.channels();
        if !tenure.may_pass(self.remaining()) {
            channels.before_release(&self.hold.key);
            return false;
        }
        // Off the table first: the waiter records the same lease under its own task.
        let held = std::mem::take(&mut self.registration.held);
        if held {
            self.shared.holds.unhold(&self.hold.key, &self.lease);
        }
        let transfer = Transfer {
            hold: self.hold.clone(),
            lease: self.lease.clone(),
            watch: self.registration.watch.take(),
            passes: tenure.passes + 1,
            since: tenure.since,
            armed: true,
        };
        match channels.hand_off(transfer, &tenure.terms) {
            None => {
                self.released = true;
                if held {
                    self.lease.labels.unheld(self.acquired_at);
                }
                self.lease.labels.released(self.acquired_at, true);
                true
            }
            Some(transfer) => {
                self.registration.watch = handoff::disarm(transfer);
                if held {
                    self.shared
                        .holds
                        .hold(&self.hold, tenure.context, self.lease.clone());
                    self.registration.held = true;
                }
                channels.before_release(&self.hold.key);
                false
            }
        }
    }

    /// Stops renewal and forgets the hold in the client's table. Runs before the release is
    /// sent, on the same connection as renewals, so no renewal can reach Redis after the
    /// release.
    fn unregister(&mut self) {
        drop(self.registration.watch.take());
        if std::mem::take(&mut self.registration.held) {
            self.shared.holds.unhold(&self.hold.key, &self.lease);
            self.lease.labels.unheld(self.acquired_at);
        }
    }

    /// How much of the minimum hold is still to come, if any and if the lease still holds.
    fn min_hold_left(&self) -> Option<Duration> {
        let left = self.min_hold?.checked_sub(self.held_for())?;
        (!left.is_zero() && self.lease.is_valid()).then_some(left)
    }

    fn lost_error(&self) -> Error {
        Error::LeaseLost {
            name: self.hold.key.lock_name(),
            held_for: self.held_for(),
        }
    }

    fn not_owner(&self) -> Error {
        Error::NotOwner {
            name: self.hold.key.lock_name(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.hand_off() {
            return;
        }
        let left = self.min_hold_left();
        let remaining = self.remaining();
        self.unregister();
        // Taken back by `Client::shutdown`, which released it.
        if self.lease.is_revoked() {
            return;
        }
        if let (false, Some(left)) = (self.released, left) {
            let (hold, until) = (self.hold.clone(), self.lease.valid_until());
            let tasks = hold.nodes.tasks.clone();
            tasks.spawn(async move {
                let _ = hold.keep(left, remaining, until).await;
            });
            return;
        }
        if !self.released {
            let until = Some(self.lease.valid_until());
            self.hold.clone().release_in_background(until);
        }
    }
}

/// What a new guard carries besides its hold.
pub(crate) struct GuardParts {
    pub(crate) fence: Option<FencingToken>,
    pub(crate) acquired_at: Instant,
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) registration: Registration,
    pub(crate) tenure: Option<Tenure>,
}
