//! A read/write lock without the flaws of the common Redis designs: many readers, or one writer.
//!
//! # Data
//!
//! Three keys per lock name, all in one Redis Cluster slot (see `key`; no lock name reaches
//! the two helpers): the lock's hash, its readers and its waiting writers' intents.
//!
//! | where                 | what                                                         |
//! |-----------------------|--------------------------------------------------------------|
//! | hash `rwlock-layout`  | `3`: marks a read/write lock of this layout                  |
//! | hash `mode`           | `read` or `write` while held                                 |
//! | hash `writer`         | the write owner (client id : task)                           |
//! | hash `writer-until`   | its lease end, in the **server's** milliseconds              |
//! | hash `writer-fence`   | the fencing token of the write tenure (empty: none)          |
//! | hash `writer-holds`   | the nonces of its acquisitions (their number: its depth)     |
//! | hash `writer-holder`  | who took the first of them, for inspection                   |
//! | hash `r:<owner>`      | the nonces of one reader's acquisitions                      |
//! | hash `r-until:<owner>` | that reader's lease end (its score among the readers)        |
//! | hash `keys-until`     | when the hash expires (its `PEXPIRE`, server ms)             |
//! | hash `helpers-until`  | when the two sorted sets expire                              |
//! | hash `intents-until`  | at or after the latest live intent's end                     |
//! | hash `readers-from`   | at or before the earliest read lease's end                   |
//! | readers `<owner>`     | sorted set: one reader, scored by its own lease end          |
//! | intents `<owner>`     | sorted set: a waiting writer, scored by its intent's end     |
//!
//! No call reads the whole state, so its work does not grow with the crowd on the name: it
//! reads its own owner's fields and the summaries in one `HMGET`, counts live readers and
//! intents and finds the latest lease with logarithmic sorted-set commands only where the
//! summaries cannot answer, and clears a bounded number of expired entries (each is cleared
//! once, so amortised a constant per call). A reader joining others sends 5 or 6 commands and
//! one leaving them 5, with 5 readers inside as with 500 (`tests/tests/suite/rwlock/cost.rs`); ten
//! thousand readers and thousands of waiting writers on one name leave the server's time for
//! every other lock (`tests/tests/rwlock_crowd.rs`).
//!
//! The owner is the client id plus the [`LockContext`](crate::LockContext), as for the
//! reentrant lock, so one task re-enters and every other task (in any process) is another
//! owner. Expiry times come from `TIME` inside the scripts, never from a client clock.
//!
//! # What the common designs get wrong, and what this does instead
//!
//! * **Each reader's lease is its own.** A single expiry for the whole hash would let a
//!   crashed reader's share live on as long as any other reader renews, blocking writers
//!   indefinitely. Here a reader counts only while its own lease (its score) has not ended,
//!   so a dead reader blocks a writer until its own ttl at most. The keys' `PEXPIRE` follows
//!   the latest live lease, so an abandoned lock still disappears without any script running.
//! * **Releasing one reader never releases another**: releases and renewals touch only the
//!   caller's own fields (a common cluster design keeps a single `read` timestamp that any
//!   reader could delete).
//! * **Writers are not starved** (the common designs and Redisson's read/write lock let a stream of
//!   readers keep a writer out forever). See the policy below.
//!
//! # Writer preference
//!
//! A writer that waits and finds the lock busy records an **intent** (a single
//! [`try_acquire`](crate::LockRequest::try_acquire) records none: it does not come back). While any other
//! owner's intent is live, no *new* reader gets in; readers already inside may still
//! re-enter, and a writer may still take the read lock it needs to downgrade. The readers
//! inside leave, the last one wakes the waiters, and a writer goes next: however fast new
//! readers arrive, a writer waits at most for the readers already inside when it arrived.
//!
//! An intent lasts the writer's ttl, at most 2 s, and every attempt of the writer renews
//! it; the busy answer tells the writer to try again within a third of that (the wake-up on
//! release usually brings it back much sooner). A writer that gives up (its wait ran out, its
//! future was dropped) withdraws its intent and wakes the waiters, so the readers it kept out
//! come in at once; one that crashed keeps new readers out for at most min(ttl, 2 s). The
//! price of the policy is the mirror image: a continuous stream of writers can keep readers
//! waiting. Writers among themselves are not ordered.
//!
//! The write side's rule (what a write acquisition finds, taking, re-entering, registering
//! an intent, giving back) lives in `write.lua`, which the write scripts put after the
//! prelude, and so do a write set's (`Client::write_many`, `many/write_*.lua`), which apply
//! it to each of their names: a waiting set is a waiting writer, with its intent, on every
//! name it does not hold.
//!
//! # Fencing
//!
//! Only for acquisitions that ask ([`LockRequest::fencing`](crate::LockRequest::fencing));
//! the others neither read nor write the counter. A fenced write acquisition increments the
//! lock's fencing counter (same slot), so write tokens strictly increase; re-entry keeps the
//! tenure's token, and a fenced re-entry into a tenure taken without one mints it then. A
//! fenced read acquisition returns the counter's current value **without** incrementing it:
//! readers share the lock, so their tokens are not unique; the value is the token of the
//! latest fenced write tenure (0 before the first), which lets a reader tell which write it is
//! reading after.
//!
//! # Re-entry, downgrade and upgrade
//!
//! One task may take the read lock repeatedly, and the write lock repeatedly; each
//! acquisition is one level to release. The writer may also take the read lock and then
//! release the write lock: it keeps reading while other readers may join (downgrade). A task
//! holding only the read lock that asks for the write lock gets [`Error::Upgrade`] at once:
//! waiting could never end if two readers did it at the same time.
//!
//! # Wake-up and renewal
//!
//! A writer's last release publishes `all` on the lock's channel (any number of readers may
//! now enter); the last reader's release publishes one wake-up, or `writer` when writers
//! have registered intents: that wakes a waiting writer in each process and no reader (the
//! readers waiting behind an intent could not enter before the writer, whose release, or
//! withdrawal if it gives up, wakes them all). One `extend` script serves
//! both sides: it renews the caller's own read and write leases and no one else's, and
//! answers 0 (lease lost) once the caller holds nothing live.
//!
//! [`Error::Upgrade`]: crate::Error::Upgrade

