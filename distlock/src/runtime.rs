//! The shared core of one client: what its guards, requests and hand-offs hold on to. The
//! public [`Client`](crate::Client) is a handle on it, as bb8's guards hold the pool's inner and
//! not the public pool.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::Algorithm;
use crate::config::{HandOffLimits, Replicas};
use crate::error::{Error, LockName};
use crate::holds::Holds;
use crate::key::LockKey;
use crate::lease;
use crate::mode::Primitive;
use crate::nodes::Nodes;
use crate::notify::Notifier;
use crate::release::Until;
use crate::watchdog::Watchdog;

/// One client's deployment, settings and local state.
pub(crate) struct Shared {
    /// The servers: one, or the independent masters of a quorum.
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) prefix: String,
    pub(crate) max_name_len: usize,
    /// Random per client: distinguishes owners across processes in reentrant and read/write
    /// locks, whose owner is this id plus the task.
    pub(crate) id: String,
    pub(crate) notifier: Notifier,
    pub(crate) watchdog: Watchdog,
    /// Every hold taken through this client (see [`Holds`]).
    pub(crate) holds: Holds,
    /// Counter of acquisition nonces (see [`Shared::nonce`]).
    pub(crate) nonces: AtomicU64,
    /// The client's replica acknowledgement, if any.
    pub(crate) replicas: Option<Replicas>,
    pub(crate) response_timeout: Duration,
    /// Bounds on passing a hold between this client's tasks (see `handoff`).
    pub(crate) handoff: HandOffLimits,
}

impl Shared {
    /// A nonce naming one acquisition: this client's random id and a counter, so it is
    /// unique across clients too (the holds of many owners share one read/write hash, and a
    /// quorum's setnx release publishes it for waiters to count once).
    pub(crate) fn nonce(&self) -> Arc<str> {
        let n = self.nonces.fetch_add(1, Ordering::Relaxed);
        Arc::from(format!("{}.{n:x}", self.id))
    }

    /// The keys of the lock `name`, or why the name is refused.
    pub(crate) fn key(&self, name: &[u8]) -> Result<LockKey, Error> {
        LockKey::new(&self.prefix, name, self.max_name_len)
    }

    /// The keys of `name` as the name of a `primitive` (what its errors call it), or why the
    /// name is refused.
    pub(crate) fn key_as(&self, primitive: Primitive, name: &[u8]) -> Result<LockKey, Error> {
        match self.key(name) {
            Ok(key) => Ok(key.naming(primitive)),
            Err(Error::InvalidName { name, reason }) => Err(Error::InvalidName {
                name: LockName::new(name, primitive),
                reason,
            }),
            Err(e) => Err(e),
        }
    }

    /// The keys of `name` as a lock of `algorithm`'s mode (a read lock, a semaphore, ...).
    pub(crate) fn key_for(&self, algorithm: &Algorithm, name: &[u8]) -> Result<LockKey, Error> {
        self.key_as(algorithm.mode.primitive(), name)
    }

    /// The keys of the set of `names`, each the name of a `primitive` (see `key::set`), or
    /// why a name (or an empty list) is refused.
    pub(crate) fn set_key<N: AsRef<[u8]>>(
        &self,
        primitive: Primitive,
        names: impl IntoIterator<Item = N>,
    ) -> Result<LockKey, Error> {
        let keys = names
            .into_iter()
            .map(|name| self.key_as(primitive, name.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        LockKey::set(keys).map_err(|e| match e {
            Error::InvalidName { name, reason } => Error::InvalidName {
                name: LockName::new(name, primitive.set()),
                reason,
            },
            e => e,
        })
    }
}

/// What [`Client::shutdown`](crate::Client::shutdown) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// Locks the client still held (their guards alive) that it took back and released.
    pub released: usize,
    /// Locks it took back whose release was not confirmed in time (Redis unreachable, or the
    /// lease had already run out): each frees at the latest when its lease ends.
    pub unconfirmed: usize,
    /// Background work (releases of dropped guards, requests left to finish) still running
    /// when the time given ran out. It goes on while the runtime runs.
    pub unfinished: usize,
}

impl Shutdown {
    /// True when every lock was released and no background work was left.
    pub fn is_complete(&self) -> bool {
        self.unconfirmed == 0 && self.unfinished == 0
    }
}

impl Shared {
    /// See [`Client::shutdown`](crate::Client::shutdown).
    pub(crate) async fn shutdown(&self, within: Duration) -> Shutdown {
        let deadline = lease::after(Instant::now(), within);
        let tasks = &self.nodes.tasks;
        // First: an acquisition that registers its hold after the table is emptied below sees
        // the client closed and gives the hold back itself.
        tasks.close();
        let holds = self.holds.take_all();
        let taken = holds.len();
        let released = Arc::new(AtomicUsize::new(0));
        for (lease, hold) in holds {
            let held = lease.is_valid();
            lease.revoke();
            let until = lease.valid_until();
            let released = released.clone();
            tasks.spawn(async move {
                if let Ok(true) = hold.release(Until::At(until), None, held).await {
                    released.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // No lease is left to renew, and no waiter to tell of a reconnection.
        self.watchdog.stop();
        self.notifier.stop();
        let _ = tokio::time::timeout_at(deadline.into(), tasks.idle()).await;
        let released = released.load(Ordering::Relaxed);
        Shutdown {
            released,
            unconfirmed: taken - released,
            unfinished: tasks.running(),
        }
    }
}
