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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// A token of this value (one read back from a store, say).
    pub const fn new(value: u64) -> FencingToken {
        FencingToken(value)
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for FencingToken {
    fn from(value: u64) -> Self {
        FencingToken(value)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}

impl TryFrom<FencingToken> for i64 {
    type Error = std::num::TryFromIntError;

    /// Every token distlock mints fits; only a token made by hand above `i64::MAX` fails.
    fn try_from(token: FencingToken) -> Result<Self, Self::Error> {
        i64::try_from(token.0)
    }
}

/// Sent as its decimal digits, as Redis keeps integers.
impl redis::ToRedisArgs for FencingToken {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        self.0.write_redis_args(out)
    }
}

impl redis::ToSingleRedisArg for FencingToken {}
