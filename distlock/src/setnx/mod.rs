//! The `setnx` lock, the classic Redis lock done right: `SET key token NX PX ttl` with a fresh
//! 126-bit token per acquisition; release and extension only while the stored token is ours.
//!
//! Unlike the old `SETNX` + `GETSET` scheme, no client clock value is ever written: the
//! expiry is Redis's own `PX`, so client clocks need not agree.

use std::sync::LazyLock;

use crate::algorithm::{Algorithm, OwnerKind};
use crate::mode::LockMode;

mod native;
#[cfg(test)]
mod tests;

pub(crate) use native::{
    native_answer, native_extend, renews_natively, NativeAnswer, NativeExtend,
};

/// The exclusive, non-reentrant lock.
pub(crate) static SETNX: LazyLock<Algorithm> = LazyLock::new(|| Algorithm {
    mode: LockMode::SetNx,
    owner: OwnerKind::Token,
    shared: false,
    plain_acquire: true,
    waited_mark: true,
    helpers: &[],
    intents: false,
    not_on_quorum: None,
    check: crate::algorithm::any_settings,
    acquire: crate::algorithm::Lua::new(concat!(
        include_str!("../fence.lua"),
        include_str!("../held_as.lua"),
        include_str!("acquire.lua")
    )),
    release: crate::algorithm::Lua::new(include_str!("release.lua")),
    extend: crate::algorithm::Lua::new(include_str!("extend.lua")),
});
