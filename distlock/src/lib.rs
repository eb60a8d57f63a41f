//! Distributed locks on Redis for async Rust services: exclusive, reentrant, read/write and
//! Redlock locks, and counting semaphores, with fencing tokens, lease renewal and wake-up on
//! release, by hand or as an attribute on an `async fn`.
//!
//! ```sh
//! cargo add distlock
//! cargo add tokio --features rt-multi-thread,macros
//! ```
//!
//! distlock runs on Tokio (a multi-thread or a current-thread runtime). Minimum Rust version:
//! 1.88. Redis: 6.2 or later (7.0 for wake-ups on a Redis Cluster; see
//! [the deployments guide](guide::deployments#redis-versions)), run with
//! `maxmemory-policy noeviction`.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use distlock::{Client, Error};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let locks = Client::connect("redis://127.0.0.1:6379").await?;
//!
//!     let request = locks
//!         .lock("invoice:7") // the lock name
//!         .ttl(Duration::from_secs(10)) // the lease, renewed every ttl/3 while held
//!         .wait(Duration::from_secs(2)); // how long to wait for a busy lock
//!     match request.acquire().await {
//!         Ok(guard) => {
//!             // ... the work the lock protects ...
//!             guard.release().await?;
//!         }
//!         Err(Error::Busy { .. } | Error::Timeout { .. }) => println!("someone else is on it"),
//!         Err(e) if e.is_transient() => println!("Redis unreachable, nothing ran: {e}"),
//!         Err(e) => return Err(e.into()),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! With the attributes, the same lock around a whole `async fn`. The key template's `<id>`
//! names a parameter, checked at compile time, and each call renders it into the lock name;
//! the fn's error type takes `From<distlock::Error>`, and the client is the one given to
//! [`set_default`] unless `client = ..` names one:
//!
//! ```no_run
//! use distlock::distributed_lock;
//!
//! enum AppError {
//!     Lock(distlock::Error),
//! }
//!
//! impl From<distlock::Error> for AppError {
//!     fn from(e: distlock::Error) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//!
//! /// At most one payment per order at a time, across every process.
//! #[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s")]
//! async fn pay(id: u64, amount: u64) -> Result<(), AppError> {
//!     // ... charge `amount` for order `id` ...
//!     Ok(())
//! }
//! ```
//!
//! # Feature flags
//!
//! | feature | adds |
//! |---|---|
//! | `tls` | `rediss://` URLs (rustls; webpki roots, or your CA through [`ClientBuilder::tls_root_certificate`](ClientBuilder)) |
//! | `metrics` | lock metrics through the `metrics` facade ([the names](guide::operations#metrics)) |
//! | `axum` | `impl IntoResponse for Error`, with the status of [`Error::http_status`] and a body that names nothing internal; `HandlerError`, a handler's error type that any error converts into |
//! | `cli` | the `distlock` command for operators: `cargo install distlock --features cli` |
//! | `testing` | for `[dev-dependencies]`: a throwaway Redis per test, faults on demand, lock assertions (`distlock::testing`; the guide: `docs/testing.md`) |
//! | `postgres` | `fenced::postgres`: PostgreSQL tables that refuse a write carrying an older fencing token (a trigger), fenced upserts and updates (tokio-postgres) |
//!
//! # Modes
//!
//! * [`Client::lock`]: an exclusive lock, the classic Redis lock done right:
//!   `SET key token NX PX ttl` with 126 random bits per acquisition (one plain command unless a
//!   fencing token is asked for; a caller that does not wait adds `GET` to learn who holds it,
//!   on Redis 7.0 or later, and runs the acquire script instead on 6.2); release and extension
//!   check the token atomically. The same task
//!   asking again gets [`Error::Reentrant`] at once instead of a self-deadlock.
//! * [`Client::reentrant`]: an exclusive lock owned by the Tokio task (see [`LockContext`]):
//!   nested acquisitions in one task re-enter; one hash per lock with its owner and a field per
//!   live acquisition.
//! * [`Client::read`] / [`Client::write`]: a read/write lock: many readers or one writer, per
//!   task and reentrant, in one hash per lock name. Each reader's lease expires on its own
//!   (server time), so a crashed reader blocks writers only until its own ttl; a waiting writer
//!   keeps new readers out, so readers cannot starve it; a writer may downgrade to read, and a
//!   reader asking to upgrade gets [`Error::Upgrade`] at once.
//! * [`Client::semaphore`]: a counting semaphore: up to N holders at once, each permit with
//!   a lease of its own (server time), so a crashed holder frees its one permit at its own
//!   ttl; holders that disagree on N get [`Error::PermitsMismatch`].
//! * [`Client::quorum`]: Redlock over N independent masters: [`Client::lock`] on such a client
//!   needs a majority, asked in parallel, with validity = ttl - elapsed - drift.
//! * [`Client::election`]: leader election on the exclusive lock: `campaign()` waits until
//!   this process leads (`try_campaign()`: one attempt), and its [`Leadership`] has a term
//!   (the fencing token) and reports its loss before the server's lease ends; `observe()`
//!   follows who leads.
//! * [`Client::lock_many`]: several exclusive locks at once, all or none, in one fixed order
//!   (no deadlock whatever the callers' orders; a waiter holds none of them); each name is
//!   the same lock as [`Client::lock`] of it. The attribute takes a list:
//!   `#[distributed_lock(key = ["account:<from>", "account:<to>"])]`.
//!
//! How each works: [the design guide](guide::design).
//!
//! # Deployments
//!
//! [`Client::connect`] (one node), [`Client::sentinel`] (the master Sentinel names, followed
//! across failovers), [`Client::cluster`] (Redis Cluster: every lock's Redis keys in one slot,
//! sharded pub/sub wake-ups) and [`Client::quorum`] (Redlock). On Sentinel and Cluster,
//! replication is asynchronous: [`ClientBuilder::replicas`] / [`LockRequest::replicas`]
//! make each acquisition wait for replicas to confirm it ([`Replicas`] says what that does
//! and does not promise). What each deployment keeps through a failure:
//! [the deployments guide](guide::deployments).
//!
//! Every mode shares one acquire loop, one wake-up mechanism (waiters sleep until a release is
//! published, capped by the holder's remaining lease), one watchdog (renews held leases in one
//! pipeline per node per tick; a lease that cannot be renewed is reported **lost** through
//! [`Guard::is_held`] and [`Guard::lost`]) and fencing tokens ([`Guard::fencing_token`], minted
//! only for acquisitions that ask: [`LockRequest::fencing`]).
//!
//! # Errors
//!
//! Every failure is an [`Error`], whose predicates say what a caller can do:
//! [`is_contended`](Error::is_contended) (someone else holds the lock; nothing ran),
//! [`is_transient`](Error::is_transient) (Redis unreachable; nothing ran),
//! [`is_outcome_unknown`](Error::is_outcome_unknown) (the lease was lost while the work ran: do
//! not repeat it blindly), and [`http_status`](Error::http_status) maps them to HTTP. A locked fn
//! whose body returned `Ok` after its lease was lost returns [`Error::LeaseLost`]: `Ok` from a
//! locked fn means it ran to its end under the lock.
//!
//! # What a lock promises
//!
//! While [`Guard::is_held`] is true, no other owner holds the lock, provided the Redis server
//! keeps its data and its clock runs at about the rate of ours (1 % + 2 ms is allowed for).
//! A lease can end while the holder is stalled (a GC pause, a frozen VM): no lease-based lock
//! can prevent that. Take the lock with [`LockRequest::fencing`], pass
//! [`Guard::fencing_token`] to the protected resource and let it refuse smaller tokens; that
//! closes the gap, and [`fenced`] does it for Redis and PostgreSQL (a locked fn passes
//! [`lease()`] to the write). Tokens keep increasing across a server restart
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
//! Each lock name maps to Redis keys under the client's prefix (`distlock` by default), all in
//! one Redis Cluster slot: `order:42` lives at `distlock:{order:42}`. A name may be any UTF-8
//! text, non-empty and at most 8 KiB by default ([`ClientBuilder::max_name_len`]), braces, `#`
//! and suffixes such as `:fence` included: names come from request data, so no name reaches
//! another name's lock, a key kept beside any lock, or another lock's wake-up channel. A name
//! with its own hash tag (`order:{42}`) keeps it and so chooses its slot. Every key the
//! library writes expires. The Redis keys, what each holds and how long it lives:
//! [Keys](guide::operations#keys).
//!
//! # Guides
//!
//! [Vocabulary](guide::vocabulary) (every primitive side by side: what you get, its guard, how
//! it waits, its single attempt, what a drop does, its token),
//! [Operations](guide::operations) (traces, metrics, inspection, the CLI, least privilege,
//! keys, scheduled jobs), [Deployments](guide::deployments) (and the failure model),
//! [Design](guide::design), [Verification](guide::verification), [Fencing](guide::fencing)
//! (refusing a stalled holder's writes, in Redis, PostgreSQL or any store). The attributes' arguments:
//! [`distributed_lock`].
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
mod channels;
mod client;
mod config;
mod conn;
mod context;
mod election;
mod error;
pub mod fenced;
mod guard;
mod handoff;
mod holds;
mod identity;
mod inspect;
mod key;
mod lease;
mod lease_view;
mod lock;
mod majority;
mod many;
mod mode;
mod nodes;
mod notify;
mod probe;
mod reentrant;
mod release;
mod runtime;
mod rwlock;
mod semaphore;
mod setnx;
mod sync;
mod tasks;
mod telemetry;
mod token;
mod wait;
mod watchdog;

