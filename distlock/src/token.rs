//! Fencing tokens as a type of their own: what a holder presents to the resource it
//! protects, so that the resource can refuse a holder whose lease ended (see `fenced`).

use std::fmt;

/// A fencing token: a number that strictly increases with every acquisition of a lock name
/// taken with [`fencing(true)`](crate::LockRequest::fencing), across server restarts and
/// failovers (docs/design.md, "Fencing tokens"). A resource that remembers the highest token
/// it has seen and refuses any lower one refuses a holder whose lease ended while it stalled:
/// its successor's token is higher. [`FencedRedis`](crate::fenced::FencedRedis) does that for
/// Redis keys.
///
/// Tokens compare as numbers; they are below 2⁶³ (a microsecond clock reading at most), so
/// they convert to the signed integers SQL columns hold without loss:
///
/// ```
/// use distlock::FencingToken;
///
/// let earlier = FencingToken::new(1_795_935_530_932_000);
/// let later = FencingToken::new(1_795_935_530_932_001);
/// assert!(later > earlier);
/// assert_eq!(later.to_string(), "1795935530932001");
/// assert_eq!(i64::try_from(later), Ok(1_795_935_530_932_001));
/// assert_eq!(u64::from(later), 1_795_935_530_932_001);
/// ```
///
/// # A semaphore permit's token
///
/// A semaphore has N holders at once, so "refuse anything below the highest token" would
/// refuse live holders. A permit taken with fencing therefore also gets a **permit slot**,
/// 0 to N-1: the lowest slot no other live fenced permit holds, kept for as long as the
/// permit's lease. Its token still comes from the name's one counter, so within a slot each
/// holder's token is above its predecessors'. A resource keeps one mark per slot and compares
/// a permit's token with its slot's mark only: it refuses the expired holder of a slot once
/// that slot's next holder wrote, and never a live holder of another slot
/// ([`FencedRedis`](crate::fenced::FencedRedis) does). [`slot`](Self::slot) says which; a
/// lock's, a write lock's and a leader's token has none.
///
/// ```
/// use distlock::FencingToken;
///
/// let permit = FencingToken::new(1_795_935_530_932_001).in_slot(2);
/// assert_eq!(permit.slot(), Some(2));
/// assert_eq!(permit.get(), 1_795_935_530_932_001);
/// assert_eq!(permit.to_string(), "1795935530932001 (permit slot 2)");
/// assert_eq!(FencingToken::new(7).slot(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken {
    value: u64,
    slot: Option<u32>,
}

impl FencingToken {
    /// A token of this value, without a permit slot (one read back from a store, say).
    pub const fn new(value: u64) -> FencingToken {
        FencingToken { value, slot: None }
    }

    /// The same token as a semaphore permit's in `slot` (one read back from a store, say).
    pub const fn in_slot(self, slot: u32) -> FencingToken {
        FencingToken {
            value: self.value,
            slot: Some(slot),
        }
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.value
    }

    /// The permit slot of a semaphore permit's token (0 to N-1); `None` for any other lock's.
    /// Tokens of two slots are not compared with each other: each slot has its own mark.
    pub const fn slot(self) -> Option<u32> {
        self.slot
    }
}

/// The value; a permit's token adds its slot: `1795935530932001 (permit slot 2)`. Stores
/// take [`get`](FencingToken::get) (and the slot, where it has one), not this text.
impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)?;
        match self.slot {
            Some(slot) => write!(f, " (permit slot {slot})"),
            None => Ok(()),
        }
    }
}

impl From<u64> for FencingToken {
    fn from(value: u64) -> Self {
        FencingToken::new(value)
    }
}

/// The value, without the slot.
impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.value
    }
}

/// The value, without the slot.
impl TryFrom<FencingToken> for i64 {
    type Error = std::num::TryFromIntError;

    /// Every token distlock mints fits; only a token made by hand above `i64::MAX` fails.
    fn try_from(token: FencingToken) -> Result<Self, Self::Error> {
        i64::try_from(token.value)
    }
}

/// The value, sent as its decimal digits, as Redis keeps integers (the slot is not sent: a
/// store that keeps one mark per slot takes it apart).
impl redis::ToRedisArgs for FencingToken {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        self.value.write_redis_args(out)
    }
}

impl redis::ToSingleRedisArg for FencingToken {}
