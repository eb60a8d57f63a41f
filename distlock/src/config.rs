//! The settings a client and a lock request take, and their defaults: one home for every
//! value the builder, the request and the attributes share.

use std::borrow::Cow;
use std::time::Duration;

use crate::error::Error;
use crate::lease;
use crate::telemetry::NO_LABEL;

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

/// Every setting of a lock request, with its default: what the setters of
/// [`LockRequest`](crate::LockRequest) set, what a primitive built on a lock (an
/// [`Election`](crate::Election)) keeps between its requests, and, once
/// [settled](Self::settled), what the acquisition, its attempts and a hand-off read.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
    pub(crate) renew_every: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) replicas: Option<Replicas>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) fencing: bool,
    /// A semaphore's number of permits (`None` for the other modes).
    pub(crate) permits: Option<u32>,
    pub(crate) label: Cow<'static, str>,
    pub(crate) record_name: bool,
    pub(crate) site: Option<&'static str>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
            renew_every: None,
            max_hold: None,
            replicas: None,
            min_hold: None,
            fencing: false,
            permits: None,
            label: Cow::Borrowed(NO_LABEL),
            record_name: false,
            site: None,
        }
    }
}

impl Settings {
    /// The settings as an acquisition runs them, checked: the ttl rounded up to whole
    /// milliseconds (the server's unit), the renewal period below it, the client's replica
    /// acknowledgement (`client_replicas`) where the request set none.
    pub(crate) fn settled(mut self, client_replicas: Option<Replicas>) -> Result<Settings, Error> {
        self.ttl = Duration::from_millis(lease::ttl_ms(self.ttl)?);
        if let Some(period) = self.renewal() {
            if period.is_zero() || period >= self.ttl {
                return Err(Error::config(format!(
                    "watchdog period {period:?} must be above zero and below the ttl {:?}",
                    self.ttl
                )));
            }
        }
        self.replicas = self.replicas.or(client_replicas);
        Ok(self)
    }

    /// The ttl in milliseconds, as the scripts take it (whole once [settled](Self::settled)).
    pub(crate) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// How often the watchdog renews a hold; `None` with the watchdog off.
    pub(crate) fn renewal(&self) -> Option<Duration> {
        self.watchdog
            .then(|| self.renew_every.unwrap_or(self.ttl / 3))
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