use std::sync::LazyLock;

use crate::algorithm::{Algorithm, OwnerKind};
use crate::key::Kind;
use crate::mode::LockMode;

/// One script: the fencing counters' rule (`fence.lua`), the shared prelude (state loading,
/// pruning, expiry), then the body (for the write side, the write side's rule, `write.lua`,
/// then the body).
macro_rules! script {
    ($($part:literal),+) => {
        crate::algorithm::Lua::new(concat!(
            include_str!("../fence.lua"),
            include_str!("prelude.lua"),
            $(include_str!($part)),+
        ))
    };
}

/// The shared side of a read/write lock.
pub(crate) static READ: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    mode: LockMode::Read,
    owner: OwnerKind::Context,
    shared: true,
    not_on_quorum: Some(crate::algorithm::one_node_only!("read")),
    check: crate::algorithm::any_settings,
    plain_acquire: false,
    waited_mark: false,
    helpers: &[Kind::Readers, Kind::Intents],
    intents: false,
    acquire: script!("read_acquire.lua"),
    release: script!("read_release.lua"),
    extend: script!("extend.lua"),
});

/// The exclusive side of a read/write lock.
pub(crate) static WRITE: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    mode: LockMode::Write,
    owner: OwnerKind::Context,
    shared: false,
    not_on_quorum: Some(crate::algorithm::one_node_only!("write")),
    check: crate::algorithm::any_settings,
    plain_acquire: false,
    waited_mark: false,
    helpers: &[Kind::Readers, Kind::Intents],
    intents: true,
    acquire: script!("write.lua", "write_acquire.lua"),
    release: script!("write.lua", "write_release.lua"),
    extend: script!("extend.lua"),
});

#[cfg(test)]
mod tests {
    use crate::algorithm::calls_under_test::{assert_declares, assert_refused_on_a_quorum_by_name};
    use crate::key::Kind;

    #[test]
    fn a_quorum_is_refused_in_each_sides_name() {
        assert_refused_on_a_quorum_by_name(&super::READ);
        assert_refused_on_a_quorum_by_name(&super::WRITE);
    }

    /// Every call of either side declares the readers and intents after the lock.
    #[test]
    fn script_calls_declare_exactly_the_keys_they_touch() {
        let rw = [Kind::Readers, Kind::Intents];
        assert_declares(&super::READ, &rw, &rw);
        assert_declares(&super::WRITE, &rw, &rw);
    }

    #[test]
    fn one_extend_script_serves_both_sides() {
        // An owner's read and write holds are renewed together (one task's holds live and
        // die together), so both sides must run the very same script.
        assert_eq!(
            super::READ.extend.get_hash(),
            super::WRITE.extend.get_hash()
        );
    }
}
