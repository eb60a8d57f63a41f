//! Runtime support for the lock attributes (`#[distributed_lock]`, `#[read_lock]`,
//! `#[write_lock]`, `#[semaphore]`).
//!
//! Not a public API: the code the attributes generate calls into this module (as
//! `::distlock::__private::..`), and anything here may change in any release. What a locked
//! body itself uses, `distlock::lease()` and its `Lease`, has its public home in `lease_view`.
//!
//! The generated code stays small: it builds the key, looks up the client, fills in a [`Spec`]
//! and hands the body to [`run`], which does the rest. Compile-time checks that need types
//! (return type, error conversion, key placeholders, `client = ..`, `on_busy = "skip"`) are
//! the traits below, each with a `#[diagnostic::on_unimplemented]` message; the macro emits the
//! calls that need them with the span of the user's offending token.

mod checks;
mod lookup;
mod names;

use std::borrow::Cow;
use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::client::Client;
use crate::context::LockContext;
use crate::error::Error;
use crate::guard::Guard;
use crate::lease_view::{Signal, Slot, CURRENT, ENDED, LOST};

pub use checks::{
    key, returns, returns_logged, returns_mapped, FromLockError, IsOption, KeyPart, LoggedValue,
    NotNullKey, Outcome, Part, Placeholder, Returns, SkipValue,
};
pub use core::format_args;
pub use core::option::Option;
pub use lookup::{client, default_client, default_quorum_client, AsLockClient};
pub use names::{LockNames, Names};

/// The message of the [`Error::InvalidConfig`] a `mode = "redlock"` call on a one-node client
/// returns.
pub const REDLOCK_NEEDS_QUORUM: &str =
    "mode = \"redlock\" needs a quorum client (Client::quorum); this client has one node";

/// The message of the [`Error::InvalidConfig`] for a list of keys on a lock that takes one
/// (the attributes refuse it at compile time; this is for code written by other means).
pub const ONE_KEY_ONLY: &str =
    "a list of keys takes every name at once: #[distributed_lock] as setnx or redlock, #[write_lock] on each name's write side";

// ---------------------------------------------------------------------------------------------
// What the attribute asked for.

/// Which lock to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `#[distributed_lock]` (default mode): [`Client::lock`].
    SetNx,
    /// `mode = "reentrant"`: [`Client::reentrant`].
    Reentrant,
    /// `mode = "redlock"`: [`Client::lock`] on a quorum client; refused on any other.
    Redlock,
    /// `#[read_lock]`: [`Client::read`].
    Read,
    /// `#[write_lock]`: [`Client::write`].
    Write,
    /// `#[semaphore(permits = n)]`: [`Client::semaphore`] with n permits.
    Semaphore(u32),
}

/// `on_lost = ..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its current `.await` and return [`Error::LeaseLost`].
    Cancel,
    /// Let the body finish; it can watch the loss through [`lease`](crate::lease).
    Continue,
}

/// Everything about one attribute that does not depend on the fn's types. All durations are
/// already validated by the macro.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Which lock.
    pub kind: Kind,
    /// The lease.
    pub ttl: Duration,
    /// How long to wait for a busy lock; zero makes one attempt.
    pub wait: Duration,
    /// The watchdog's period, `None` for a fixed lease.
    pub renew_every: Option<Duration>,
    /// Cap on the total hold time.
    pub max_hold: Option<Duration>,
    /// `replicas = n, replicas_timeout = ..`: replica acknowledgement for this lock.
    pub replicas: Option<(u32, Duration)>,
    /// Keep the lock at least this long after acquiring it (`min_hold = ..`).
    pub min_hold: Option<Duration>,
    /// What a lost lease does to the body.
    pub on_lost: OnLost,
    /// The key template as written: the lock's label in traces and metrics.
    pub template: &'static str,
    /// The locked fn's path, for traces.
    pub site: &'static str,
    /// Record the rendered key in traces too (`record_name = true`).
    pub record_name: bool,
    /// Mint a fencing token with the lock (`fencing = true`).
    pub fencing: bool,
}

/// A duration from its parts, for [`Spec`] fields (the generated code names nothing outside
/// this module).
pub const fn duration(secs: u64, nanos: u32) -> Duration {
    Duration::new(secs, nanos)
}

/// `on_busy = ..`, with what `"skip"` returns.
pub enum OnBusy<R> {
    /// Return the busy or timeout error through the fn's error type.
    Error,
    /// Return this value without running the body.
    Skip(fn() -> R),
}

/// `on_busy = "error"`.
pub fn busy_error<R>() -> OnBusy<R> {
    OnBusy::Error
}

/// `on_busy = "skip"`: the fn returns `Ok(Default::default())` when the lock stays busy.
pub fn busy_skip<R: Outcome>() -> OnBusy<R>
where
    R::Ok: SkipValue,
{
    OnBusy::Skip(skipped::<R>)
}

