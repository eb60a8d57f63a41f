//! Several names at once (`Client::lock_many`): every name or none.
//!
//! A set is one hold on several setnx locks: each name keeps its own lock key, holding the
//! acquisition's token with a `PX` lease, so a set excludes each name's
//! [`Client::lock`](crate::Client::lock) and each name's lock excludes the set. Its three
//! scripts take every name in one call (see the calling convention in `algorithm`), so on one
//! server the set is taken whole or not at all, released whole, and renewed only while every
//! name is still ours (the lease is the shortest of the names'). A caller that finds a name
//! busy holds nothing while it waits, and waits for that name's release: the busy answer says
//! which one. The names are in a fixed order (`key::set`), which is what lets a Redis Cluster,
//! where one script reaches one slot only, take a set spanning slots a slot at a time
//! (`nodes::groups`). Everything else is the setnx lock's: the acquire loop, the lease, the
//! watchdog, the wake-ups (each name's own channel and waited-for mark), the quorum.
//!
//! A **write set** ([`WRITE_MANY`], `Client::write_many`) is the same shape of hold on the
//! write side of each name's read/write lock, for names the rest of the code takes with
//! `write` and `read` (one name, one mode: `lock_many` meets those with `ModeConflict`). Its
//! scripts are the read/write lock's prelude and write side's rule (`rwlock/write.lua`)
//! applied to each name in turn (`write_head.lua` points the prelude's key locals at each
//! name's keys), so each name is taken, given back and renewed exactly as `write(name)`
//! would, and the set excludes each name's writers and readers. Owned by the task as
//! `write`; a waiting set registers its intent on every name it does not hold; like the
//! read/write lock, it is refused on a quorum.

use std::sync::LazyLock;

use crate::algorithm::{Algorithm, Lua, OwnerKind};
use crate::key::Kind;
use crate::mode::LockMode;

/// The set of names taken together, exclusively.
pub(crate) static MANY: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    // Each name is held as a setnx lock: what inspection shows and another mode is told.
    mode: LockMode::SetNx,
    owner: OwnerKind::Token,
    shared: false,
    plain_acquire: false,
    waited_mark: true,
    helpers: &[],
    intents: false,
    not_on_quorum: None,
    check: crate::algorithm::any_settings,
    acquire: Lua::new(concat!(
        include_str!("../fence.lua"),
        include_str!("../held_as.lua"),
        include_str!("acquire.lua")
    )),
    release: Lua::new(include_str!("release.lua")),
    extend: Lua::new(include_str!("extend.lua")),
});

/// One script of a write set: the fencing counters' rule, the read/write lock's prelude (its
/// data layout and expiry) and write side's rule, the set's head (each name's keys in turn),
/// then the body.
macro_rules! write_set_script {
    ($body:literal) => {
        Lua::new(concat!(
            include_str!("../fence.lua"),
            include_str!("../rwlock/prelude.lua"),
            include_str!("../rwlock/write.lua"),
            include_str!("write_head.lua"),
            include_str!($body)
        ))
    };
}

/// The set of names taken together on the write side of each name's read/write lock
/// (`Client::write_many`).
pub(crate) static WRITE_MANY: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    // Each name is held as the write side of its read/write lock: what inspection shows and
    // another mode is told.
    mode: LockMode::Write,
    // The task, as `write(name)`: a name the task already writes is re-entered, a name it
    // only reads is refused (`Error::Upgrade`), and a waiting set's intents are the task's.
    owner: OwnerKind::Context,
    shared: false,
    plain_acquire: false,
    waited_mark: false,
    helpers: &[Kind::Readers, Kind::Intents],
    intents: true,
    // As the read/write lock: specified and tested on one server only.
    not_on_quorum: Some(crate::algorithm::one_node_only!("write")),
    check: crate::algorithm::any_settings,
    acquire: write_set_script!("write_acquire.lua"),
    release: write_set_script!("write_release.lua"),
    extend: write_set_script!("write_extend.lua"),
});

#[cfg(test)]
mod tests;
