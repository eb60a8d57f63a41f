//! The shared core of one client: what its guards, requests and hand-offs hold on to. The
//! public [`Client`](crate::Client) is a handle on it, as bb8's guards hold the pool's inner and
//! not the public pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{HandOffLimits, Replicas};
use crate::error::Error;
use crate::holds::Holds;
use crate::key::LockKey;
use crate::nodes::Nodes;
use crate::notify::Notifier;
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
}
