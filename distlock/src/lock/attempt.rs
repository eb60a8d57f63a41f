//! The one acquire loop every mode goes through: a plan made from the request (what is taken,
//! by whom, on what terms), then attempts until the lock is held, the wait runs out, or an
//! error that will not pass.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::{Algorithm, Ask, Attempt, HoldId, OwnerKind};
use crate::config::Settings;
use crate::context::LockContext;
use crate::error::Error;
use crate::guard::{Guard, GuardParts, Registration};
use crate::handoff::{Tenure, Terms, Transfer};
use crate::identity::{self, Site};
use crate::key::LockKey;
use crate::lease::{LeaseState, Stamp};
use crate::nodes::AcquireAttempt;
use crate::release::Hold;
use crate::runtime::Shared;
use crate::telemetry::Labels;
use crate::wait::Waiter;

use super::pending::Pending;
use super::LockRequest;
use crate::watchdog::Watch;

/// Everything an acquisition settles before its first attempt.
struct Plan<'c> {
    shared: &'c Arc<Shared>,
    algorithm: &'static Algorithm,
    key: LockKey,
    /// The request's settings, [settled](Settings::settled); shared with the hand-off's
    /// terms.
    settings: Arc<Settings>,
    /// What every attempt asks of the script besides the hold; each attempt adds what it
    /// learnt.
    ask: Ask,
    /// Zero for a single attempt.
    wait: Duration,
    /// The task context that will own the hold.
    context: LockContext,
    /// This context (or one around it) already holds the lock: a re-entry.
    reentry: bool,
    site: Site,
    site_number: u32,
    /// The owner of a context-owned hold (client id : context) and who took it, for inspection;
    /// unused for token-owned holds, whose token says both.
    owner: (Arc<str>, Arc<str>),
    /// Set when a hold may pass from task to task of this process (see `handoff`).
    terms: Option<Terms>,
    /// An attempt after the first may carry a description of its own (see
    /// [`Plan::describe_anew`]): one name on one deployment, where an attempt's answer says
    /// all it took. Not on a quorum nor for a set: a busy answer there may leave a node or a
    /// slot group held under the id unseen, which only the same id finds its own.
    redescribed: bool,
    labels: Arc<Labels>,
}

