//! The request builder: every setting a lock acquisition takes.

use std::borrow::Cow;
use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::algorithm::Algorithm;
use crate::config::{Replicas, Settings};
use crate::error::Error;
use crate::guard::Guard;
use crate::key::LockKey;
use crate::runtime::Shared;
use crate::telemetry::{Labels, Outcome, NO_LABEL};

use super::attempt::acquire;
use super::LockRequest;

impl<'c> LockRequest<'c> {
    pub(crate) fn new(
        shared: &'c Arc<Shared>,
        algorithm: &'static Algorithm,
        name: &[u8],
        caller: &'static Location<'static>,
    ) -> Self {
        LockRequest::of_key(shared, algorithm, shared.key_for(algorithm, name), caller)
    }

    /// A request for `key`, made already: a set of names (see `Client::lock_many`), or why
    /// it is refused (reported when the request is awaited).
    pub(crate) fn of_key(
        shared: &'c Arc<Shared>,
        algorithm: &'static Algorithm,
        key: Result<LockKey, Error>,
        caller: &'static Location<'static>,
    ) -> Self {
        LockRequest::with_settings(shared, algorithm, key, Settings::default(), caller)
    }

    /// A request for `key` with `settings` made already (an election's).
    pub(crate) fn with_settings(
        shared: &'c Arc<Shared>,
        algorithm: &'static Algorithm,
        key: Result<LockKey, Error>,
        settings: Settings,
        caller: &'static Location<'static>,
    ) -> Self {
        LockRequest {
            shared,
            algorithm,
            key,
            settings,
            caller,
        }
    }

    /// A semaphore's request: `permits` holders at most (see
    /// [`Client::semaphore`](crate::Client::semaphore)).
    pub(crate) fn with_permits(mut self, permits: u32) -> Self {
        self.settings.permits = Some(permits);
        self
    }

    /// Keep the lock at least this long after it was acquired, even when it is released
    /// sooner: [`Guard::release`] then leaves the lock in place until `min_hold` has passed
    /// (ShedLock's `lockAtLeastFor`). Made for jobs that every instance of a service starts on
    /// its own timer: the instance that runs first keeps the others out for the whole period,
    /// even if its run took two seconds and another's timer fires a moment later.
    ///
    /// When the release comes with more than the remaining lease still to hold (the usual
    /// case: a ttl of seconds, a `min_hold` of minutes), the lease is extended to end exactly
    /// then, owner-checked, and the lock needs nothing more from this process. When the lease
    /// already lasts longer, a background task releases the lock once `min_hold` has passed; if
    /// the process exits before, the lock ends with its lease, later than `min_hold` but never
    /// sooner. Pair it with a zero `wait`, so a late instance skips instead of queueing.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// // Every instance calls this at 02:00; one of them runs the report.
    /// match locks.lock("daily-report").min_hold(Duration::from_secs(300)).try_acquire().await {
    ///     Ok(guard) => {
    ///         // ... run the report ...
    ///         guard.release().await?; // the lock stays until 02:05
    ///     }
    ///     Err(distlock::Error::Busy { .. }) => {} // another instance has it
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn min_hold(mut self, min: Duration) -> Self {
        self.settings.min_hold = Some(min);
        self
    }

    /// Mint a fencing token with this acquisition (default off): a number strictly greater
    /// than the token of every earlier fenced acquisition of this lock name, read with
    /// [`Guard::fencing_token`]. Pass it to the resource the lock protects and have it refuse
    /// writes carrying a smaller one: that stops a holder that lost its lease (a long GC
    /// pause, a frozen VM) from overwriting its successor's work, which no lease alone can
    /// prevent.
    ///
    /// It costs the server work on every acquisition: the lock is taken by a script that
    /// also increments the lock's counter (`<prefix>:#fence:<body>`, same slot), where an acquisition
    /// without fencing is one plain `SET key value NX PX ttl` (setnx) or a script that
    /// skips the counter (the other modes). [What it costs](crate::guide::design#fencing-tokens)
    /// gives the figures. A read lock's token is the token of the latest fenced write (see
    /// [`Client::read`](crate::Client::read)); a re-entry keeps its tenure's token, and a re-entry that asks for
    /// fencing in a tenure taken without it mints the tenure's token then. A fenced request
    /// is never handed a hold by a local holder (see
    /// [`ClientBuilder::local_handoff`](crate::ClientBuilder::local_handoff)): each fenced
    /// acquisition takes the lock from Redis and gets a token of its own.
    pub fn fencing(mut self, on: bool) -> Self {
        self.settings.fencing = on;
        self
    }

