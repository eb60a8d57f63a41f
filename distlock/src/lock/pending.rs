//! An acquisition's attempts that may have taken the lock unseen, given back if it ends
//! without the lock.

use std::time::{Duration, Instant};

use crate::release::Hold;

/// An acquisition that may hold the lock without knowing it (see `LockRequest::acquire`), or
/// that left an intent on the server.
pub(super) struct Pending {
    pub(super) hold: Hold,
    pub(super) ttl: Duration,
    pub(super) armed: bool,
    /// A busy answer registered this waiter's intent (see `Algorithm::intents`): if the
    /// acquisition ends without the lock (its wait ran out, an error, the future dropped), its
    /// release withdraws the intent, so the newcomers it kept out need not sleep until it
    /// lapses.
    pub(super) intent: bool,
}

impl Pending {
    /// Releases the acquisition in the background, with the same id: idempotent, and it frees
    /// nothing but this acquisition's own hold (or withdraws its intent).
    pub(super) fn give_back(&mut self) {
        (self.armed, self.intent) = (false, false);
        // Whatever an attempt took expires within a ttl of now: no use retrying past that.
        let until = Instant::now() + self.ttl;
        self.hold.clone().release_in_background(Some(until));
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed || self.intent {
            self.give_back();
        }
    }
}