impl Plan<'_> {
    /// Checks the request and settles who takes the lock on what terms.
    fn new(
        request: LockRequest<'_>,
        wait: Duration,
        labels: Arc<Labels>,
    ) -> Result<Plan<'_>, Error> {
        let LockRequest {
            shared,
            algorithm,
            key,
            settings,
            caller,
        } = request;
        let key = key?;
        let settings = settings.settled(shared.replicas)?;
        let quorum = shared.nodes.is_quorum();
        algorithm.admit(&settings, quorum)?;
        if let Some(replicas) = &settings.replicas {
            if quorum {
                return Err(Error::config(
                    "replica acknowledgement is for a deployment with replicas (one node, Sentinel, Cluster), not for the independent masters of a quorum",
                ));
            }
            replicas.validate(shared.response_timeout)?;
        }
        // The current context, or the one around it that already holds this lock (or a name
        // of this set).
        let holder = shared.holds.holder_in_scope(&key);
        // Waiting on oneself would never end, unless holders share the lock: a semaphore's
        // task takes one more permit.
        if algorithm.owner == OwnerKind::Token && !algorithm.shared && holder.is_some() {
            return Err(Error::Reentrant {
                name: key.lock_name(),
            });
        }
        let context = holder.unwrap_or_else(LockContext::current);
        let site = match settings.site {
            Some(site) => Site::Fn(site),
            None => Site::Caller(caller),
        };
        let owner = match algorithm.owner {
            OwnerKind::Token => (identity::no_nonce(), identity::no_nonce()),
            OwnerKind::Context => (
                Arc::from(format!("{}:{context}", shared.id)),
                Arc::from(identity::describe(site)),
            ),
        };
        let ask = Ask::new(&settings, !wait.is_zero());
        let settings = Arc::new(settings);
        // Holds that may pass from task to task in this process without a round trip: the
        // interchangeable ones (see `handoff`).
        let passes = shared.handoff.passes > 0
            && settings.watchdog
            && algorithm.owner == OwnerKind::Token
            && !key.is_set()
            && !quorum
            && !settings.fencing
            && settings.max_hold.is_none()
            && settings.min_hold.is_none()
            && settings.replicas.is_none();
        let terms = passes.then(|| Terms {
            algorithm,
            settings: settings.clone(),
            labels: labels.clone(),
            limits: shared.handoff,
        });
        let redescribed = !quorum && !key.is_set();
        Ok(Plan {
            shared,
            algorithm,
            key,
            settings,
            ask,
            wait,
            context,
            reentry: holder.is_some(),
            site,
            site_number: identity::site_number(site),
            owner,
            terms,
            redescribed,
            labels,
        })
    }

    /// A new acquisition's id: a retry after a lost reply finds its own hold in place and
    /// takes it instead of waiting on itself or counting it twice. `at`: a clock reading of
    /// its start.
    fn fresh_id(&self, at: Instant) -> HoldId {
        let lane = self.context.lane();
        match self.algorithm.owner {
            OwnerKind::Token => HoldId {
                owner: identity::owner_token_described(self.site, at),
                nonce: identity::no_nonce(),
                holder: identity::no_nonce(),
                lane,
            },
            OwnerKind::Context => HoldId {
                owner: self.owner.0.clone(),
                nonce: self.shared.nonce(),
                holder: self.owner.1.clone(),
                lane,
            },
        }
    }

    /// Makes the hold's description say `at`, the send time of the attempt about to go out,
    /// so that "acquired at" (inspection, the CLI) is when the lock was granted, not when a
    /// wait or an outage began. A context's hold keeps its owner and nonce (its identity; a
    /// retry finds its own hold by them) and gets a new description. A token is its own
    /// description: a new one is minted, which the caller does only while no earlier attempt
    /// may hold the lock under the old one.
    fn describe_anew(&self, id: &mut HoldId, at: Instant) {
        match self.algorithm.owner {
            OwnerKind::Token => id.owner = identity::owner_token_described(self.site, at),
            OwnerKind::Context => id.holder = Arc::from(identity::describe(self.site)),
        }
    }

    fn timeout(&self, started: Instant, attempts: u32) -> Error {
        Error::Timeout {
            name: self.key.lock_name(),
            waited: started.elapsed(),
            attempts,
        }
    }

    fn hold(&self, id: HoldId) -> Hold {
        Hold {
            nodes: self.shared.nodes.clone(),
            algorithm: self.algorithm,
            key: self.key.clone(),
            id,
        }
    }

    /// Registers a hold granted by the server (watchdog, per-task table) and hands out its
    /// guard.
    fn guard(
        &self,
        id: HoldId,
        fence: Option<crate::token::FencingToken>,
        sent: Instant,
        lease: Arc<LeaseState>,
    ) -> Guard {
        let settings = &self.settings;
        let watch = settings.renewal().map(|period| {
            let watch = Watch {
                algorithm: self.algorithm,
                key: self.key.clone(),
                id: id.clone(),
                ttl_ms: settings.ttl_ms(),
                period,
                // A cap too large to add is no cap.
                stop_at: settings.max_hold.and_then(|cap| sent.checked_add(cap)),
                lease: lease.clone(),
            };
            self.shared.watchdog.watch(watch, sent)
        });
        let hold = self.hold(id);
        self.shared.holds.hold(&hold, self.context, lease.clone());
        let tenure = self.terms.clone().map(|terms| Tenure {
            terms,
            context: self.context,
            passes: 0,
            since: sent,
        });
        let parts = GuardParts {
            fence,
            acquired_at: sent,
            lease,
            min_hold: self.settings.min_hold,
            registration: Registration { watch, held: true },
            tenure,
        };
        Guard::new(self.shared, hold, parts)
    }

    /// Takes a hold a local holder handed over (see `handoff`): the lease, its renewal and the
    /// server's hold go on unchanged; only the holding task changes.
    fn adopt(&self, mut transfer: Transfer) -> Guard {
        transfer.armed = false;
        self.shared
            .holds
            .hold(&transfer.hold, self.context, transfer.lease.clone());
        let tenure = self.terms.clone().map(|terms| Tenure {
            terms,
            context: self.context,
            passes: transfer.passes,
            since: transfer.since,
        });
        let parts = GuardParts {
            fence: None,
            acquired_at: Instant::now(),
            lease: transfer.lease.clone(),
            min_hold: self.settings.min_hold,
            registration: Registration {
                watch: transfer.watch.take(),
                held: true,
            },
            tenure,
        };
        Guard::new(self.shared, transfer.hold.clone(), parts)
    }
}

