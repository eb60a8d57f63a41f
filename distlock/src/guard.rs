//! A held lock.

use std::time::{Duration, Instant};

use crate::algorithm::Algorithm;
use crate::client::Client;
use crate::error::Error;
use crate::key::LockKey;
use crate::lease;

/// Proof of holding a lock, until [`release`](Guard::release) or drop.
///
/// How long the hold can be trusted is measured on the local monotonic clock from the moment
/// the acquire request was sent, minus an allowance for clock drift; wall-clock jumps do not
/// affect it. Dropping a guard releases the lock in a spawned task (never blocking the
/// dropping thread); outside a Tokio runtime the lock simply expires with its ttl.
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    client: Client,
    algorithm: &'static Algorithm,
    key: LockKey,
    owner: String,
    fence: u64,
    acquired_at: Instant,
    valid_until: Instant,
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
    pub(crate) fn new(
        client: &Client,
        algorithm: &'static Algorithm,
        key: LockKey,
        owner: String,
        fence: u64,
        sent: Instant,
        ttl: Duration,
    ) -> Guard {
        Guard {
            client: client.clone(),
            algorithm,
            key,
            owner,
            fence,
            acquired_at: sent,
            valid_until: lease::valid_until(sent, ttl),
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// A number strictly greater than that of every earlier acquisition of this lock name.
    /// Pass it to the resource you protect and have it refuse writes carrying a smaller one:
    /// that stops a holder that lost its lease (a long GC pause, a frozen VM) from
    /// overwriting its successor's work, which no lease alone can prevent.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// How long the lease can still be trusted (zero once it ran out).
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// True while the lease can be trusted: not released and not run out.
    pub fn is_held(&self) -> bool {
        !self.released && Instant::now() < self.valid_until
    }

    /// How long ago the lock was taken.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Renews the lease to `ttl` from now. Fails with [`Error::LeaseLost`] if the lock is no
    /// longer ours (it expired, and maybe someone else holds it now; their hold is untouched).
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = lease::ttl_ms(ttl)?;
        if self.released {
            return Err(self.lost());
        }
        let sent = Instant::now();
        let mut conn = self.client.inner().conn.clone();
        if self
            .algorithm
            .try_extend(&mut conn, &self.key, &self.owner, ttl_ms)
            .await?
        {
            self.valid_until = lease::valid_until(sent, Duration::from_millis(ttl_ms));
            Ok(())
        } else {
            self.valid_until = sent;
            Err(self.lost())
        }
    }

    /// Gives the lock back. Fails with [`Error::NotOwner`] if it had already expired (the lock
    /// is then left alone: it may be someone else's now).
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        let mut conn = self.client.inner().conn.clone();
        let released = self
            .algorithm
            .try_release(&mut conn, &self.key, &self.owner)
            .await?;
        if released {
            Ok(())
        } else {
            Err(Error::NotOwner {
                key: self.key.name().to_owned(),
            })
        }
    }

    fn lost(&self) -> Error {
        Error::LeaseLost {
            key: self.key.name().to_owned(),
            held_for: self.held_for(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.released {
            let key = self.key.clone();
            let owner = std::mem::take(&mut self.owner);
            spawn_release(&self.client, self.algorithm, key, owner);
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
    owner: String,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut conn = client.inner().conn.clone();
    runtime.spawn(async move {
        // Nobody is left to report to; the ttl bounds the cost of a failure.
        let _ = algorithm.try_release(&mut conn, &key, &owner).await;
    });
}
