//! Runtime support for the lock attributes (`#[distributed_lock]`, `#[read_lock]`,
//! `#[write_lock]`).
//!
//! Not a public API: the code the attributes generate calls into this module (as
//! `::distlock::__private::..`), and anything here may change in any release. The two public
//! items defined here, [`Lease`] and [`lease`], are re-exported at the crate root.
//!
//! The generated code stays small: it builds the key, looks up the client, fills in a [`Spec`]
//! and hands the body to [`run`], which does the rest. Compile-time checks that need types
//! (return type, error conversion, key placeholders, `client = ..`, `on_busy = "skip"`) are
//! the traits below, each with a `#[diagnostic::on_unimplemented]` message; the macro emits the
//! calls that need them with the span of the user's offending token.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt::{self, Display};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;

use crate::client::Client;
use crate::context::LockContext;
use crate::error::Error;
use crate::guard::Guard;

pub use core::format_args;
pub use core::option::Option;

/// The message of the [`Error::InvalidConfig`] a `mode = "redlock"` call on a one-node client
/// returns.
pub const REDLOCK_NEEDS_QUORUM: &str =
    "mode = \"redlock\" needs a quorum client (Client::quorum); this client has one node";

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
}

/// `on_lost = ..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its current `.await` and return [`Error::LeaseLost`].
    Cancel,
    /// Let the body finish; it can watch the loss through [`lease`].
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
    /// Record the rendered key in traces too (`record_key = true`).
    pub record_key: bool,
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
// Compile-time checks on the user's types.

/// The return type of a locked fn: a `Result`.
#[diagnostic::on_unimplemented(
    message = "a locked fn must return `Result<T, E>`, not `{Self}`",
    label = "not a `Result`: lock errors (busy, lease lost, no client) could not be returned",
    note = "return `Result<T, E>` with `E: From<distlock::Error>`, e.g. `Result<{Self}, MyError>`; or, for a job whose lock errors need only be logged, add `on_error = \"log\"` (then any type with `Default` may be returned)"
)]
pub trait Outcome: Sized {
    /// The success type.
    type Ok;
    /// The error type.
    type Err;
    /// `Ok(value)`.
    fn from_ok(value: Self::Ok) -> Self;
    /// `Err(error)`.
    fn from_err(error: Self::Err) -> Self;
    /// Whether this is `Ok`.
    fn is_ok(&self) -> bool;
}

impl<T, E> Outcome for Result<T, E> {
    type Ok = T;
    type Err = E;

    fn from_ok(value: T) -> Self {
        Ok(value)
    }

    fn from_err(error: E) -> Self {
        Err(error)
    }

    fn is_ok(&self) -> bool {
        Result::is_ok(self)
    }
}

/// An error type a lock error converts into.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry a `distlock::Error`, so a locked fn cannot return it",
    label = "the lock's errors (busy, lease lost, no client) are returned through this type",
    note = "implement `From<distlock::Error>` for `{Self}`, or convert explicitly with `map_err = path::to::fn` (a `fn(distlock::Error) -> {Self}`)"
)]
pub trait FromLockError {
    /// Wraps a lock error.
    fn from_lock_error(error: Error) -> Self;
}

impl<E: From<Error>> FromLockError for E {
    fn from_lock_error(error: Error) -> Self {
        E::from(error)
    }
}

/// How a locked fn's return value is built: from a lock error, or checked for success.
/// Made by [`returns`] or [`returns_mapped`], whose bounds are the compile-time checks; [`run`]
/// itself has none, so each check is reported once, where the macro placed it.
pub struct Returns<R, E> {
    map_err: fn(Error) -> E,
    from_err: fn(E) -> R,
    is_ok: fn(&R) -> bool,
}

/// The return type of a fn with `on_error = "log"`.
#[diagnostic::on_unimplemented(
    message = "`on_error = \"log\"` returns `Default::default()` when the lock is not held, but `{Self}` has no `Default`",
    label = "`{Self}` does not implement `Default`",
    note = "return `()`, an `Option<T>` or another type with `Default`; or remove `on_error = \"log\"` and return `Result<T, E>` with `E: From<distlock::Error>`"
)]
pub trait LoggedValue {
    /// What a call whose lock failed returns.
    fn not_run() -> Self;
}

