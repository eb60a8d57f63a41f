//! Taking a lock: the request builder and the one acquire loop every mode goes through.

use std::borrow::Cow;
use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::algorithm::{Algorithm, Ask, Attempt, HoldId, OwnerKind};
use crate::client::Client;
use crate::config::{Replicas, DEFAULT_TTL, DEFAULT_WAIT};
use crate::context::LockContext;
use crate::error::{is_transient, Error};
use crate::guard::{spawn_release, Guard, Registration};
use crate::handoff::{Tenure, Terms, Transfer};
use crate::identity;
use crate::key::LockKey;
use crate::lease::{self, LeaseState};
use crate::quorum::Nodes;
use crate::telemetry::{Labels, Outcome, NO_LABEL};
use crate::wait::Waiter;
use crate::watchdog::Watch;

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
    replicas: Option<Replicas>,
    min_hold: Option<Duration>,
    fencing: bool,
    label: Cow<'static, str>,
    record_name: bool,
    site: Option<&'static str>,
    caller: &'static Location<'static>,
}

impl<'c> LockRequest<'c> {
    pub(crate) fn new(
        client: &'c Client,
        algorithm: &'static Algorithm,
        name: &[u8],
        caller: &'static Location<'static>,
    ) -> Self {
        LockRequest {
            client,
            algorithm,
            key: client.inner().key(name),
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
            renew_every: None,
            max_hold: None,
            replicas: None,
            min_hold: None,
            fencing: false,
            label: Cow::Borrowed(NO_LABEL),
            record_name: false,
            site: None,
            caller,
        }
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
        self.min_hold = Some(min);
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
    /// [`Client::read`]); a re-entry keeps its tenure's token, and a re-entry that asks for
    /// fencing in a tenure taken without it mints the tenure's token then. A fenced request
    /// is never handed a hold by a local holder (see
    /// [`ClientBuilder::local_handoff`](crate::ClientBuilder::local_handoff)): each fenced
    /// acquisition takes the lock from Redis and gets a token of its own.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// What this lock is called in traces and metrics: a name for the *kind* of lock, such as
    /// the template `order:<id>`, not the rendered name (names can carry user data, and a
    /// metric label must take few values). The attributes set it to their key template.
    /// Without it, traces and metrics show `-`.
    pub fn label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.label = label.into();
        self
    }

    /// Also record the rendered lock name in this lock's trace spans and events (never in
    /// metrics). Off by default: names can carry user data.
    pub fn record_name(mut self, on: bool) -> Self {
        self.record_name = on;
        self
    }

    /// The locked fn, for traces (set by the attributes).
    #[doc(hidden)]
    pub fn site(mut self, site: &'static str) -> Self {
        self.site = Some(site);
        self
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

    /// Replica acknowledgement for this acquisition, overriding the client's
    /// ([`ClientBuilder::replicas`](crate::ClientBuilder::replicas)): once the lock is taken,
    /// wait until `count` replicas of its master confirmed it, for at most `timeout`; with
    /// fewer, the acquisition is undone and fails with [`Error::ReplicasNotConfirmed`]. See
    /// [`Replicas`] for what it does and does not promise.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas { count, timeout });
        self
    }

