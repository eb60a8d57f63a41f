//! The settings a client and a lock request take, and their defaults: one home for every
//! value the builder, the request and the attributes share.

use std::time::Duration;

use crate::error::Error;

/// Default ttl of a lock: long enough that a stalled renewal (a slow network, a busy server)
/// is retried several times before the lease ends, short enough that a crashed holder
/// blocks others for seconds, not minutes. The watchdog keeps it alive while you hold it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default time [`LockRequest::acquire`](crate::LockRequest::acquire) waits for a busy lock.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// Default time to open a connection; an unreachable server is reported after this long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time to wait for one reply. Far below any sensible ttl, so a stalled server is
/// noticed while a lease can still be renewed elsewhere or given up cleanly.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default key prefix: keeps lock keys apart from the application's own keys.
pub const DEFAULT_PREFIX: &str = "distlock";
/// Default longest lock name in bytes. Lock names are identifiers; a name this long is
/// almost certainly a value pasted in by mistake (and every acquire would send it).
pub const DEFAULT_MAX_NAME_LEN: usize = 8 * 1024;
/// Default number of connections of a single-node client (see [`ClientBuilder::connections`](crate::ClientBuilder::connections)):
/// one for wake-ups, renewals and inspection, one for acquisitions (on plain TCP the
/// acquisition connection is distlock's own, on which the calling tasks write and read the
/// socket themselves). More connections spread many tasks' acquisitions over more sockets,
/// but each request then shares its system calls with fewer others; on the 2-core VMs
/// measured, 2 was never the slowest (see [Connections](crate::guide::design#connections)).
pub const DEFAULT_CONNECTIONS: usize = 2;
/// The most connections [`ClientBuilder::connections`](crate::ClientBuilder::connections) accepts.
pub const MAX_CONNECTIONS: usize = 64;
/// Default time a quorum node's server must have been up before its vote counts: the default
/// ttl.
pub const DEFAULT_RESTART_DELAY: Duration = Duration::from_secs(30);

/// Replica acknowledgement: after a write acquisition, wait until `count` replicas of the
/// master that took it have confirmed the write (`WAIT count timeout`, sent on the same
/// connection right behind the acquire script, so it counts that write), or `timeout` passed.
/// With fewer confirmations the acquisition is undone and fails with
/// [`Error::ReplicasNotConfirmed`].
///
/// What it buys: a lock granted this way is on `count` replicas, so a failover that promotes
/// one of them keeps the lock held, instead of handing it to the next caller. What it does
/// not: `WAIT` is not strong consistency. The promoted replica may be one that did not
/// confirm (pick `count` = all replicas to rule that out), renewals and releases are not
/// waited for, and the master still answers other requests while it waits. See
/// [Replica acknowledgement](crate::guide::deployments#replica-acknowledgement).
///
/// Redis answers a `WAIT` only after it, so while replicas are slow or down every request
/// of this client to that master waits behind it for up to `timeout`: keep the timeout far
/// below the ttl and the response timeout (it must be below the latter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// How many replicas must confirm.
    pub count: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

impl Replicas {
    pub(crate) fn validate(&self, response_timeout: Duration) -> Result<(), Error> {
        if self.count == 0 {
            return Err(Error::config("replicas: the count must be at least 1"));
        }
        if self.timeout.is_zero() || self.timeout.as_millis() == 0 {
            // `WAIT n 0` would block forever.
            return Err(Error::config(
                "replicas: the timeout must be at least 1 ms (WAIT with 0 blocks forever)",
            ));
        }
        if self.timeout >= response_timeout {
            return Err(Error::config(format!(
                "replicas: the timeout {:?} must be below the response timeout {response_timeout:?}, or every WAIT that runs its course would be reported as a lost connection",
                self.timeout
            )));
        }
        Ok(())
    }
}

/// Default for [`HandOffLimits::passes`].
pub(crate) const MAX_LOCAL_HANDOFFS: u32 = 8;

/// Default for [`HandOffLimits::window`].
pub(crate) const LOCAL_WINDOW: Duration = Duration::from_millis(25);

/// How far one hold from Redis may pass between the tasks of a client
/// ([`ClientBuilder::local_handoff`](crate::ClientBuilder::local_handoff)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandOffLimits {
    /// Most passes before the hold is really released. Each pass saves about two round
    /// trips; the bound caps how many acquisitions other processes' waiters sit out before
    /// they get a fair try. Zero: no hand-off.
    pub(crate) passes: u32,
    /// Passes happen only within this time of when the hold was taken from Redis: with long
    /// holds a round trip saved is worth little, and other processes' waiters must not wait
    /// behind a string of them.
    pub(crate) window: Duration,
}

impl Default for HandOffLimits {
    fn default() -> Self {
        HandOffLimits {
            passes: MAX_LOCAL_HANDOFFS,
            window: LOCAL_WINDOW,
        }
    }
}