/// `on_busy = "skip", on_error = "log"`: the fn returns `Default::default()` when the lock
/// stays busy (the bound is checked by [`returns_logged`]).
pub fn busy_skip_logged<R: Default>() -> OnBusy<R> {
    OnBusy::Skip(R::default)
}

fn skipped<R: Outcome>() -> R
where
    R::Ok: SkipValue,
{
    R::from_ok(R::Ok::skipped())
}

// ---------------------------------------------------------------------------------------------
// Running a locked body.

/// The whole locked call: take the lock, run `body` while it is held, release it.
///
/// * `client`: the result of [`client`] or [`default_client`]; an error is returned through
///   the fn's error type without touching Redis.
/// * `key`: the rendered name, or an array of them (`key = [..]`: every name at once).
/// * The body is never polled unless the lock is held. When the lock stays busy, `on_busy`
///   decides between the busy error and the skip value.
/// * While the body runs, the lease is watched: with [`OnLost::Cancel`] a loss drops the body
///   (before it is polled again) and returns [`Error::LeaseLost`].
/// * After the body: the lock is released (one round trip). If the body returned `Ok` but the
///   hold did not last to its end (lost, or the release found the lock no longer ours), the
///   call returns [`Error::LeaseLost`] instead: the caller must not believe the work was
///   protected. A body's `Err` is returned as is. A release that fails for a transport reason
///   is not reported: the body ran under the lock, and the lease runs out within its ttl.
/// * Each call is an owner of its own ([`LockContext`] scope): two calls joined in one task
///   exclude each other, and a locked call made inside this body re-enters this call's holds.
///
/// Not an `async fn`. Called where its future is awaited (the generated `run(..).await`), it
/// makes the call's context from the scope around it and returns the whole call, body
/// included, in one allocation: the locked fn's future holds a pointer (and its parameters
/// until its first poll) however much the acquisition and the body weigh. The body is pinned
/// inside that allocation and the layers below hold a pointer to it; the acquisition's state
/// is boxed apart (`acquire`). So the poll frames that stay on the stack while the body runs
/// are small: about 18 kB a level of nesting in a debug build. As an `async fn` that held the
/// body by value in each layer, an empty locked fn's future was 6.8 kB, one awaiting another
/// 51 kB, and three levels overflowed a debug build's 2 MiB worker stack (issue 37;
/// `tests/tests/suite/macros/footprint.rs`).
pub fn run<R, E, F, K: LockNames>(
    client: Result<Cow<'static, Client>, Error>,
    key: K,
    spec: Spec,
    on_busy: OnBusy<R>,
    returns: Returns<R, E>,
    body: F,
) -> Pin<Box<impl Future<Output = R>>>
where
    F: Future<Output = R>,
{
    let names = key.into_names();
    Box::pin(LockContext::call(locked(
        client, names, spec, on_busy, returns, body,
    )))
}

/// [`run`] inside the call's own context.
async fn locked<R, E, F>(
    client: Result<Cow<'static, Client>, Error>,
    key: Names,
    spec: Spec,
    on_busy: OnBusy<R>,
    returns: Returns<R, E>,
    body: F,
) -> R
where
    F: Future<Output = R>,
{
    let client = match client {
        Ok(client) => client,
        Err(error) => return returns.error(error),
    };
    // Pinned in this allocation: what polls it below holds a pointer to it.
    let body = pin!(body);
    let guard = match acquire(&client, &key, &spec).await {
        Ok(guard) => guard,
        Err(error) => {
            return match (on_busy, &error) {
                (OnBusy::Skip(skipped), Error::Busy { .. } | Error::Timeout { .. }) => {
                    tracing::info!(
                        r#fn = spec.site,
                        key = spec.template,
                        "locked call skipped: the lock is held elsewhere"
                    );
                    skipped()
                }
                _ => returns.error(error),
            }
        }
    };
    drop(key);
    match hold(&guard, spec.on_lost, body).await {
        Held::Cancelled(lost, signal) => {
            end(signal);
            // Most likely no longer ours; the release is sent without waiting for it.
            drop(guard);
            returns.error(lost)
        }
        Held::Finished(result, lost, signal) => {
            let held = lost.is_none() && guard.is_held();
            let held_for = guard.held_for();
            let name = (!held).then(|| guard.lock_name());
            let released = guard.release().await;
            end(signal);
            if !(returns.is_ok)(&result) {
                return result;
            }
            let lost = match (lost, name, released) {
                (Some(lost), _, _) => lost,
                (None, Some(name), _) => Error::LeaseLost { name, held_for },
                (None, None, Err(Error::NotOwner { name } | Error::LeaseLost { name, .. })) => {
                    Error::LeaseLost { name, held_for }
                }
                (None, None, _) => return result,
            };
            returns.error(lost)
        }
    }
}