pub use client::{
    default_client, default_quorum_client, scope_default, set_default, Client, ClientBuilder,
};
pub use config::{
    Replicas, DEFAULT_CONNECTIONS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_NAME_LEN, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT, DEFAULT_RESTART_DELAY, DEFAULT_TTL, DEFAULT_WAIT, MAX_CONNECTIONS,
};
pub use context::LockContext;
pub use election::{Election, Leader, Leadership};
#[cfg(feature = "axum")]
pub use error::HandlerError;
pub use error::{Error, LockName, NodeError, Op, Result};
pub use guard::Guard;
pub use inspect::{ForcedUnlock, Holder, LockInfo, PermitHolder, ReadHolder, FORCED_RECORD_KEPT};
#[allow(deprecated)]
pub use inspect::{Permit, Reader};
pub use lease::{MAX_TTL, MIN_TTL};
pub use lease_view::{lease, Lease};
pub use lock::LockRequest;
pub use mode::{LockMode, Primitive};
pub use runtime::Shutdown;
pub use token::FencingToken;

pub mod guide;

#[cfg(all(feature = "testing", unix))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// The error of the `redis` crate this one is built on, which [`Error::Redis`] carries: named
/// here so that an application using another version of `redis` (or none) can still name it.
/// (Only this type: re-exporting the whole `redis` crate would make the compiler spell common
/// types by their full paths in every compile error of an application that uses this crate.)
pub use redis::RedisError;

