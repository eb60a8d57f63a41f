//! Taking a lock: the request builder and the one acquire loop every mode goes through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::{Algorithm, Attempt, OwnerKind};
use crate::client::Client;
use crate::context::LockContext;
use crate::error::{is_transient, Error};
use crate::guard::{spawn_release, Guard, Registration};
use crate::key::LockKey;
use crate::lease::{self, LeaseState};
use crate::token;
use crate::wait::Waiter;
use crate::watchdog::Watch;

/// Default ttl of a lock: long enough that a stalled renewal (a slow network, a busy server)
/// is retried several times before the lease ends, short enough that a crashed holder
/// blocks others for seconds, not minutes. The watchdog keeps it alive while you hold it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default time [`LockRequest::acquire`] waits for a busy lock.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// A lock about to be taken; see [`Client::lock`]. Set the ttl and wait, then call
/// [`acquire`](Self::acquire) (waits) or [`try_acquire`](Self::try_acquire) (one attempt).
#[must_use = "a lock request does nothing until `acquire` or `try_acquire` is awaited"]
pub struct LockRequest<'c> {
    client: &'c Client,
    algorithm: &'static Algorithm,
    key: Result<LockKey, Error>,
    ttl: Duration,
    wait: Duration,
    watchdog: bool,
    renew_every: Option<Duration>,
    max_hold: Option<Duration>,
}

impl<'c> LockRequest<'c> {
    pub(crate) fn new(client: &'c Client, algorithm: &'static Algorithm, name: &[u8]) -> Self {
        LockRequest {
            client,
            algorithm,
            key: client.key(name),
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
            renew_every: None,
            max_hold: None,
        }
    }

    /// The lease (default 30 s, at least 10 ms). With the watchdog on, the lock is renewed
    /// while held and this only bounds how long a dead holder blocks others; with it off, the
    /// lock ends after this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](Self::acquire) waits for a busy lock (default 5 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Renew the lease while the guard is held (default on). Off, the lease simply ends
    /// after its ttl unless [`Guard::extend`] is called.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// How often the watchdog renews (default ttl / 3; must be below the ttl).
    pub fn renew_every(mut self, period: Duration) -> Self {
        self.renew_every = Some(period);
        self
    }

    /// Stop renewing after this much total hold time: the lease then runs out and is reported
    /// lost, so a holder stuck in an endless loop cannot keep the lock forever.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// Takes the lock, waiting up to the configured wait. Fails with [`Error::Timeout`] when
    /// it stayed busy, or with the connection's error when Redis stayed unreachable.
    pub async fn acquire(self) -> Result<Guard, Error> {
        let wait = self.wait;
        self.run(wait).await
    }

    /// One attempt: fails at once with [`Error::Busy`] if someone else holds the lock.
    pub async fn try_acquire(self) -> Result<Guard, Error> {
        self.run(Duration::ZERO).await
    }