/// [`acquisition`], boxed: its state (the request and the acquire loop's, kilobytes in a
/// debug build) is made here, in a frame of its own, and held by pointer, not built and moved
/// in the poll frames of [`locked`] and the layers above it, which stay on the stack for as
/// long as the body runs, once per level of nesting.
fn acquire<'a>(
    client: &'a Client,
    names: &'a Names,
    spec: &'a Spec,
) -> Pin<Box<dyn Future<Output = Result<Guard, Error>> + Send + 'a>> {
    Box::pin(acquisition(client, names, spec))
}

/// Takes the lock `spec` describes. Not generic, so every locked fn shares this code.
async fn acquisition(client: &Client, names: &Names, spec: &Spec) -> Result<Guard, Error> {
    if spec.kind == Kind::Redlock && !client.is_quorum() {
        return Err(Error::config(REDLOCK_NEEDS_QUORUM));
    }
    let request = match names {
        Names::One(key) => match spec.kind {
            Kind::SetNx | Kind::Redlock => client.lock(&**key),
            Kind::Reentrant => client.reentrant(&**key),
            Kind::Read => client.read(&**key),
            Kind::Write => client.write(&**key),
            Kind::Semaphore(permits) => client.semaphore(&**key, permits),
        },
        Names::Many(keys) => match spec.kind {
            Kind::SetNx | Kind::Redlock => client.lock_many(keys.iter().map(|k| k.as_bytes())),
            Kind::Write => client.write_many(keys.iter().map(|k| k.as_bytes())),
            Kind::Reentrant | Kind::Read | Kind::Semaphore(_) => {
                return Err(Error::config(ONE_KEY_ONLY));
            }
        },
    };
    let mut request = request
        .ttl(spec.ttl)
        .wait(spec.wait)
        .watchdog(spec.renew_every.is_some())
        .label(spec.template)
        .site(spec.site)
        .record_name(spec.record_name)
        .fencing(spec.fencing);
    if let Some(min) = spec.min_hold {
        request = request.min_hold(min);
    }
    if let Some(period) = spec.renew_every {
        request = request.renew_every(period);
    }
    if let Some(cap) = spec.max_hold {
        request = request.max_hold(cap);
    }
    if let Some((count, timeout)) = spec.replicas {
        request = request.replicas(count, timeout);
    }
    request.acquire().await
}

enum Held<R> {
    /// The lease was lost and the body dropped.
    Cancelled(Error, Option<Arc<Signal>>),
    /// The body finished; the loss, if the lease was lost meanwhile.
    Finished(R, Option<Error>, Option<Arc<Signal>>),
}

/// Polls the body while watching the lease.
///
/// Before every poll of the body the lease is checked (an atomic and the local deadline), so
/// the body is never polled once the loss is known. The guard's `lost()` future, which needs a
/// timer, is only polled when the body is about to wait: a body that finishes in its first
/// poll costs no timer.
async fn hold<R, F: Future<Output = R>>(
    guard: &Guard,
    on_lost: OnLost,
    mut body: Pin<&mut F>,
) -> Held<R> {
    let fence = guard.fencing_token();
    let mut lost = pin!(guard.lost());
    let mut loss: Option<Error> = None;
    let mut signal: Option<Arc<Signal>> = None;
    poll_fn(|cx| {
        if loss.is_none() && !guard.is_held() {
            // `lost()` resolves at once for a lease that is no longer held.
            let error = match lost.as_mut().poll(cx) {
                Poll::Ready(error) => error,
                Poll::Pending => lease_lost(guard),
            };
            if let Some(error) = notice(&mut loss, error, &signal, on_lost) {
                return Poll::Ready(Held::Cancelled(error, signal.take()));
            }
        }
        let slot = Slot {
            fence,
            lost: loss.is_some(),
            signal: Cell::new(signal.take()),
        };
        let (poll, kept) = CURRENT.sync_scope(slot, || {
            let poll = body.as_mut().poll(cx);
            (poll, CURRENT.with(|slot| slot.signal.take()))
        });
        signal = kept;
        if let Poll::Ready(result) = poll {
            return Poll::Ready(Held::Finished(result, loss.take(), signal.take()));
        }
        // The body waits: be woken by a loss as well.
        if loss.is_none() {
            if let Poll::Ready(error) = lost.as_mut().poll(cx) {
                if let Some(error) = notice(&mut loss, error, &signal, on_lost) {
                    return Poll::Ready(Held::Cancelled(error, signal.take()));
                }
            }
        }
        Poll::Pending
    })
    .await
}

