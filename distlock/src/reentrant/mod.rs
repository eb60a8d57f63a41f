//! The reentrant lock (a hash and Lua scripts, as in Redisson): one hash per lock holding its
//! owner and a field per live acquisition, one expiry for the whole hash.
//!
//! The owner is the client id plus the current [`LockContext`](crate::LockContext) (the Tokio
//! task, not the thread: Redisson keys owners by thread id, which async code does not have).
//! Nested acquisitions by one task re-enter and keep the fencing token (when asked for); other tasks, even on
//! the same thread, wait. The last release deletes the hash and wakes a waiter.

use std::sync::LazyLock;

use crate::algorithm::{Algorithm, OwnerKind};
use crate::mode::LockMode;

#[cfg(test)]
mod tests;

/// The exclusive reentrant lock.
pub(crate) static REENTRANT: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    mode: LockMode::Reentrant,
    owner: OwnerKind::Context,
    shared: false,
    plain_acquire: false,
    waited_mark: false,
    helpers: &[],
    intents: false,
    not_on_quorum: Some(crate::algorithm::one_node_only!("reentrant")),
    check: crate::algorithm::any_settings,
    acquire: crate::algorithm::Lua::new(concat!(
        include_str!("../fence.lua"),
        include_str!("acquire.lua")
    )),
    release: crate::algorithm::Lua::new(include_str!("release.lua")),
    extend: crate::algorithm::Lua::new(include_str!("extend.lua")),
});