    /// What this lock is called in traces and metrics: a name for the *kind* of lock, such as
    /// the template `order:<id>`, not the rendered name (names can carry user data, and a
    /// metric label must take few values). The attributes set it to their key template.
    /// Without it, traces and metrics show `-`.
    pub fn label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.settings.label = label.into();
        self
    }

    /// Also record the rendered lock name in this lock's trace spans and events (never in
    /// metrics). Off by default: names can carry user data.
    pub fn record_name(mut self, on: bool) -> Self {
        self.settings.record_name = on;
        self
    }

    /// The locked fn, for traces (set by the attributes).
    #[doc(hidden)]
    pub fn site(mut self, site: &'static str) -> Self {
        self.settings.site = Some(site);
        self
    }

    /// The lease (default 30 s, at least 10 ms). With the watchdog on, the lock is renewed
    /// while held and this only bounds how long a dead holder blocks others; with it off, the
    /// lock ends after this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// How long [`acquire`](Self::acquire) waits for a busy lock (default 5 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// Renew the lease while the guard is held (default on). Off, the lease simply ends
    /// after its ttl unless [`Guard::extend`] is called.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.settings.watchdog = on;
        self
    }

    /// How often the watchdog renews (default ttl / 3; must be below the ttl).
    pub fn renew_every(mut self, period: Duration) -> Self {
        self.settings.renew_every = Some(period);
        self
    }

    /// Stop renewing after this much total hold time: the lease then runs out and is reported
    /// lost, so a holder stuck in an endless loop cannot keep the lock forever.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.settings.max_hold = Some(cap);
        self
    }

    /// Replica acknowledgement for this acquisition, overriding the client's
    /// ([`ClientBuilder::replicas`](crate::ClientBuilder::replicas)): once the lock is taken,
    /// wait until `count` replicas of its master confirmed it, for at most `timeout`; with
    /// fewer, the acquisition is undone and fails with [`Error::ReplicasNotConfirmed`]. See
    /// [`Replicas`] for what it does and does not promise.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.settings.replicas = Some(Replicas { count, timeout });
        self
    }

    /// Takes the lock, waiting up to the configured wait. Fails with [`Error::Timeout`] when
    /// it stayed busy, or with the connection's error when Redis stayed unreachable.
    ///
    /// The future is `Send` and about 2 KB: handlers and services that box their futures
    /// (axum, tower) allocate it with every call.
    pub fn acquire(self) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        let wait = self.settings.wait;
        self.run(wait)
    }

    /// One attempt: fails at once with [`Error::Busy`] if someone else holds the lock.
    pub fn try_acquire(self) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        self.run(Duration::ZERO)
    }

    // Not `async fn`s: each `async fn` layer that takes the request by value keeps a copy of it
    // in its future, and every acquisition moves (and a boxing caller allocates) the whole
    // future.
    fn run(mut self, wait: Duration) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        let mode = self.algorithm.mode.as_str();
        let labels = match (&self.key, self.settings.record_name) {
            (_, false) if self.settings.site.is_none() && self.settings.label == NO_LABEL => {
                Labels::unlabelled(mode)
            }
            (key, record_name) => Arc::new(Labels {
                mode,
                // Moved: the labels are where the acquisition keeps it.
                label: std::mem::take(&mut self.settings.label),
                name: match (key, record_name) {
                    (Ok(key), true) => Some(key.name().into()),
                    _ => None,
                },
                site: self.settings.site,
            }),
        };
        let span = labels.acquire_span();
        Acquiring {
            attempt: acquire(self, wait, labels.clone()).instrument(span),
            labels,
            started: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// An acquisition: its attempts inside its span, then the outcome reported to traces
    /// and metrics. Written by hand: an `async` block around the attempts would keep them
    /// twice in its future (once captured, once awaited).
    struct Acquiring<F> {
        #[pin]
        attempt: tracing::instrument::Instrumented<F>,
        labels: Arc<Labels>,
        started: Option<Instant>,
    }
}

impl<F: Future<Output = Result<(Guard, u32), Error>>> Future for Acquiring<F> {
    type Output = Result<Guard, Error>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        // The wait is measured only where something records it (a span a subscriber keeps,
        // or the metrics): two clock reads on every acquisition otherwise.
        let timed = cfg!(feature = "metrics") || !this.attempt.span().is_disabled();
        let started = timed.then(|| *this.started.get_or_insert_with(Instant::now));
        let std::task::Poll::Ready(result) = this.attempt.as_mut().poll(cx) else {
            return std::task::Poll::Pending;
        };
        let (outcome, attempts, fence, error) = match &result {
            Ok((guard, attempts)) => (Outcome::Acquired, *attempts, guard.fencing_token(), None),
            Err(e @ Error::Busy { .. }) => (Outcome::Busy, 1, None, Some(e)),
            Err(e @ Error::Timeout { attempts, .. }) => {
                (Outcome::Timeout, *attempts, None, Some(e))
            }
            Err(e) => (Outcome::Error, 0, None, Some(e)),
        };
        let waited = match (started, &result) {
            (Some(started), _) => started.elapsed(),
            // An event may be kept where the span is not: a timeout says how long it waited.
            (None, Err(Error::Timeout { waited, .. })) => *waited,
            (None, _) => Duration::ZERO,
        };
        let span = this.attempt.span();
        this.labels
            .acquired(span, outcome, waited, attempts, fence, error);
        std::task::Poll::Ready(result.map(|(guard, _)| guard))
    }
}