    /// Takes the lock, waiting up to the configured wait. Fails with [`Error::Timeout`] when
    /// it stayed busy, or with the connection's error when Redis stayed unreachable.
    ///
    /// The future is `Send` and about 2 KB: handlers and services that box their futures
    /// (axum, tower) allocate it with every call.
    pub fn acquire(self) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        let wait = self.wait;
        self.run(wait)
    }

    /// One attempt: fails at once with [`Error::Busy`] if someone else holds the lock.
    pub fn try_acquire(self) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        self.run(Duration::ZERO)
    }

    // Not `async fn`s, these three: each `async fn` layer that takes the request by value
    // keeps a copy of it in its future, and every acquisition moves (and a boxing caller
    // allocates) the whole future.
    fn run(mut self, wait: Duration) -> impl Future<Output = Result<Guard, Error>> + Send + 'c {
        let labels = Arc::new(Labels {
            mode: self.algorithm.name,
            // Moved: the labels are where the acquisition keeps it.
            key: std::mem::take(&mut self.label),
            name: match (&self.key, self.record_name) {
                (Ok(key), true) => Some(key.name().into()),
                _ => None,
            },
            site: self.site,
        });
        let span = labels.acquire_span();
        Acquiring {
            attempt: self.attempt(wait, labels.clone()).instrument(span),
            labels,
            started: None,
        }
    }

    fn attempt(
        self,
        wait: Duration,
        labels: Arc<Labels>,
    ) -> impl Future<Output = Result<(Guard, u32), Error>> + Send + 'c {
        // Taken apart before the future is made: it then keeps the fields it uses, not the
        // whole request twice (an `async fn` keeps its arguments apart from its locals).
        let LockRequest {
            client,
            algorithm,
            key,
            ttl,
            wait: _,
            watchdog,
            renew_every,
            max_hold,
            replicas,
            min_hold,
            fencing,
            label: _,
            record_name: _,
            site,
            caller,
        } = self;
        async move {
            let key = key?;
            let ttl_ms = lease::ttl_ms(ttl)?;
            let ttl = Duration::from_millis(ttl_ms);
            let period = renew_period(watchdog, renew_every, ttl)?;
            if client.is_quorum() && !algorithm.quorum {
                return Err(Error::config(format!(
                    "the {} lock runs on one Redis node (or a Cluster), not on a Redlock quorum: use Client::lock on this client",
                    algorithm.name
                )));
            }
            let grant = Grant {
                client,
                algorithm,
                max_hold,
                min_hold,
            };
            let site = match site {
                Some(site) => identity::Site::Fn(site),
                None => identity::Site::Caller(caller),
            };
            let inner = client.inner();
            let replicas = replicas.or(inner.replicas);
            if let Some(replicas) = &replicas {
                if client.is_quorum() {
                    return Err(Error::config(
                        "replica acknowledgement is for a deployment with replicas (one node, Sentinel, Cluster), not for the independent masters of a quorum",
                    ));
                }
                replicas.validate(inner.response_timeout)?;
            }
            // The current context, or the one around it that already holds this lock.
            let holder = inner.holds.holder_in_scope(key.lock());
            let context = holder.unwrap_or_else(LockContext::current);
            if algorithm.owner == OwnerKind::Token && holder.is_some() {
                return Err(Error::Reentrant {
                    key: key.name().to_owned(),
                });
            }
            // Who takes it, for inspection: in the owner token itself (setnx, one buffer per
            // acquisition), or stored beside the owner's hold by the script.
            let (context_owner, holder_text): (Arc<str>, Arc<str>) = match algorithm.owner {
                OwnerKind::Token => (identity::no_nonce(), identity::no_nonce()),
                OwnerKind::Context => (
                    Arc::from(format!("{}:{context}", inner.id)),
                    Arc::from(identity::describe(site)),
                ),
            };
            // An id names one acquisition: a retry after a lost reply finds its own hold in place
            // and takes it instead of waiting on itself or counting it twice.
            let lane = context.lane();
            let fresh_id = || match algorithm.owner {
                OwnerKind::Token => HoldId {
                    owner: identity::owner_token_described(site),
                    nonce: identity::no_nonce(),
                    holder: identity::no_nonce(),
                    lane,
                },
                OwnerKind::Context => HoldId {
                    owner: context_owner.clone(),
                    nonce: inner.nonce(),
                    holder: holder_text.clone(),
                    lane,
                },
            };
            // Holds that may pass from task to task in this process without a round trip: the
            // interchangeable ones (see `handoff`).
            let terms = match period {
                Some(period)
                    if inner.handoff.passes > 0
                        && algorithm.owner == OwnerKind::Token
                        && !client.is_quorum()
                        && !fencing
                        && max_hold.is_none()
                        && min_hold.is_none()
                        && replicas.is_none() =>
                {
                    Some(Terms {
                        algorithm,
                        ttl_ms,
                        period,
                        labels: labels.clone(),
                        limits: inner.handoff,
                    })
                }
                _ => None,
            };
            let site_number = identity::site_number(site);
            let started = Instant::now();
            let deadline = started.checked_add(wait);
            let mut waiter = Waiter::new(&inner.notifier, &key, terms.clone(), algorithm.shared);
            // Tasks of this process already waiting for the lock go first (unless holders may
            // share it: a reader can get in beside the readers inside). A re-entry never queues:
            // those tasks wait for the very hold it extends.
            if !wait.is_zero() && !algorithm.shared && holder.is_none() {
                waiter.arrive(wait).await;
                if let Some(transfer) = waiter.take_handed() {
                    return Ok((grant.adopt(transfer, context, terms), 0));
                }
            }
            let mut attempts = 0u32;
            // Set once a request may have reached the server without its answer reaching us.
            let mut unsure = false;
            // Armed while an attempt may have taken the lock unseen: if this future is dropped
            // then (a timeout around `acquire`, a handler whose client went away), the hold is
            // given back in the background instead of blocking the lock for its whole ttl.
            let mut pending = Pending {
                client,
                algorithm,
                key: &key,
                id: fresh_id(),
                ttl,
                armed: false,
            };
            loop {
                attempts += 1;
                waiter.attempting();
                let sent = Instant::now();
                let ask = Ask {
                    unsure,
                    want_holder_ttl: !waiter.knows_holder(),
                    waits: !wait.is_zero(),
                    fencing,
                };
                pending.armed = true;
                let (error, holder_ttl) = match inner
                    .nodes
                    .acquire(
                        algorithm,
                        &key,
                        &pending.id,
                        ttl_ms,
                        ask,
                        replicas,
                        site_number,
                    )
                    .await
                {
                    Ok(Attempt::Acquired { fence }) => {
                        let state = Arc::new(LeaseState::new(sent, ttl, labels.clone()));
                        if state.is_valid() {
                            pending.armed = false;
                            let tenure = terms.clone().map(|terms| Tenure {
                                terms,
                                context,
                                passes: 0,
                                since: sent,
                            });
                            let guard = grant.guard(
                                key.clone(),
                                pending.id.clone(),
                                context,
                                fence,
                                sent,
                                ttl_ms,
                                period,
                                state,
                                tenure,
                            );
                            return Ok((guard, attempts));
                        }
                        // The answer came so late that the lease is already spent: give it back
                        // and carry on as if the lock were busy, as a new acquisition. With the
                        // same id, the give-back (sent in the background) could arrive after the
                        // next attempt took the lock and free that hold (spec/: found by the
                        // model checker).
                        pending.give_back();
                        pending.id = fresh_id();
                        unsure = false;
                        (None, None)
                    }
                    // The scripts check for this acquisition's own hold, so busy means not ours.
                    Ok(Attempt::Busy { holder_ttl }) => {
                        pending.armed = false;
                        waiter.busy_after_release();
                        (None, holder_ttl)
                    }
                    // The connection failed, or too few quorum nodes answered: maybe only for now.
                    Err(e) if transient(&e, &inner.nodes) => {
                        unsure = true;
                        (Some(e), None)
                    }
                    // Taken, but too few replicas confirmed it: a failover could lose it. Give it
                    // back before saying so, so no lock is left behind by a failed call.
                    Err(e @ Error::ReplicasNotConfirmed { .. }) => {
                        let nodes = inner.nodes.clone();
                        let give_back =
                            crate::guard::release_now(&nodes, algorithm, &key, &pending.id, ttl);
                        if Box::pin(give_back).await {
                            pending.armed = false;
                        }
                        return Err(e);
                    }
                    // `pending` gives back what an earlier, unanswered attempt may have taken.
                    Err(e) => return Err(e),
                };
                let left = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                if left.is_zero() {
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
                if let Some(transfer) = waiter.take_handed() {
                    return Ok((grant.adopt(transfer, context, terms), attempts));
                }
            }
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
        let started = *this.started.get_or_insert_with(Instant::now);
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
        let span = this.attempt.span();
        this.labels
            .acquired(span, outcome, started.elapsed(), attempts, fence, error);
        std::task::Poll::Ready(result.map(|(guard, _)| guard))
    }
}