/// Takes the lock `request` asks for, waiting up to `wait`; the guard and the attempts it took.
/// The plan is made at the first poll: it reads the task's context, and the future may be made
/// in one task and awaited in another (`LockContext::scope` wraps a future already made).
pub(super) async fn acquire(
    request: LockRequest<'_>,
    wait: Duration,
    labels: Arc<Labels>,
) -> Result<(Guard, u32), Error> {
    let plan = Plan::new(request, wait, labels)?;
    let tasks = &plan.shared.nodes.tasks;
    if tasks.is_closed() {
        return Err(shut_down(&plan.key));
    }
    // Counted until the guard is out or the attempt given back: `Client::shutdown` waits for
    // what an acquisition it interrupted leaves behind.
    let _in_flight = tasks.count();
    // By reference: the plan is kept once in this future, not also in the attempts'.
    match attempts(&plan).await {
        // Taken as the client closed, after `shutdown` took back the holds it knew: give it
        // back too.
        Ok((guard, _)) if tasks.is_closed() => {
            drop(guard);
            Err(shut_down(&plan.key))
        }
        outcome => outcome,
    }
}

fn shut_down(key: &LockKey) -> Error {
    Error::ShutDown {
        name: key.lock_name(),
    }
}

/// `wait`, cut short when the client closes (then `Err`). Only around the waits: an attempt
/// in flight ends by itself within the response timeout.
async fn unless_closed<F: Future>(shared: &Shared, wait: F) -> Result<F::Output, ()> {
    tokio::select! {
        biased;
        done = wait => Ok(done),
        () = shared.nodes.tasks.closed() => Err(()),
    }
}

