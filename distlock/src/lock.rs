//! Taking a lock: the request builder and the one acquire loop every mode goes through.

use std::time::{Duration, Instant};

use crate::algorithm::{Algorithm, Attempt};
use crate::client::Client;
use crate::error::{is_transient, Error};
use crate::guard::{spawn_release, Guard};
use crate::key::LockKey;
use crate::lease;
use crate::token;
use crate::wait::Waiter;

/// Default ttl of a lock taken by hand: long enough for most critical sections, short enough
/// that a crashed holder blocks others for seconds, not minutes.
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
}

impl<'c> LockRequest<'c> {
    pub(crate) fn new(client: &'c Client, algorithm: &'static Algorithm, name: &[u8]) -> Self {
        LockRequest {
            client,
            algorithm,
            key: client.key(name),
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
        }
    }

    /// How long the lock lives unless extended (default 30 s, at least 10 ms). If the holder
    /// dies, others wait at most this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](Self::acquire) waits for a busy lock (default 5 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
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
        let algorithm = self.algorithm;
        let client = self.client;
        // One token for the whole acquisition: a retry after a lost reply finds its own
        // token in place and takes it instead of waiting on itself.
        let owner = token::owner_token();
        let started = Instant::now();
        let deadline = started.checked_add(wait);
        let mut conn = client.inner().conn.clone();
        let mut waiter = Waiter::new();
        let mut attempts = 0u32;
        // Set once a request may have reached the server without its answer reaching us.
        let mut unsure = false;
        loop {
            attempts += 1;
            let sent = Instant::now();
            let failure = match algorithm.try_acquire(&mut conn, &key, &owner, ttl_ms).await {
                Ok(Attempt::Acquired { fence }) => {
                    let guard = Guard::new(
                        client,
                        algorithm,
                        key.clone(),
                        owner.clone(),
                        fence,
                        sent,
                        ttl,
                    );
                    if guard.is_held() {
                        return Ok(guard);
                    }
                    // The answer came so late that the lease is already spent: give it back
                    // (dropping the guard releases it) and go on as if the lock were busy.
                    drop(guard);
                    None
                }
                Ok(Attempt::Busy { holder_ttl }) => Some((None, holder_ttl)),
                Err(Error::Redis { source, op, key: k }) if is_transient(&source) => {
                    unsure = true;
                    Some((Some(Error::Redis { source, op, key: k }), None))
                }
                Err(e) => {
                    if unsure {
                        spawn_release(client, algorithm, key, owner);
                    }
                    return Err(e);
                }
            };
            let (error, holder_ttl) = failure.unwrap_or((None, None));
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
            waiter.pause(holder_ttl, left).await;
        }
    }
}
