//! What a fenced write takes its token from: whatever the holder already has in hand.

use crate::election::Leadership;
use crate::error::Error;
use crate::guard::Guard;
use crate::lease_view::Lease;
use crate::token::FencingToken;

/// Where a fenced write finds its token: what a holder already has in hand, passed as it is.
///
/// | source | where it comes from |
/// |---|---|
/// | [`FencingToken`], `Option<FencingToken>` | a token kept or read back; [`Guard::fencing_token`] |
/// | `&`[`Guard`] | a lock taken by hand with [`fencing(true)`](crate::LockRequest::fencing) |
/// | [`Lease`], `&Lease`, `Option<Lease>` | [`distlock::lease()`](crate::lease) in a locked fn with `fencing = true` |
/// | `&`[`Leadership`] | an election: the term is the token |
///
/// A source without a token (a lock taken without fencing, `distlock::lease()` outside a
/// locked fn) fails the write with [`Error::InvalidConfig`] before anything is sent: a
/// mistake in the code, which fails the same way every time.
///
/// In a locked fn, the write is one line:
///
/// ```no_run
/// use distlock::distributed_lock;
/// use distlock::fenced::FencedRedis;
/// use redis::aio::MultiplexedConnection;
///
/// #[distributed_lock(key = "account:<id>", fencing = true)]
/// async fn deposit(
///     id: u64,
///     amount: i64,
///     store: &mut FencedRedis<MultiplexedConnection>,
/// ) -> Result<i64, distlock::Error> {
///     // Refused with `Error::StaleToken` if a newer holder of the lock wrote meanwhile.
///     store.hincr_by(format!("account:{id}"), "balance", amount, distlock::lease()).await
/// }
/// ```
pub trait TokenSource {
    /// The token to present, or why there is none.
    fn token(&self) -> Result<FencingToken, Error>;
}

/// The error of a source without a token: the lock was taken without fencing.
pub(crate) fn taken_without_fencing() -> Error {
    Error::config(
        "no fencing token to write with: the lock was taken without fencing \
         (`.fencing(true)` on the request, `fencing = true` on the attribute)",
    )
}

impl TokenSource for FencingToken {
    fn token(&self) -> Result<FencingToken, Error> {
        Ok(*self)
    }
}

impl TokenSource for Option<FencingToken> {
    fn token(&self) -> Result<FencingToken, Error> {
        self.ok_or_else(taken_without_fencing)
    }
}

/// By reference only: a guard passed by value would be dropped after the write, which
/// releases the lock.
impl TokenSource for &Guard {
    fn token(&self) -> Result<FencingToken, Error> {
        self.fencing_token().token()
    }
}

/// By reference only, as a guard: dropping the leadership resigns.
impl TokenSource for &Leadership {
    fn token(&self) -> Result<FencingToken, Error> {
        Ok(self.term())
    }
}

/// A fenced write from a locked fn taken with `fencing = true` passes its lease.
impl TokenSource for Lease {
    fn token(&self) -> Result<FencingToken, Error> {
        self.fencing_token().ok_or_else(taken_without_fencing)
    }
}

impl TokenSource for &Lease {
    fn token(&self) -> Result<FencingToken, Error> {
        (*self).token()
    }
}

/// What [`distlock::lease()`](crate::lease) returns, passed as it is: `None` (outside a locked fn, or in a task it
/// spawned) fails the write.
impl TokenSource for Option<Lease> {
    fn token(&self) -> Result<FencingToken, Error> {
        match self {
            Some(lease) => lease.token(),
            None => Err(Error::config(
                "no fencing token to write with: `distlock::lease()` is None outside a locked fn \
                 (and in a task it spawned: pass it the `Lease`)",
            )),
        }
    }
}
