//! Compile-time checks on the user's types: each trait's `on_unimplemented` message is what a
//! user sees when a locked fn's types do not fit.

use std::borrow::Cow;
use std::fmt::{self, Display};

use crate::error::Error;

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
/// Made by [`returns`] or [`returns_mapped`], whose bounds are the compile-time checks; [`run`](super::run)
/// itself has none, so each check is reported once, where the macro placed it.
pub struct Returns<R, E> {
    pub(super) map_err: fn(Error) -> E,
    pub(super) from_err: fn(E) -> R,
    pub(super) is_ok: fn(&R) -> bool,
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
    pub(super) fn error(&self, error: Error) -> R {
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