/// The lock attributes, re-exported so users depend on this crate alone: each turns an
/// `async fn` into acquire, watchdog renewal, body, release. See their own docs for the
/// arguments and their defaults.
#[doc(inline)]
pub use distlock_macros::{distributed_lock, read_lock, semaphore, write_lock};

// Runtime support for the lock attributes: the code they generate calls `__private::run`.
#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;

// The `distlock` command's logic (feature `cli`), a module so the tests can drive it.
#[cfg(feature = "cli")]
#[doc(hidden)]
#[path = "cli.rs"]
pub mod __cli;

// The README's Rust blocks, compiled (and run where not `no_run`) by `cargo test --doc`; its axum
// handler only with the `axum` feature, which the workspace's `cargo test --doc` turns on.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Entry points for the `cargo fuzz` targets in `fuzz/` (feature `_fuzzing`, off by default) and
// for the corpus tests that run under `cargo test`. Not an API: hidden, unstable, may go away.
#[cfg(any(test, feature = "_fuzzing"))]
#[doc(hidden)]
#[path = "fuzz.rs"]
pub mod __fuzz;

// Process-wide switches for the project's own tests (feature `_test_hooks`, which only the test
// kit's dev-dependencies turn on). Not an API: hidden, unstable, absent from every other build.
#[cfg(feature = "_test_hooks")]
#[doc(hidden)]
#[path = "test_hooks.rs"]
pub mod __test_hooks;
