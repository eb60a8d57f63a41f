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

use crate::config::Replicas;
use crate::error::Error;
use crate::lock::{LockRequest, Settings};
use crate::mode::Primitive;
use crate::runtime::Shared;
use crate::setnx::SETNX;

pub use leadership::Leadership;
pub use observe::Leader;

/// A leader election; see [`Client::election`](crate::Client::election). Set the ttl (and, if
/// needed, a bound on the wait), then [`campaign`](Self::campaign),
/// [`try_campaign`](Self::try_campaign), [`lead`](Self::lead) or [`observe`](Self::observe).
///
/// Two deliberate differences from a [`LockRequest`], whose shape it otherwise shares (the
/// same setters, the same errors; [the vocabulary](crate::guide::vocabulary) sets them side by side):
///
/// - **A reusable value, not a consumed builder.** [`campaign`](Self::campaign) borrows
///   (`&self`) where [`LockRequest::acquire`] consumes (`self`): a campaign is a loop, and
///   the same election campaigns again after each term ends, from one value kept in the
///   service's state (cheap to clone). A lock request is one acquisition, so it is made
///   afresh for each.
/// - **It waits for ever by default.** A lock request waits 5 s
///   ([`DEFAULT_WAIT`](crate::DEFAULT_WAIT)): a request that cannot have its lock soon
///   should fail and say so. A campaign is a long-lived loop whose waiting *is* its work (a
///   standby instance waits for the leader to go), so it waits as long as it takes, also
///   through an outage of Redis; [`wait`](Self::wait) bounds it, and
///   [`try_campaign`](Self::try_campaign) makes one attempt.
#[derive(Clone)]
#[must_use = "an election does nothing until `campaign`, `try_campaign`, `lead` or `observe` is awaited"]
pub struct Election {
    shared: Arc<Shared>,
    name: Arc<[u8]>,
    /// The settings of each campaign's request: a lock request's, fenced, waiting as long as
    /// it takes by default.
    settings: Settings,
    /// Where the election was made: the leader's call site in its description.
    caller: &'static Location<'static>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("ttl", &self.settings.ttl)
            .field("wait", &self.settings.wait)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// The election `name` among the clients of `shared`'s deployment, with the default
    /// settings; `caller` is where it was made.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        name: &[u8],
        caller: &'static Location<'static>,
    ) -> Election {
        Election {
            shared: shared.clone(),
            name: Arc::from(name),
            settings: Settings {
                wait: Duration::MAX,
                fencing: true,
                ..Settings::default()
            },
            caller,
        }
    }

    /// The leader's lease (default 30 s, at least 10 ms), renewed every ttl/3 while it
    /// leads. It bounds how long a leader that died (a crash, a `kill -9`, a host gone) keeps
    /// the others waiting: they take over once its lease ran out. A leader that resigns or
    /// drops its [`Leadership`] hands over at once, whatever the ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// How long [`campaign`](Self::campaign) waits to lead before it fails with
    /// [`Error::Timeout`] (zero: one attempt, [`Error::Busy`] if another leads, as
    /// [`try_campaign`](Self::try_campaign)); by default it waits as long as it takes, also
    /// through an outage of Redis (a lock request's default is 5 s: see the type's doc).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// How often the leader's lease is renewed (default ttl / 3; must be below the ttl).
    pub fn renew_every(mut self, period: Duration) -> Self {
        self.settings.renew_every = Some(period);
        self
    }

    /// Replica acknowledgement of each term's acquisition (Sentinel, Cluster), as
    /// [`LockRequest::replicas`] does it: a term that fewer replicas confirmed is undone
    /// before a failover could hand the lead to a second process.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.settings.replicas = Some(Replicas { count, timeout });
        self
    }

    /// What the election's lock is called in traces and metrics (see
    /// [`LockRequest::label`]).
    pub fn label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.settings.label = label.into();
        self
    }

    /// The lock request a campaign makes: the exclusive lock of the election's name, fenced,
    /// renewed by the watchdog.
    fn request(&self) -> LockRequest<'_> {
        let key = self.shared.key_as(Primitive::Election, &self.name);
        let settings = self.settings.clone();
        LockRequest::with_settings(&self.shared, &SETNX, key, settings, self.caller)
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
        let key = self.shared.key_as(Primitive::Election, &self.name)?;
        let guard = self.request().acquire().await?;
        Leadership::new(&self.shared, key, guard)
    }

    /// One attempt to lead: [`Error::Busy`] at once if another process leads, else the
    /// [`Leadership`], as [`campaign`](Self::campaign) returns it. The same as a campaign with
    /// [`wait(Duration::ZERO)`](Self::wait), without changing this election's wait; what
    /// [`LockRequest::try_acquire`] is to a lock. For a job that every instance starts on
    /// its own timer and only one should run, now or not at all:
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// # async fn compact_the_logs(term: distlock::FencingToken) {}
    /// let election = client.election("log-compactor");
    /// match election.try_campaign().await {
    ///     Ok(leadership) => {
    ///         compact_the_logs(leadership.term()).await;
    ///         leadership.resign().await?;
    ///     }
    ///     Err(distlock::Error::Busy { .. }) => {} // another instance leads
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Fails as [`campaign`](Self::campaign) does otherwise, except that an outage of Redis
    /// is not waited through: it is returned ([`Error::is_transient`]).
    pub async fn try_campaign(&self) -> Result<Leadership, Error> {
        let key = self.shared.key_as(Primitive::Election, &self.name)?;
        let guard = self.request().try_acquire().await?;
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
        assert!(include_str!("mark.lua").contains("KEYS[7]"));
        assert!(!include_str!("../inspect/inspect.lua").contains("KEYS[7]"));
        assert!(!include_str!("../inspect/inspect.lua").contains("ARGV"));
    }
}