impl<T: Default> LoggedValue for T {
    fn not_run() -> Self {
        T::default()
    }
}

/// `on_error = "log"`: a lock error becomes a `warn` event and the fn returns
/// `Default::default()`.
pub fn returns_logged<R: LoggedValue>() -> Returns<R, ()> {
    Returns {
        map_err: log_error,
        from_err: |()| R::not_run(),
        // Any value is the body's own answer: a loss after it finished is logged instead.
        is_ok: |_| true,
    }
}

fn log_error(error: Error) {
    tracing::warn!(error = %error, "locked call not run: the lock was not held");
}

/// A locked fn returning `R` whose error type converts with `From<distlock::Error>`.
pub fn returns<R: Outcome>() -> Returns<R, R::Err>
where
    R::Err: FromLockError,
{
    Returns {
        map_err: R::Err::from_lock_error,
        from_err: R::from_err,
        is_ok: R::is_ok,
    }
}

/// `map_err = path`: the path must be a `fn(distlock::Error) -> E` for the fn's error type `E`.
pub fn returns_mapped<R: Outcome>(map_err: fn(Error) -> R::Err) -> Returns<R, R::Err> {
    Returns {
        map_err,
        from_err: R::from_err,
        is_ok: R::is_ok,
    }
}

impl<R, E> Returns<R, E> {
    fn error(&self, error: Error) -> R {
        (self.from_err)((self.map_err)(error))
    }
}

/// The `Ok` type of a locked fn with `on_busy = "skip"`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` returns `Ok(Default::default())` when the lock is busy, but `{Self}` has no `Default`",
    label = "`{Self}` does not implement `Default`",
    note = "return `Result<Option<T>, E>` (skipped calls return `Ok(None)`), or implement `Default` for `{Self}`"
)]
pub trait SkipValue {
    /// What a skipped call returns inside `Ok`.
    fn skipped() -> Self;
}

impl<T: Default> SkipValue for T {
    fn skipped() -> Self {
        T::default()
    }
}

/// A value a key placeholder may name.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used in a lock key: placeholders are formatted with `Display`",
    label = "`{Self}` does not implement `std::fmt::Display`",
    note = "implement `std::fmt::Display` for `{Self}`, or name a field that has it, e.g. `<user.id>`"
)]
pub trait KeyPart: Display {}

impl<T: Display + ?Sized> KeyPart for T {}

/// Never implemented: it exists for its message on `Option` placeholders.
#[diagnostic::on_unimplemented(
    message = "a lock key cannot contain an `Option`: a key must never be null",
    label = "this placeholder is an `{Self}`",
    note = "every `None` would share one lock; take the value out of the `Option` before calling (make the parameter the inner type), or name a field that is not an `Option`"
)]
pub trait NotNullKey {}

/// A key placeholder's value, on its way into the key's `format_args!`.
pub struct Placeholder<'a, T>(pub &'a T);

impl<'a, T: IsOption> Placeholder<'a, T> {
    /// `Option`s are refused, with their own message (inherent methods win over [`Part`]).
    pub fn part(self) -> &'a dyn Display
    where
        T::Option: NotNullKey,
    {
        unreachable!("NotNullKey has no implementations")
    }
}

/// `Option<T>` and references to one: the placeholder types refused by [`NotNullKey`].
pub trait IsOption {
    /// The `Option` type itself, for the message.
    type Option;
}

impl<T> IsOption for Option<T> {
    type Option = Option<T>;
}

impl<T: IsOption + ?Sized> IsOption for &T {
    type Option = T::Option;
}

/// Every placeholder that is not an `Option`. A trait (imported by the generated code) so that
/// the inherent methods above take precedence.
pub trait Part<'a> {
    /// The placeholder's type.
    type Value;
    /// The value, as the key's formatter sees it.
    fn part(self) -> &'a dyn Display
    where
        Self::Value: KeyPart;
}

impl<'a, T: 'a> Part<'a> for Placeholder<'a, T> {
    type Value = T;

    fn part(self) -> &'a dyn Display
    where
        T: KeyPart,
    {
        self.0
    }
}

