//! Leader election, built on the exclusive lock: to lead is to hold the `setnx` lock of the
//! election's name, taken with a fencing token and renewed by the watchdog, and a term is that
//! acquisition's fencing token. Nothing of the lock is copied: a campaign is the one acquire
//! loop (waiting with wake-ups on release), a leadership is a [`Guard`](crate::Guard) (its
//! lease on the boot clock, the watchdog, the release on drop), and who leads is the holder
//! description every setnx lock stores.
//!
//! What the election adds is how others follow it ([`observe`]): they listen on the lock's
//! wake-up channel as observers (`notify::Role::Observer`: woken by every message, taking no
//! waiter's wake-up), and read the holder and the fencing counter in one step, with the
//! inspection's script behind a mark that makes the holder's release publish (`mark.lua`); a
//! new leader says so on the same channel ([`leadership`]).

mod lead;
mod leadership;
mod observe;

use std::borrow::Cow;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::config::{Replicas, DEFAULT_TTL};
use crate::error::Error;
use crate::lock::LockRequest;
use crate::runtime::Shared;
use crate::setnx::SETNX;
use crate::telemetry::NO_LABEL;

pub use leadership::Leadership;
pub use observe::Leader;

impl Client {
    /// A leader election among the processes that campaign under `name`:
    /// [`lead`](Election::lead) runs a job whenever this process leads, until it is done or the
    /// client shuts down; [`campaign`](Election::campaign) waits until this process leads and
    /// returns its [`Leadership`] (its term, its loss, its resignation), for a loop of your
    /// own; [`observe`](Election::observe) follows who leads.
    ///
    /// Leadership is the exclusive lock `name` ([`Client::lock`]), held with a fencing token,
    /// which is the term, and renewed by the watchdog; one name is one election (do not lock
    /// it by other means). It runs wherever that lock does: one node, Sentinel, Redis Cluster
    /// and a Redlock quorum (terms from the quorum's fencing: see
    /// [the design guide](crate::guide::design#leader-election) for what each promises).
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// # async fn run_the_scheduler(term: distlock::FencingToken) {}
    /// use std::time::Duration;
    ///
    /// let election = client.election("billing-scheduler").ttl(Duration::from_secs(10));
    /// loop {
    ///     // Waits until this process leads; `ShutDown` once the client is shut down.
    ///     let leadership = election.campaign().await?;
    ///     tokio::select! {
    ///         lost = leadership.lost() => eprintln!("no longer leading: {lost}"),
    ///         () = run_the_scheduler(leadership.term()) => {
    ///             leadership.resign().await?; // the next candidate takes over at once
    ///             return Ok(());
    ///         }
    ///     }
    /// }
    /// // The same loop in one call:
    /// // election.lead(|term| run_the_scheduler(term)).await
    /// # }
    /// ```
    #[track_caller]
    pub fn election(&self, name: impl AsRef<[u8]>) -> Election {
        Election {
            shared: self.inner().clone(),
            name: Arc::from(name.as_ref()),
            ttl: DEFAULT_TTL,
            wait: Duration::MAX,
            renew_every: None,
            replicas: None,
            label: Cow::Borrowed(NO_LABEL),
            caller: Location::caller(),
        }
    }
}

/// A leader election; see [`Client::election`]. Set the ttl (and, if needed, a bound on the
/// wait), then [`campaign`](Self::campaign) or [`observe`](Self::observe). Cheap to clone,
/// and reusable: campaign again after a leadership ended.
#[derive(Clone)]
#[must_use = "an election does nothing until `campaign` or `observe` is awaited"]
pub struct Election {
    shared: Arc<Shared>,
    name: Arc<[u8]>,
    ttl: Duration,
    wait: Duration,
    renew_every: Option<Duration>,
    replicas: Option<Replicas>,
    label: Cow<'static, str>,
    /// Where the election was made: the leader's call site in its description.
    caller: &'static Location<'static>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// The leader's lease (default 30 s, at least 10 ms), renewed every ttl/3 while it
    /// leads. It bounds how long a leader that died (a crash, a `kill -9`, a host gone) keeps
    /// the others waiting: they take over once its lease ran out. A leader that resigns or
    /// drops its [`Leadership`] hands over at once, whatever the ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`campaign`](Self::campaign) waits to lead before it fails with
    /// [`Error::Timeout`] (zero: one attempt, [`Error::Busy`] if another leads); by default
    /// it waits as long as it takes, also through an outage of Redis.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How often the leader's lease is renewed (default ttl / 3; must be below the ttl).
    pub fn renew_every(mut self, period: Duration) -> Self {
        self.renew_every = Some(period);
        self
    }

    /// Replica acknowledgement of each term's acquisition (Sentinel, Cluster), as
    /// [`LockRequest::replicas`] does it: a term that fewer replicas confirmed is undone
    /// before a failover could hand the lead to a second process.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas { count, timeout });
        self
    }

    /// What the election's lock is called in traces and metrics (see
    /// [`LockRequest::label`]).
    pub fn label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.label = label.into();
        self
    }

    /// The lock request a campaign makes: the exclusive lock of the election's name, fenced,
    /// renewed by the watchdog.
    fn request(&self) -> LockRequest<'_> {
        let mut request = LockRequest::new(&self.shared, &SETNX, &self.name, self.caller)
            .ttl(self.ttl)
            .wait(self.wait)
            .fencing(true)
            .label(self.label.clone());
        if let Some(period) = self.renew_every {
            request = request.renew_every(period);
        }
        if let Some(replicas) = self.replicas {
            request = request.replicas(replicas.count, replicas.timeout);
        }
        request
    }

    /// Waits until this process leads: takes the election's lock, waiting as a lock waiter
    /// does (woken within about a round trip of the leader's resignation, or once a dead
    /// leader's lease ran out). The future may be dropped at any point: a term it took unseen
    /// is given back in the background.
    ///
    /// Fails with [`Error::Timeout`] once the [`wait`](Self::wait) ran out, with
    /// [`Error::ShutDown`] once the client is [shut down](crate::Client::shutdown) (also a
    /// campaign waiting then: it ends at once), with [`Error::Reentrant`] when the calling task
    /// already leads this election, and with the error of a setting or name that cannot work;
    /// an outage of Redis is waited through (up to the wait). Only the timeout (and
    /// [`Error::Busy`] with a wait of zero) is [retryable](Error::is_retryable): a loop that campaigns again after a retryable error
    /// and stops on any other ends when the service shuts down. [`lead`](Self::lead) is that
    /// loop, with the job run while leading.
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        let key = self.shared.key(&self.name)?;
        let guard = self.request().acquire().await?;
        Leadership::new(&self.shared, key, guard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_goes_in_front_of_the_inspection() {
        // The observer's script must keep the inspection's keys and reply shape: it parses the
        // reply with the inspection's parser.
        let src = observe::script_source();
        assert!(src.starts_with(include_str!("mark.lua")));
        assert!(src.ends_with(include_str!("../inspect/inspect.lua")));
        assert!(include_str!("mark.lua").contains("KEYS[6]"));
        assert!(!include_str!("../inspect/inspect.lua").contains("KEYS[6]"));
        assert!(!include_str!("../inspect/inspect.lua").contains("ARGV"));
    }
}
