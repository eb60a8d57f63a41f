//! Giving holds back: by the guard's `release()`, in the background for a dropped guard or an
//! abandoned attempt, and after a minimum hold. One acquisition's release is idempotent (it
//! names the acquisition), so each of these simply sends it again after a transport failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::{Algorithm, HoldId};
use crate::config::DEFAULT_TTL;
use crate::error::Error;
use crate::key::LockKey;
use crate::lease::{self, BootReading, LeaseState};
use crate::nodes::Nodes;

/// Tries a release gets before a waiting caller's patience can stop it: the first may go to a
/// connection not yet found silent, the second to its replacement.
pub(crate) const RELEASE_TRIES: u32 = 3;

/// Until when a release is sent again after a transport failure: the end of the lease, after
/// which there is nothing left to free.
#[derive(Clone, Copy)]
pub(crate) enum Until<'a> {
    At(Instant),
    /// The end of this lease, read only if a try failed.
    Lease(&'a LeaseState),
}

impl Until<'_> {
    fn passed(self) -> bool {
        match self {
            Until::At(t) => Instant::now() >= t,
            Until::Lease(lease) => lease.ended(),
        }
    }
}

/// One acquisition's hold on the servers, as a release names it.
#[derive(Clone)]
pub(crate) struct Hold {
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) algorithm: &'static Algorithm,
    pub(crate) key: LockKey,
    pub(crate) id: HoldId,
}

impl Hold {
    /// Sends the release, and again after a transport failure (a lost reply, a silent
    /// connection replaced, a reconnection, a client following a failover) until `until`, the
    /// end of the lease, after which there is nothing left to free. A caller waiting for the
    /// answer gives its `patience`: past it (counted from the reading given with it, taken
    /// before the first try), a release that has been tried [`RELEASE_TRIES`] times stops.
    /// True when the release freed the hold. A retry that finds nothing counts as released
    /// only when `held` (the lease was still ours when the release was sent): the earlier try,
    /// whose answer was lost, freed it. Otherwise the hold was already gone. The clocks are
    /// read only after a failed try.
    pub(crate) async fn release(
        &self,
        until: Until<'_>,
        patience: Option<(BootReading, Duration)>,
        held: bool,
    ) -> Result<bool, Error> {
        let mut pause = Duration::from_millis(2);
        let mut tried = 0;
        loop {
            tried += 1;
            let again = || {
                !until.passed()
                    && (tried < RELEASE_TRIES
                        || patience.is_none_or(|(start, patience)| start.elapsed() < patience))
            };
            match self
                .nodes
                .release(self.algorithm, &self.key, &self.id)
                .await
            {
                Ok(released) => return Ok(released || (tried > 1 && held)),
                Err(e) if e.is_retryable() && again() => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives back an acquisition that must not stand (see `LockRequest::acquire`), retrying a
    /// transport failure while its lease `ttl` could last. True when the release was answered
    /// (the hold is gone either way); false leaves it to the caller's background release.
    pub(crate) async fn give_back_now(&self, ttl: Duration) -> bool {
        let until = Instant::now() + ttl;
        self.release(Until::At(until), None, true).await.is_ok()
    }

    /// Gives back an acquisition whose attempt may have taken the lock unseen, with one try:
    /// true when the servers answered (the hold is gone either way).
    pub(crate) async fn give_back_once(&self) -> bool {
        self.release(Until::At(Instant::now()), None, false)
            .await
            .is_ok()
    }

    /// Releases without blocking the caller: `Drop` cannot await, and blocking a runtime
    /// thread on I/O can deadlock a current-thread runtime. Transport failures are retried
    /// until `until` (the end of the lease; by default a default ttl from now). If no runtime
    /// is running, or every try fails, the lock still ends with its lease.
    pub(crate) fn release_in_background(self, until: Option<Instant>) {
        let until = until.unwrap_or_else(|| Instant::now() + DEFAULT_TTL);
        let tasks = self.nodes.tasks.clone();
        tasks.spawn(async move {
            // Nobody is left to report to; the lease bounds the cost of a failure.
            let _ = self.release(Until::At(until), None, true).await;
        });
    }

    /// Releases at `left` from now, in the background, retried until `valid_until`. A client
    /// shut down before then leaves the hold to its lease: released early, it would not have
    /// been kept for its minimum hold, and waiting for it would hold up the shutdown.
    pub(crate) fn release_after(self, left: Duration, valid_until: Instant) {
        let tasks = self.nodes.tasks.clone();
        tasks.clone().spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(left) => {
                    let _ = self.release(Until::At(valid_until), None, true).await;
                }
                () = tasks.closed() => {}
            }
        });
    }

    /// Keeps a released lock until `left` from now (its minimum hold): a lease that ends
    /// sooner (`remaining` by our clock) is extended to `left`, owner-checked, and then simply
    /// runs out; a longer one is released when `left` has passed, in the background, retried
    /// until `valid_until`. Ok(false): the lock was no longer ours.
    pub(crate) async fn keep(
        self,
        left: Duration,
        remaining: Duration,
        valid_until: Instant,
    ) -> Result<bool, Error> {
        if left > remaining {
            let ms = lease::ttl_ms(left.max(lease::MIN_TTL))?;
            let extended = self
                .nodes
                .extend(self.algorithm, &self.key, &self.id, ms)
                .await?;
            return Ok(extended.is_some());
        }
        self.release_after(left, valid_until);
        Ok(true)
    }
}