/// The key, formatted once. A template without placeholders costs no allocation.
pub fn key(parts: fmt::Arguments<'_>) -> Cow<'static, str> {
    match parts.as_str() {
        Some(fixed) => Cow::Borrowed(fixed),
        None => Cow::Owned(fmt::format(parts)),
    }
}

// ---------------------------------------------------------------------------------------------
// Finding the client.

/// A value `client = ..` may evaluate to.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a lock client",
    label = "`client = ..` must evaluate to a `distlock::Client`",
    note = "accepted: `Client`, `&Client`, `Arc<Client>`, `Box<Client>`, and an `Option` of these (`None` returns `distlock::Error::NoClient`); leave `client` out to use the default set with `distlock::set_default`"
)]
pub trait AsLockClient {
    /// The client (a cheap clone: an `Arc` inside), or why there is none.
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error>;
}

impl AsLockClient for Client {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        Ok(Cow::Owned(self.clone()))
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for &T {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for &mut T {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for Arc<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for Box<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient> AsLockClient for Option<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        self.as_ref().ok_or(Error::NoClient)?.lock_client()
    }
}

/// `client = expr`, evaluated where the fn's parameters are in scope. The result owns its
/// handle, so the body may move whatever the expression borrowed from.
pub fn client<C: AsLockClient + ?Sized>(client: &C) -> Result<Cow<'static, Client>, Error> {
    client.lock_client()
}

/// No `client = ..`: the process default, or [`Error::NoClient`].
pub fn default_client() -> Result<Cow<'static, Client>, Error> {
    crate::client::default_client().map(Cow::Borrowed)
}

/// No `client = ..` in a `mode = "redlock"` fn: the quorum default, or [`Error::NoClient`].
pub fn default_quorum_client() -> Result<Cow<'static, Client>, Error> {
    crate::client::default_quorum_client().map(Cow::Borrowed)
}

// ---------------------------------------------------------------------------------------------
// The lease, as the body sees it.

/// The lock held by the locked fn that is running; see [`lease`].
///
/// A cheap handle (a fencing token and a shared flag). It reports the hold as seen by the
/// locked fn that took it: the loss is noticed when a renewal is refused, when no renewal
/// succeeded before the lease ran out on the local clock, or when `max_hold` elapsed. A handle
/// kept after the locked fn returned reports the hold as over.
#[derive(Clone, Debug)]
pub struct Lease {
    fence: Option<u64>,
    signal: Arc<Signal>,
}

impl Lease {
    /// The hold's fencing token ([`Guard::fencing_token`]) when the attribute asked for one
    /// (`fencing = true`; `None` otherwise): pass it to the resource the lock protects and
    /// have it refuse tokens smaller than one it has seen.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fence
    }

    /// True until the lease is lost or the locked fn returned.
    pub fn is_held(&self) -> bool {
        self.signal.state() == HELD
    }

    /// Resolves once [`is_held`](Self::is_held) is false: the lease was lost (the way to notice
    /// it under `on_lost = "continue"`; under the default `on_lost = "cancel"` the body is
    /// dropped instead and never sees this resolve), or the locked fn has returned.
    pub async fn lost(&self) {
        self.signal.until_over().await;
    }
}

/// The lease of the innermost locked fn running in this task, or `None` outside one.
///
/// Inside a body generated by `#[distributed_lock]`, `#[read_lock]` or `#[write_lock]` this
/// gives the fencing token of the hold and, with `on_lost = "continue"`, the way to notice a
/// lost lease:
///
/// ```no_run
/// # #[derive(Debug)] struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # async fn copy_chunk(_: u32, _: u64) {}
/// #[distlock::distributed_lock(key = "export:<id>", on_lost = "continue", fencing = true)]
/// async fn export(id: u32) -> Result<(), AppError> {
///     let lease = distlock::lease().expect("inside a locked fn");
///     for _chunk in 0..100 {
///         if !lease.is_held() {
///             break; // stop at a safe point; the call returns Err(LeaseLost)
///         }
///         copy_chunk(id, lease.fencing_token().expect("fencing = true")).await;
///     }
///     Ok(())
/// }
/// ```
///
/// Like every task-local, it does not cross `tokio::spawn`: pass the [`Lease`] to a spawned
/// task explicitly. The first call in a locked fn allocates the shared flag; bodies that never
/// ask pay nothing.
pub fn lease() -> Option<Lease> {
    CURRENT
        .try_with(|slot| {
            let signal = slot
                .signal
                .take()
                .unwrap_or_else(|| Arc::new(Signal::new(if slot.lost { LOST } else { HELD })));
            slot.signal.set(Some(signal.clone()));
            Lease {
                fence: slot.fence,
                signal,
            }
        })
        .ok()
}