async fn attempts(plan: &Plan<'_>) -> Result<(Guard, u32), Error> {
    // Also the first attempt's send time when nothing is awaited before it: a reading taken
    // before the request is sent, as a lease's must be, and one clock read fewer.
    let started = Stamp::now();
    let mut unsent = Some(started);
    let started = started.at;
    let deadline = started.checked_add(plan.wait);
    let waits = !plan.wait.is_zero();
    let shared = plan.shared;
    let mut waiter = Waiter::new(
        &shared.notifier,
        &plan.key,
        plan.terms.clone(),
        plan.algorithm.shared,
    );
    // Tasks of this process already waiting for the lock go first (unless holders may share
    // it: a reader can get in beside the readers inside). A re-entry never queues: those
    // tasks wait for the very hold it extends. Nor does a set of names: it waits for the
    // name its attempt finds busy, which it does not know yet.
    if waits && !plan.algorithm.shared && !plan.reentry && !plan.key.is_set() {
        match unless_closed(shared, waiter.arrive(plan.wait)).await {
            Err(()) => return Err(shut_down(&plan.key)),
            // Queued behind local waiters: the first attempt takes a reading of its own.
            Ok(true) => unsent = None,
            Ok(false) => {}
        }
        if let Some(transfer) = waiter.take_handed() {
            return Ok((plan.adopt(transfer), 0));
        }
        if gave_up(deadline, &waiter) {
            return Err(plan.timeout(started, 0));
        }
    }
    let mut attempts = 0u32;
    // Set once a request may have reached the server without its answer reaching us.
    let mut unsure = false;
    // The last attempt found the server refusing connections: it is down, for now.
    let mut refused = false;
    // Armed while an attempt may have taken the lock unseen: if this future is dropped then
    // (a timeout around `acquire`, a handler whose client went away), the hold is given back
    // in the background instead of blocking the lock for its whole ttl.
    let mut pending = Pending {
        hold: plan.hold(plan.fresh_id(started)),
        ttl: plan.settings.ttl,
        armed: false,
        intent: false,
    };
    loop {
        attempts += 1;
        waiter.attempting();
        // Through an outage (connections refused), the token an earlier, unanswered attempt
        // may have taken the lock with is given back (one try, awaited) before a new one is
        // minted, so that the hold, once the server is back, is described as granted then;
        // the old token holds nothing the new one could wait for. Without an outage (a lost
        // reply), the retry keeps it and finds its own hold, whose time is the unseen grant's.
        if unsure
            && refused
            && plan.redescribed
            && plan.algorithm.owner == OwnerKind::Token
            && Box::pin(pending.hold.give_back_once()).await
        {
            (unsure, pending.armed) = (false, false);
        }
        let sent = unsent.take().unwrap_or_else(Stamp::now);
        // Not the first attempt, sent at the start: describe the hold as granted now.
        if sent.at != started
            && plan.redescribed
            && (plan.algorithm.owner == OwnerKind::Context || !unsure)
        {
            plan.describe_anew(&mut pending.hold.id, sent.at);
        }
        let ask = Ask {
            unsure,
            want_holder_ttl: !waiter.knows_holder(),
            ..plan.ask
        };
        pending.armed = true;
        let answer = shared
            .nodes
            .acquire(AcquireAttempt {
                algorithm: plan.algorithm,
                key: &plan.key,
                id: &pending.hold.id,
                ttl_ms: plan.settings.ttl_ms(),
                ask,
                replicas: plan.settings.replicas,
                site: plan.site_number,
                sent: sent.at,
            })
            .await;
        let (error, holder_ttl) = match answer {
            Ok(Attempt::Acquired { fence }) => {
                let lease = Arc::new(LeaseState::new(
                    sent,
                    plan.settings.ttl,
                    plan.labels.clone(),
                ));
                if lease.is_valid() {
                    // Taking the lock withdrew the intent.
                    (pending.armed, pending.intent) = (false, false);
                    let guard = plan.guard(pending.hold.id.clone(), fence, sent.at, lease);
                    return Ok((guard, attempts));
                }
                // The answer came so late that the lease is already spent: give it back and
                // carry on as if the lock were busy, as a new acquisition. With the same id,
                // the give-back (sent in the background) could arrive after the next attempt
                // took the lock and free that hold (spec/: found by the model checker).
                pending.give_back();
                pending.hold.id = plan.fresh_id(sent.at);
                unsure = false;
                (None, None)
            }
            // The scripts check for this acquisition's own hold, so busy means not ours.
            Ok(Attempt::Busy { holder_ttl, member }) => {
                (pending.armed, refused) = (false, false);
                pending.intent |= waits && plan.algorithm.intents;
                // A set waits for the release of the name found busy.
                if let Some(name) = plan.key.members().get(member) {
                    waiter.listen_to(name);
                }
                waiter.busy_after_release();
                (None, holder_ttl)
            }
            // The connection failed, or too few quorum nodes answered: maybe only for now.
            Err(e) if e.is_transient() && !matches!(e, Error::ReplicasNotConfirmed { .. }) => {
                unsure = true;
                refused =
                    matches!(&e, Error::Redis { source, .. } if source.is_connection_refusal());
                (Some(e), None)
            }
            // Taken, but too few replicas confirmed it: a failover could lose it. Give it back
            // before saying so, so no lock is left behind by a failed call.
            Err(e @ Error::ReplicasNotConfirmed { .. }) => {
                if Box::pin(pending.hold.give_back_now(plan.settings.ttl)).await {
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
                None if !waits => Error::Busy {
                    name: plan.key.lock_name(),
                },
                None => plan.timeout(started, attempts),
            });
        }
        let pause = waiter.pause(holder_ttl, error.is_some(), left);
        if unless_closed(shared, pause).await.is_err() {
            return Err(shut_down(&plan.key));
        }
        if let Some(transfer) = waiter.take_handed() {
            return Ok((plan.adopt(transfer), attempts));
        }
        if gave_up(deadline, &waiter) {
            return Err(plan.timeout(started, attempts));
        }
    }
}

/// True when the wait has run out while the lock is known to be held beyond it: no last
/// attempt (see [`Waiter::worth_a_last_try`]).
fn gave_up(deadline: Option<Instant>, waiter: &Waiter<'_>) -> bool {
    !waiter.worth_a_last_try() && deadline.is_some_and(|d| Instant::now() >= d)
}
