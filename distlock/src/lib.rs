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
//!     .fencing(true) // optional: a fencing token for the resource the lock protects
//!     .acquire()
//!     .await?;
//! println!("holding {} with fencing token {:?}", guard.name(), guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! With the attributes, the same lock around a whole `async fn` (the key's `<id>` names a
//! parameter and is checked at compile time; the fn's error type takes `From<distlock::Error>`):
//!
//! ```ignore
//! #[distlock::distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s")]
//! async fn pay(id: u64, amount: u64) -> Result<Receipt, AppError> { /* ... */ }
//! ```
//!
//! # Modes
//!
//! * [`Client::lock`]: `setnx`, the lock of seeds 000-003 done right: `SET key token NX PX ttl`
//!   with 126 random bits per acquisition (one plain command unless a fencing token is asked
//!   for; a caller that does not wait adds `GET`, Redis 7.0 or later, to learn who holds
//!   it); release and extension check the token atomically.
//!   The same task asking again gets [`Error::Reentrant`] at once instead of a self-deadlock.
//! * [`Client::reentrant`]: a hash of owner -> hold count (seeds 002, 003), owned by the Tokio
//!   task (see [`LockContext`]); nested acquisitions in one task re-enter.
//! * [`Client::read`] / [`Client::write`]: a read/write lock (seed 004, without its flaws):
//!   many readers or one writer, per task and reentrant, in one hash per name. Each reader's
//!   lease expires on its own (server time), so a crashed reader blocks writers only until its
//!   own ttl; a waiting writer keeps new readers out, so readers cannot starve it; a writer may
//!   downgrade to read, and a reader asking to upgrade gets [`Error::Upgrade`] at once.
//! * [`Client::quorum`]: Redlock (seed 000) over N independent masters: [`Client::lock`] on
//!   such a client needs a majority, asked in parallel, with validity = ttl - elapsed - drift.
//!
//! # Deployments
//!
//! [`Client::connect`] (one node), [`Client::sentinel`] (the master Sentinel names, followed
//! across failovers), [`Client::cluster`] (Redis Cluster: every lock's keys in one slot,
//! sharded pub/sub wake-ups) and [`Client::quorum`] (Redlock). On Sentinel and Cluster,
//! replication is asynchronous: [`ClientBuilder::replicas`] / [`LockRequest::replicas`]
//! make each acquisition wait for replicas to confirm it ([`Replicas`] says what that does
//! and does not promise).
//!
//! Every mode shares one acquire loop, one wake-up mechanism (waiters sleep until a release is
//! published, capped by the holder's remaining lease), one watchdog (renews held leases in one
//! pipeline per node per tick; a lease that cannot be renewed is reported **lost** through
//! [`Guard::is_held`] and [`Guard::lost`]) and fencing tokens ([`Guard::fencing_token`], minted
//! only for acquisitions that ask: [`LockRequest::fencing`]).

//! # What a lock promises
//!
//! While [`Guard::is_held`] is true, no other owner holds the lock, provided the Redis server
//! keeps its data and its clock runs at about the rate of ours (1 % + 2 ms is allowed for).
//! A lease can end while the holder is stalled (a GC pause, a frozen VM): no lease-based lock
//! can prevent that. Take the lock with [`LockRequest::fencing`], pass
//! [`Guard::fencing_token`] to the protected resource and let it refuse smaller tokens; that
//! closes the gap. Tokens keep increasing across a server restart
//! without persistence (a new counter starts at the server's clock in microseconds).
//!
//! Under faults the promise rests on one rule: every call names the **acquisition** it
//! belongs to, and the scripts check it. A call whose reply was lost is simply sent again and
//! is not counted twice; a guard left from an earlier tenure cannot release or prolong the
//! owner's new hold; a dropped `acquire()` or `release()` future is finished in the
//! background, so a cancelled call never leaves the lock taken until its ttl. A renewal never
//! shortens a lease, and a guard never trusts a longer lease than the server reported.
//!
//! # Keys
//!
//! A lock named `order:42` lives at `distlock:{order:42}` (the prefix is configurable), with a
//! fencing counter (written only by acquisitions that ask for a token) at
//! `distlock:{order:42}:fence` in the same Redis Cluster slot. A name that
//! already carries a hash tag (`order:{42}`) keeps it. Names must be non-empty UTF-8, at most
//! 8 KiB by default. Each process that takes locks also keeps a small record at
//! `distlock:{<tag>}:process` (host, pid, call sites), which the short holder description
//! stored with each hold points to, for [`Client::inspect`]; it expires a day after its last
//! write.
#![warn(missing_docs)]

mod algorithm;
mod client;
mod conn;
mod context;
mod error;
mod guard;
mod handoff;
mod holders;
mod inspect;
mod key;
mod lease;
mod lock;
mod notify;
mod probe;
mod quorum;
mod reentrant;
mod rwlock;
mod setnx;
mod telemetry;
mod token;
mod wait;
mod watchdog;

pub use client::{
    default_client, default_quorum_client, set_default, Client, ClientBuilder, Replicas,
    DEFAULT_CONNECTIONS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_KEY_LEN, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT, MAX_CONNECTIONS,
};
pub use context::LockContext;
pub use error::{Error, NodeError, Op, Result};
pub use guard::Guard;
pub use inspect::{ForcedUnlock, Holder, LockInfo, LockMode, Reader, FORCED_RECORD_KEPT};
pub use lease::{MAX_TTL, MIN_TTL};
pub use lock::{LockRequest, DEFAULT_TTL, DEFAULT_WAIT};

/// The lock attributes, re-exported so users depend on this crate alone: each turns an
/// `async fn` into acquire, watchdog renewal, body, release. See their own docs for the
/// arguments and their defaults.
pub use distlock_macros::{distributed_lock, read_lock, write_lock};

// Runtime support for the lock attributes: the code they generate calls `__private::run`.
// `Lease` and `lease()` are the part a locked body uses directly.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub use __private::{lease, Lease};

// The `distlock` command's logic (feature `cli`), a module so the tests can drive it.
#[cfg(feature = "cli")]
#[doc(hidden)]
#[path = "cli.rs"]
pub mod __cli;

// Entry points for the `cargo fuzz` targets in `fuzz/` (feature `fuzzing`, off by default) and
// for the corpus tests that run under `cargo test`. Not an API: hidden, unstable, may go away.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
#[path = "fuzz.rs"]
pub mod __fuzz;
