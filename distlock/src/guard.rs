//! A held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::Algorithm;
use crate::client::Client;
use crate::context::LockContext;
use crate::error::Error;
use crate::key::LockKey;
use crate::lease::{self, LeaseState};

/// What a hold registered with the client, undone on release or drop.
pub(crate) struct Registration {
    /// The watchdog entry renewing the lease, if the watchdog is on.
    pub(crate) watch: Option<u64>,
    /// The task recorded as holding a non-reentrant lock.
    pub(crate) context: Option<LockContext>,
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
/// thread); outside a Tokio runtime the lock simply expires with its ttl.
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    client: Client,
    algorithm: &'static Algorithm,
    key: LockKey,
    owner: Arc<str>,
    fence: u64,
    acquired_at: Instant,
    lease: Arc<LeaseState>,
    registration: Registration,
    released: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.key.name())
            .field("fencing_token", &self.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Guard {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: &Client,
        algorithm: &'static Algorithm,
        key: LockKey,
        owner: Arc<str>,
        fence: u64,
        acquired_at: Instant,
        lease: Arc<LeaseState>,
        registration: Registration,
    ) -> Guard {
        Guard {
            client: client.clone(),
            algorithm,
            key,
            owner,
            fence,
            acquired_at,
            lease,
            registration,
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// A number strictly greater than that of every earlier acquisition of this lock name
    /// (re-entry keeps its tenure's number). Pass it to the resource you protect and have it
    /// refuse writes carrying a smaller one: that stops a holder that lost its lease (a long
    /// GC pause, a frozen VM) from overwriting its successor's work, which no lease alone can
    /// prevent.
    pub fn fencing_token(&self) -> u64 {
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

    /// True while the lease can be trusted: not released, not lost, not run out.
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

    /// Renews the lease to `ttl` from now. Fails with [`Error::LeaseLost`] if the lock is no
    /// longer ours (it expired, and maybe someone else holds it now; their hold is untouched).
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = lease::ttl_ms(ttl)?;
        if !self.is_held() {
            return Err(self.lost_error());
        }
        let sent = Instant::now();
        let ours = self
            .client
            .inner()
            .nodes
            .extend(self.algorithm, &self.key, &self.owner, ttl_ms)
            .await?;
        if ours && self.lease.renewed(sent, Duration::from_millis(ttl_ms)) {
            Ok(())
        } else {
            self.lease.declare_lost();
            Err(self.lost_error())
        }
    }

    /// Gives the lock back. Fails with [`Error::NotOwner`] if it had already expired (the lock
    /// is then left alone: it may be someone else's now).
    pub async fn release(mut self) -> Result<(), Error> {
        self.unregister();
        let released = self
            .client
            .inner()
            .nodes
            .release(self.algorithm, &self.key, &self.owner)
            .await?;
        if released {
            Ok(())
        } else {
            Err(Error::NotOwner {
                key: self.key.name().to_owned(),
            })
        }
    }

    /// Stops renewal and forgets the per-task hold. Runs before the release is sent, on the
    /// same connection as renewals, so no renewal can reach Redis after the release.
    fn unregister(&mut self) {
        self.released = true;
        let inner = self.client.inner();
        if let Some(id) = self.registration.watch.take() {
            inner.watchdog.unwatch(id);
        }
        if self.registration.context.take().is_some() {
            inner.unhold(self.key.lock(), &self.lease);
        }
    }

    fn lost_error(&self) -> Error {
        Error::LeaseLost {
            key: self.key.name().to_owned(),
            held_for: self.held_for(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.released {
            self.unregister();
            let key = self.key.clone();
            spawn_release(&self.client, self.algorithm, key, self.owner.clone());
        }
    }
}

/// Best-effort release without blocking the caller: `Drop` cannot await, and blocking a
/// runtime thread on I/O can deadlock a current-thread runtime. If no runtime is running,
/// or the release fails, the lock still ends with its ttl.
pub(crate) fn spawn_release(
    client: &Client,
    algorithm: &'static Algorithm,
    key: LockKey,
    owner: Arc<str>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let nodes = client.inner().nodes.clone();
    runtime.spawn(async move {
        // Nobody is left to report to; the ttl bounds the cost of a failure.
        let _ = nodes.release(algorithm, &key, &owner).await;
    });
}