tokio::task_local! {
    /// Set around every poll of a locked body.
    static CURRENT: Slot;
}

/// What [`lease`] reads; moved into the task-local for each poll of the body, so it needs no
/// allocation until the body asks for a [`Lease`].
struct Slot {
    fence: Option<u64>,
    lost: bool,
    signal: Cell<Option<Arc<Signal>>>,
}

const HELD: u8 = 0;
const LOST: u8 = 1;
const ENDED: u8 = 2;

#[derive(Debug)]
struct Signal {
    state: AtomicU8,
    changed: Notify,
}

impl Signal {
    fn new(state: u8) -> Self {
        Signal {
            state: AtomicU8::new(state),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Moves to `state` unless the hold is already over for another reason.
    fn over(&self, state: u8) {
        if self
            .state
            .compare_exchange(HELD, state, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.changed.notify_waiters();
        }
    }

    async fn until_over(&self) {
        loop {
            let mut notified = pin!(self.changed.notified());
            notified.as_mut().enable();
            if self.state() != HELD {
                return;
            }
            notified.await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a locked body.

/// The whole locked call: take the lock, run `body` while it is held, release it.
///
/// * `client`: the result of [`client`] or [`default_client`]; an error is returned through
///   the fn's error type without touching Redis.
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
pub async fn run<R, E, F>(
    client: Result<Cow<'static, Client>, Error>,
    key: Cow<'static, str>,
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
    LockContext::call(locked(client, key, spec, on_busy, returns, body)).await
}

/// [`run`] once the client is known, inside the call's own context.
async fn locked<R, E, F>(
    client: Cow<'static, Client>,
    key: Cow<'static, str>,
    spec: Spec,
    on_busy: OnBusy<R>,
    returns: Returns<R, E>,
    body: F,
) -> R
where
    F: Future<Output = R>,
{
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
            let name = (!held).then(|| guard.name().to_owned());
            let released = guard.release().await;
            end(signal);
            if !(returns.is_ok)(&result) {
                return result;
            }
            let lost = match (lost, name, released) {
                (Some(lost), _, _) => lost,
                (None, Some(key), _) => Error::LeaseLost { key, held_for },
                (None, None, Err(Error::NotOwner { key } | Error::LeaseLost { key, .. })) => {
                    Error::LeaseLost { key, held_for }
                }
                (None, None, _) => return result,
            };
            returns.error(lost)
        }
    }
}

/// Takes the lock `spec` describes. Not generic, so every locked fn shares this code.
async fn acquire(client: &Client, key: &str, spec: &Spec) -> Result<Guard, Error> {
    let request = match spec.kind {
        Kind::SetNx => client.lock(key),
        Kind::Reentrant => client.reentrant(key),
        Kind::Redlock if !client.is_quorum() => return Err(Error::config(REDLOCK_NEEDS_QUORUM)),
        Kind::Redlock => client.lock(key),
        Kind::Read => client.read(key),
        Kind::Write => client.write(key),
    };
    let mut request = request
        .ttl(spec.ttl)
        .wait(spec.wait)
        .watchdog(spec.renew_every.is_some())
        .label(spec.template)
        .site(spec.site)
        .record_name(spec.record_key)
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
async fn hold<R, F: Future<Output = R>>(guard: &Guard, on_lost: OnLost, body: F) -> Held<R> {
    let fence = guard.fencing_token();
    let mut body = pin!(body);
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

/// Records a loss and tells the body's [`Lease`] handles. Returns the error when the body must
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
        key: guard.name().to_owned(),
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
    match client.key(name.as_bytes()) {
        Ok(key) => client
            .inner()
            .notifier
            .channels()
            .handoff_waiters(key.lock()),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn lease_signal_tracks_the_hold() {
        assert!(lease().is_none());
        let signal = Arc::new(Signal::new(HELD));
        let lease = Lease {
            fence: Some(7),
            signal: signal.clone(),
        };
        assert!(lease.is_held());
        assert_eq!(lease.fencing_token(), Some(7));
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
