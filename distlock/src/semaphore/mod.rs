//! A counting semaphore: at most N holders of one name at a time, each holding one permit
//! with a lease of its own.
//!
//! # Data
//!
//! One sorted set per semaphore name (one key, so one Redis Cluster slot), at the lock key:
//!
//! | member      | score                                                  |
//! |-------------|--------------------------------------------------------|
//! | `permits`   | minus the limit N, as recorded by the first holder     |
//! | `<owner>`   | when that permit's lease ends, in the **server's** ms  |
//!
//! The owner is the acquisition's token (126 random bits, then who took it, as a setnx lock's
//! value), so every acquisition is a permit of its own: a task may hold several permits of
//! one semaphore, one per guard.
//!
//! Beside it, at the helper key `#slots` (same Cluster slot), a hash from each fenced permit's
//! owner to its **permit slot** (0 to N-1); a slot is held while its owner is a member of the
//! sorted set, and the hash lives and goes with the set.
//!
//! # What the common designs get wrong, and what this does instead
//!
//! * **Each permit's lease is its own.** A counter with one expiry for the whole key (the
//!   usual `INCR` + `EXPIRE` semaphore) lets a crashed holder's permit live on as long as any
//!   other holder renews, and frees every permit at once when the key expires. Here every
//!   script first drops the permits whose own lease has ended, so a crashed holder frees its
//!   one permit at its own ttl and never another's. The key's `PEXPIRE` follows the latest
//!   live lease, so an abandoned semaphore still vanishes without any script running.
//! * **The limit is recorded, not trusted per call.** The first holder records N; a caller
//!   that asks with another number while a permit is held is refused with
//!   [`Error::PermitsMismatch`](crate::Error::PermitsMismatch) instead of silently running
//!   the semaphore at its own limit. Once no permit is held the name is free, and the next
//!   holder records its own.
//! * **Releases and renewals touch only the caller's own permit**, found by its token; a
//!   retried acquisition finds its own permit after a lost reply instead of taking a second.
//!
//! # Not on a quorum
//!
//! A Redlock client refuses a semaphore: each node would keep its own set of permits, and a
//! majority of nodes granting a permit does not bound the holders by N. With 3 nodes and
//! N = 2, holders A, B and C can win the nodes {1, 2}, {2, 3} and {1, 3}: no node grants more
//! than 2 permits, each holder has a majority, and 3 hold the semaphore. One node, Sentinel
//! and Cluster keep the whole set in one place.
//!
//! # Wake-up, renewal, fencing
//!
//! Every release publishes one wake-up on the semaphore's channel: one permit is free, so one
//! waiter per process is woken to try for it (a waiter also wakes by itself when the first
//! permit's lease would end, which the busy answer reports). The batched watchdog renews each
//! permit with the extend script, which renews that permit alone. A fenced acquisition mints a
//! token from the name's fencing counter, as the other modes do: tokens grow with every fenced
//! permit taken, so the permits held at one time have distinct tokens. It also takes the
//! lowest permit slot no live fenced permit holds (a retry keeps its own), reported with the
//! token (`{1, token, slot}`), so that a resource can keep one mark per slot and refuse only
//! the expired holder of a slot, never a live holder of another (docs/design.md, "Fenced
//! permits").

use std::sync::LazyLock;

use crate::algorithm::{Algorithm, OwnerKind};
use crate::config::Settings;
use crate::error::Error;
use crate::key::Kind;
use crate::mode::LockMode;

#[cfg(test)]
mod tests;

/// One script: the fencing counters' rule (`fence.lua`), the shared prelude (type check,
/// expired permits dropped, the keys' expiry), then the body. KEYS: the sorted set, the
/// permit slots, then (a fenced acquisition) the fencing counter.
macro_rules! script {
    ($body:literal) => {
        crate::algorithm::Lua::new(concat!(
            include_str!("../fence.lua"),
            include_str!("prelude.lua"),
            include_str!($body)
        ))
    };
}

/// The counting semaphore.
pub(crate) static SEMAPHORE: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    mode: LockMode::Semaphore,
    owner: OwnerKind::Token,
    shared: true,
    not_on_quorum: Some(NOT_ON_QUORUM),
    check: at_least_one_permit,
    plain_acquire: false,
    waited_mark: false,
    helpers: &[Kind::Slots],
    intents: false,
    acquire: script!("acquire.lua"),
    release: script!("release.lua"),
    extend: script!("extend.lua"),
});

/// Why a semaphore is refused on a Redlock quorum (see the module doc).
const NOT_ON_QUORUM: &str = "a semaphore runs on one Redis node, Sentinel or a Cluster, not on a Redlock quorum: each node would keep its own permits, and a majority of nodes granting a permit does not bound the holders by the limit";

/// A semaphore admits as many holders at once as its permits: none is no semaphore.
fn at_least_one_permit(settings: &Settings) -> Result<(), Error> {
    if settings.permits == Some(0) {
        return Err(Error::config(
            "a semaphore needs at least 1 permit: it is how many holders it admits at once",
        ));
    }
    Ok(())
}