/// An acquisition that may hold the lock without knowing it; see [`LockRequest::acquire`].
struct Pending<'a> {
    client: &'a Client,
    algorithm: &'static Algorithm,
    key: &'a LockKey,
    id: HoldId,
    ttl: Duration,
    armed: bool,
}

impl Pending<'_> {
    /// Releases the acquisition in the background, with the same id: idempotent, and it frees
    /// nothing but this acquisition's own hold.
    fn give_back(&mut self) {
        self.armed = false;
        // Whatever an attempt took expires within a ttl of now: no use retrying past that.
        let until = Instant::now() + self.ttl;
        let (key, id) = (self.key.clone(), self.id.clone());
        spawn_release(self.client, self.algorithm, key, id, Some(until));
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.give_back();
        }
    }
}

/// A failure of the transport, not of the request: the same attempt may succeed later. A
/// quorum that failed only because nodes were unreachable or distrusted may form later; one
/// that failed because too many nodes refused for good (the wrong type at the key, out of
/// memory, read-only) will fail the same way on every try, so it is reported at once.
fn transient(e: &Error, nodes: &Nodes) -> bool {
    match e {
        Error::Redis { source, .. } => is_transient(source),
        Error::QuorumNotReached { errors, .. } => {
            errors.iter().filter(|e| !e.retryable).count() <= nodes.nodes.len() - nodes.quorum
        }
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
    min_hold: Option<Duration>,
}

impl Grant<'_> {
    /// Registers the hold (watchdog, per-task table) and hands out its guard.
    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        key: LockKey,
        id: HoldId,
        context: LockContext,
        fence: Option<u64>,
        sent: Instant,
        ttl_ms: u64,
        period: Option<Duration>,
        lease: Arc<LeaseState>,
        tenure: Option<Tenure>,
    ) -> Guard {
        let inner = self.client.inner();
        let watch = period.map(|period| {
            inner.watchdog.watch(Watch {
                algorithm: self.algorithm,
                key: key.clone(),
                id: id.clone(),
                ttl_ms,
                period,
                // A cap too large to add is no cap.
                stop_at: self.max_hold.and_then(|cap| sent.checked_add(cap)),
                lease: lease.clone(),
            })
        });
        inner.holds.hold(&key, context, lease.clone());
        Guard::new(
            self.client,
            self.algorithm,
            key,
            id,
            fence,
            sent,
            lease,
            self.min_hold,
            Registration { watch, held: true },
            tenure,
        )
    }

    /// Takes a hold a local holder handed over (see `handoff`): the lease, its watchdog entry
    /// and the server's hold go on unchanged; only the holding task changes.
    fn adopt(&self, mut transfer: Transfer, context: LockContext, terms: Option<Terms>) -> Guard {
        transfer.armed = false;
        let inner = self.client.inner();
        inner
            .holds
            .hold(&transfer.key, context, transfer.lease.clone());
        let now = Instant::now();
        let tenure = terms.map(|terms| Tenure {
            terms,
            context,
            passes: transfer.passes,
            since: transfer.since,
        });
        Guard::new(
            self.client,
            self.algorithm,
            transfer.key.clone(),
            transfer.id.clone(),
            None,
            now,
            transfer.lease.clone(),
            self.min_hold,
            Registration {
                watch: transfer.watch.take(),
                held: true,
            },
            tenure,
        )
    }
}
