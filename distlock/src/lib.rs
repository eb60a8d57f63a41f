//! Distributed locks on Redis.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock::Error> {
//! use std::time::Duration;
//!
//! let locks = distlock::Client::connect("redis://127.0.0.1:6379").await?;
//! let guard = locks
//!     .lock("order:42")
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(2))
//!     .acquire()
//!     .await?;
//! println!("holding {} with fencing token {}", guard.name(), guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Modes
//!
//! * [`Client::lock`]: `setnx`, the lock of seeds 000-003 done right: `SET key token NX PX ttl`
//!   with 128 random bits per acquisition; release and extension check the token atomically.
//! * [`Client::read`] / [`Client::write`]: a read/write lock (seed 004, without its flaws):
//!   many readers or one writer, per task and reentrant, in one hash per name. Each reader's
//!   lease expires on its own (server time), so a crashed reader blocks writers only until its
//!   own ttl; a waiting writer keeps new readers out, so readers cannot starve it; a writer may
//!   downgrade to read, and a reader asking to upgrade gets [`Error::Upgrade`] at once.
//!
//! # What a lock promises
//!
//! While [`Guard::is_held`] is true, no other owner holds the lock, provided the Redis server
//! keeps its data and its clock runs at about the rate of ours (1 % + 2 ms is allowed for).
//! A lease can end while the holder is stalled (a GC pause, a frozen VM): no lease-based lock
//! can prevent that. Pass [`Guard::fencing_token`] to the protected resource and let it
//! refuse smaller tokens; that closes the gap.
//!
//! # Keys
//!
//! A lock named `order:42` lives at `distlock:{order:42}` (the prefix is configurable), with a
//! fencing counter at `distlock:{order:42}:fence` in the same Redis Cluster slot. A name that
//! already carries a hash tag (`order:{42}`) keeps it. Names must be non-empty UTF-8, at most
//! 8 KiB by default.
#![warn(missing_docs)]

mod algorithm;
mod client;
mod context;
mod error;
mod guard;
mod key;
mod lease;
mod lock;
mod notify;
mod quorum;
mod reentrant;
mod rwlock;
mod setnx;
mod token;
mod wait;
mod watchdog;

pub use client::{
    default_client, set_default, Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_KEY_LEN, DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT,
};
pub use context::LockContext;
pub use error::{Error, NodeError, Op, Result};
pub use guard::Guard;
pub use lease::{MAX_TTL, MIN_TTL};
pub use lock::{LockRequest, DEFAULT_TTL, DEFAULT_WAIT};

/// The lock attributes, re-exported so users depend on this crate alone. Their argument
/// parsing and compile-time checks are in place; code generation is not written yet, so a
/// correctly written attribute currently stops the build with a message saying so (a body
/// must never run without its lock).
pub use distlock_macros::{distributed_lock, read_lock, write_lock};