    async fn run(self, wait: Duration) -> Result<Guard, Error> {
        let key = self.key?;
        let ttl_ms = lease::ttl_ms(self.ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let period = renew_period(self.watchdog, self.renew_every, ttl)?;
        let (client, algorithm) = (self.client, self.algorithm);
        if client.is_quorum() && !algorithm.quorum {
            return Err(Error::config(format!(
                "the {} lock runs on one Redis node (or a Cluster), not on a Redlock quorum: use Client::lock on this client",
                algorithm.name
            )));
        }
        let grant = Grant {
            client,
            algorithm,
            max_hold: self.max_hold,
        };
        let inner = client.inner();
        let context = LockContext::current();
        let owner = match algorithm.owner {
            // One token for the whole acquisition: a retry after a lost reply finds its own
            // token in place and takes it instead of waiting on itself.
            OwnerKind::Token => {
                if inner.holds(key.lock(), context) {
                    return Err(Error::Reentrant {
                        key: key.name().to_owned(),
                    });
                }
                token::owner_token()
            }
            OwnerKind::Context => Arc::from(format!("{}:{context}", inner.id)),
        };
        let started = Instant::now();
        let deadline = started.checked_add(wait);
        let mut waiter = Waiter::new(&inner.notifier, &key);
        // Tasks of this process already waiting for the lock go first (unless holders may
        // share it: a reader can get in beside the readers inside).
        if !wait.is_zero() && !algorithm.shared {
            waiter.arrive(wait).await;
        }
        let mut attempts = 0u32;
        // Set once a request may have reached the server without its answer reaching us.
        let mut unsure = false;
        loop {
            attempts += 1;
            let sent = Instant::now();
            let want_holder_ttl = !waiter.knows_holder();
            let (error, holder_ttl) = match inner
                .nodes
                .acquire(algorithm, &key, &owner, ttl_ms, unsure, want_holder_ttl)
                .await
            {
                Ok(Attempt::Acquired { fence }) => {
                    let state = Arc::new(LeaseState::new(lease::valid_until(sent, ttl)));
                    if state.is_valid() {
                        return Ok(
                            grant.guard(key, owner, context, fence, sent, ttl_ms, period, state)
                        );
                    }
                    // The answer came so late that the lease is already spent: give it back
                    // and carry on as if the lock were busy.
                    spawn_release(client, algorithm, key.clone(), owner.clone());
                    (None, None)
                }
                Ok(Attempt::Busy { holder_ttl }) => (None, holder_ttl),
                // The connection failed, or too few quorum nodes answered: maybe only for now.
                Err(e) if transient(&e) => {
                    unsure = true;
                    (Some(e), None)
                }
                Err(e) => {
                    if unsure {
                        spawn_release(client, algorithm, key, owner);
                    }
                    return Err(e);
                }
            };
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                if unsure {
                    spawn_release(client, algorithm, key.clone(), owner);
                }
                return Err(match error {
                    Some(e) => e,
                    None if wait.is_zero() => Error::Busy {
                        key: key.name().to_owned(),
                    },
                    None => Error::Timeout {
                        key: key.name().to_owned(),
                        waited: started.elapsed(),
                        attempts,
                    },
                });
            }
            waiter.pause(holder_ttl, error.is_some(), left).await;
        }
    }
}

/// A failure of the transport, not of the request: the same attempt may succeed later.
fn transient(e: &Error) -> bool {
    match e {
        Error::Redis { source, .. } => is_transient(source),
        Error::QuorumNotReached { .. } => true,
        _ => false,
    }
}

fn renew_period(
    on: bool,
    every: Option<Duration>,
    ttl: Duration,
) -> Result<Option<Duration>, Error> {
    if !on {
        return Ok(None);
    }
    let period = every.unwrap_or(ttl / 3);
    if period.is_zero() || period >= ttl {
        return Err(Error::config(format!(
            "watchdog period {period:?} must be above zero and below the ttl {ttl:?}"
        )));
    }
    Ok(Some(period))
}

/// What turns a granted attempt into a guard.
struct Grant<'c> {
    client: &'c Client,
    algorithm: &'static Algorithm,
    max_hold: Option<Duration>,
}

impl Grant<'_> {
    /// Registers the hold (watchdog, per-task table) and hands out its guard.
    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        key: LockKey,
        owner: Arc<str>,
        context: LockContext,
        fence: u64,
        sent: Instant,
        ttl_ms: u64,
        period: Option<Duration>,
        lease: Arc<LeaseState>,
    ) -> Guard {
        let inner = self.client.inner();
        let watch = period.map(|period| {
            inner.watchdog.watch(Watch {
                algorithm: self.algorithm,
                key: key.clone(),
                owner: owner.clone(),
                ttl_ms,
                period,
                stop_at: self.max_hold.map(|cap| sent + cap),
                lease: lease.clone(),
            })
        });
        let registered = match self.algorithm.owner {
            OwnerKind::Token => {
                inner.hold(&key, context, lease.clone());
                Some(context)
            }
            OwnerKind::Context => None,
        };
        Guard::new(
            self.client,
            self.algorithm,
            key,
            owner,
            fence,
            sent,
            lease,
            Registration {
                watch,
                context: registered,
            },
        )
    }
}
