//! Leading: the guard of the election's lock, with its term, and the new leader's announcement.

use std::time::Duration;

use crate::channels::TAKEN;
use crate::error::{Error, Op};
use crate::guard::Guard;
use crate::key::LockKey;
use crate::runtime::Shared;
use crate::token::FencingToken;

/// This process leads an election, until [`resign`](Leadership::resign), drop, or loss.
///
/// It is the guard of the election's lock ([`Guard`]): its lease is measured on the local
/// clock from when the request was sent, minus an allowance for clock drift (1 % + 2 ms), so
/// its local deadline comes strictly before the server's lease ends and a leader learns of its
/// loss before any other candidate can win, even when the server goes silent (the watchdog's
/// renewals unanswered). [`is_leader`](Self::is_leader) turns false at that deadline and
/// [`lost`](Self::lost) resolves, whatever Redis says or does not say.
///
/// What no lease can prevent is a leader that stalls (a GC pause, a frozen VM, `SIGSTOP`)
/// between checking [`is_leader`](Self::is_leader) and acting: it then acts late, maybe after
/// another took over. Hand [`term`](Self::term) to what the leader writes to, and have it
/// refuse a term smaller than one it has seen.
///
/// Dropping it resigns at once, in the background (as dropping a guard releases the lock),
/// so a service that shuts down hands over without waiting for its lease to run out.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: Guard,
    term: FencingToken,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.guard.name())
            .field("term", &self.term)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// A leadership won with `guard` (the fenced acquisition of `key`), announced to the
    /// election's observers.
    pub(super) fn new(shared: &Shared, key: LockKey, guard: Guard) -> Result<Leadership, Error> {
        let Some(term) = guard.fencing_token() else {
            // A fenced acquisition always carries a token; a server that answered otherwise is
            // not one to lead on. The guard gives the lock back as it drops.
            return Err(Error::redis(
                Op::Acquire,
                key.name(),
                (
                    redis::ErrorKind::UnexpectedReturnType,
                    "the election's lock was granted without a fencing token",
                )
                    .into(),
            ));
        };
        // The observers hear of the new leader: a message on the lock's wake-up channel that
        // wakes them and no waiter (see `channels::TAKEN`), on every node, best-effort: one
        // that misses it reads the lock again within a ttl.
        shared.nodes.publish(&key, TAKEN);
        Ok(Leadership { guard, term })
    }

    /// This leadership's term: the fencing token of its acquisition, strictly greater than the
    /// term of every earlier leadership of this election (also across a restart of a server
    /// without persistence: tokens are floored at the server's clock). Pass it with every
    /// write the leader makes, and have the store refuse a term smaller than one it has seen.
    /// Always there (not an `Option` as [`Guard::fencing_token`](crate::Guard::fencing_token)
    /// is): an election always takes its lock with fencing.
    pub fn term(&self) -> FencingToken {
        self.term
    }

    /// True while this process leads: not resigned, not lost, the lease not run out by the
    /// local deadline (which comes before the server's lease ends).
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost (a renewal refused, or none succeeded before the
    /// local deadline, which comes before the server's lease ends: it fires by that deadline
    /// even when the server is silent) with the [`Error::LeaseLost`] to report. Never resolves
    /// while the leadership lasts: race it against the leader's work, and stop the work when
    /// it resolves.
    ///
    /// ```no_run
    /// # async fn demo(leadership: distlock::Leadership) -> Result<(), distlock::Error> {
    /// # async fn lead(term: distlock::FencingToken) {}
    /// tokio::select! {
    ///     () = lead(leadership.term()) => leadership.resign().await,
    ///     lost = leadership.lost() => Err(lost),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) -> Error {
        self.guard.lost().await
    }

    /// Steps down: frees the election's lock at once, which wakes the next candidate (it
    /// leads within about a round trip) and tells the observers. Fails with
    /// [`Error::NotOwner`] if the leadership had already been lost (nothing is freed: the lock
    /// may be another leader's). A resignation whose reply is lost is sent again, and
    /// finished in the background if this future is dropped.
    pub async fn resign(self) -> Result<(), Error> {
        self.guard.release().await
    }

    /// How long this leadership can still be trusted (zero once lost or run out).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }
}