/// Records a loss and tells the body's [`Lease`](crate::Lease) handles. Returns the error when the body must
/// be dropped.
fn notice(
    loss: &mut Option<Error>,
    error: Error,
    signal: &Option<Arc<Signal>>,
    on_lost: OnLost,
) -> Option<Error> {
    if let Some(signal) = signal {
        signal.over(LOST);
    }
    match on_lost {
        OnLost::Cancel => Some(error),
        OnLost::Continue => {
            *loss = Some(error);
            None
        }
    }
}

fn lease_lost(guard: &Guard) -> Error {
    Error::LeaseLost {
        name: guard.lock_name(),
        held_for: guard.held_for(),
    }
}

fn end(signal: Option<Arc<Signal>>) {
    if let Some(signal) = signal {
        signal.over(ENDED);
    }
}

/// Anchors the type of the generated `async move` block to the fn's declared return type
/// (never called: it sits behind `if false`), so `?` and `return` in the body infer as they
/// would in the fn itself.
pub fn anchor<R>() -> R {
    unreachable!("the return type anchor is never called")
}

/// How many tasks of this process wait for the lock `name` on `client`, ready to take a hold
/// handed to them by a local holder (see the crate's `handoff` module). For tests, which must
/// know the waiter is in place before they release; not an API.
pub fn handoff_waiters(client: &Client, name: &str) -> usize {
    match client.inner().key(name.as_bytes()) {
        Ok(key) => client
            .inner()
            .notifier
            .channels()
            .handoff_waiters(key.lock()),
        Err(_) => 0,
    }
}

/// How many tasks of `client` wait subscribed for the lock `name` (any mode): asleep, or
/// between two attempts. For tests, which must know every waiter is in place before they
/// release; not an API.
pub fn local_waiters(client: &Client, name: &str) -> usize {
    match client.inner().key(name.as_bytes()) {
        Ok(key) => client.inner().notifier.channels().local_waiters(key.lock()),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease_view::{lease, Lease, HELD};
    use crate::token::FencingToken;

    #[test]
    fn fixed_keys_are_borrowed_and_others_formatted_once() {
        assert!(matches!(
            key(format_args!("nightly")),
            Cow::Borrowed("nightly")
        ));
        let id = 42;
        let part = Placeholder(&id).part();
        let built = key(format_args!("order:{{{}}}", part));
        assert!(matches!(built, Cow::Owned(ref k) if k == "order:{42}"));
    }

    #[test]
    fn an_absent_optional_client_is_no_client() {
        let none: Option<&Client> = None;
        assert!(matches!(client(&none), Err(Error::NoClient)));
        assert!(matches!(client(&Box::new(none)), Err(Error::NoClient)));
    }

    #[test]
    fn outcome_and_skip_values() {
        let returns = returns::<Result<Option<u8>, Error>>();
        assert!(matches!(
            returns.error(Error::NoClient),
            Err(Error::NoClient)
        ));
        assert!((returns.is_ok)(&Ok(None)));
        match busy_skip::<Result<Option<u8>, Error>>() {
            OnBusy::Skip(skipped) => assert!(matches!(skipped(), Ok(None))),
            OnBusy::Error => panic!("skip expected"),
        }
    }

    /// A fenced write takes its token from the lease, and refuses to start without one.
    #[test]
    fn a_lease_is_a_token_source_when_fenced() {
        use crate::fenced::TokenSource;
        let lease = |fence| Lease {
            fence,
            signal: Arc::new(Signal::new(HELD)),
        };
        let fenced = lease(Some(FencingToken::new(7)));
        assert_eq!(fenced.token().unwrap(), FencingToken::new(7));
        assert_eq!(<&Lease>::token(&&fenced).unwrap(), FencingToken::new(7));
        assert_eq!(Some(fenced).token().unwrap(), FencingToken::new(7));
        let unfenced = lease(None).token().unwrap_err();
        assert!(
            matches!(&unfenced, Error::InvalidConfig { reason } if reason.contains("fencing = true")),
            "{unfenced}"
        );
        let outside = None::<Lease>.token().unwrap_err();
        assert!(
            matches!(&outside, Error::InvalidConfig { reason } if reason.contains("outside a locked fn")),
            "{outside}"
        );
    }

    #[tokio::test]
    async fn lease_signal_tracks_the_hold() {
        assert!(lease().is_none());
        let signal = Arc::new(Signal::new(HELD));
        let lease = Lease {
            fence: Some(FencingToken::new(7)),
            signal: signal.clone(),
        };
        assert!(lease.is_held());
        assert_eq!(lease.fencing_token(), Some(FencingToken::new(7)));
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::task::yield_now().await;
        signal.over(LOST);
        signal.over(ENDED); // a later end does not hide the loss
        waiter.await.expect("lost() resolves");
        assert!(!lease.is_held());
        assert_eq!(signal.state(), LOST);
    }
}
