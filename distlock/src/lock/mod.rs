//! Taking a lock: what a request is (here), the builder every mode shares (`request`), and
//! the one acquire loop every mode goes through (`attempt`), which takes the request whole.

mod attempt;
mod pending;
mod request;

use std::panic::Location;
use std::sync::Arc;

use crate::algorithm::Algorithm;
use crate::error::Error;
use crate::key::LockKey;
use crate::runtime::Shared;

/// What a request is made of, for the primitives built on one (an election keeps it).
pub(crate) use crate::config::Settings;

/// A lock about to be taken; see [`Client::lock`](crate::Client::lock). Set the ttl and wait, then call
/// [`acquire`](Self::acquire) (waits) or [`try_acquire`](Self::try_acquire) (one attempt).
///
/// A consumed builder: `acquire(self)` takes the request, one request per acquisition
/// (making one costs no I/O). An [`Election`](crate::Election), which campaigns again and
/// again, is the reusable value instead; [the vocabulary](crate::guide::vocabulary) sets the
/// primitives side by side.
#[must_use = "a lock request does nothing until `acquire` or `try_acquire` is awaited"]
pub struct LockRequest<'c> {
    shared: &'c Arc<Shared>,
    algorithm: &'static Algorithm,
    key: Result<LockKey, Error>,
    settings: Settings,
    caller: &'static Location<'static>,
}
