//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::majority::Majority;
use crate::mode::LockMode;
use crate::token::FencingToken;

#[cfg(feature = "axum")]
mod http;
mod name;

#[cfg(feature = "axum")]
pub use http::HandlerError;
pub use name::LockName;

/// What the library was doing when Redis failed; carried by [`Error::Redis`] so a log line
/// says whether a lock may still be held (a failed release) or was never taken (a failed acquire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Opening the connection.
    Connect,
    /// Taking a lock.
    Acquire,
    /// Renewing a held lease (by hand or by the watchdog).
    Extend,
    /// Giving a lock back.
    Release,
    /// Reading a lock's state or listing locks, for operators.
    Inspect,
    /// Removing a lock by force.
    ForceUnlock,
    /// Writing to a resource fenced by tokens ([`FencedRedis`](crate::fenced::FencedRedis)).
    FencedWrite,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Connect => "connect",
            Op::Acquire => "acquire",
            Op::Extend => "extend",
            Op::Release => "release",
            Op::Inspect => "inspect",
            Op::ForceUnlock => "force unlock",
            Op::FencedWrite => "fenced write",
        })
    }
}

/// Why one node of a quorum did not grant a request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeError {
    /// The node's address, with any password removed.
    pub node: String,
    /// What went wrong there.
    pub reason: String,
    /// Whether the failure may pass by itself (a timeout, a dropped connection, a node kept
    /// out after a restart) rather than repeat on every try (a key of the wrong type, the
    /// server out of memory or read-only, a script it cannot load).
    pub retryable: bool,
}

/// Everything that can go wrong with a lock.
///
/// Every variant carries the lock's name (shortened for display when it is very long) and
/// the context needed to act on it. The name is a [`LockName`]: it knows what it names, and
/// the message says so (``semaphore `pool` is held by another owner``,
/// ``election `scheduler` was not taken: ...``, ``read lock `doc:7` ...``). What a caller can do about an error falls in four
/// groups, each with its predicate:
///
/// | group | variants | did the protected work run? | retry? |
/// |---|---|---|---|
/// | [contended](Error::is_contended): someone else holds the lock | `Busy`, `Timeout` | no | yes, later |
/// | [transient](Error::is_transient): Redis unreachable or unsure | `Redis` (a transport failure), `QuorumNotReached`, `ReplicasNotConfirmed` | no, when acquiring | yes, once Redis is back |
/// | [outcome unknown](Error::is_outcome_unknown): the lease ended during the work | `LeaseLost` | maybe, in part | **not blindly**: check what was done |
/// | a mistake that fails the same way every time | the others | no | no: fix the code or configuration |
///
/// A fenced write's refusal ([`StaleToken`](Error::StaleToken): a newer holder wrote) and a
/// fenced store's own failure ([`Store`](Error::Store)) are in none of the groups.
///
/// [`is_retryable`](Error::is_retryable) is contended or transient: retrying the same call
/// is safe and may succeed. [`http_status`](Error::http_status) maps the groups to HTTP, and
/// with the `axum` feature `Error` is an `IntoResponse` using that mapping (its body says what
/// the status means, nothing internal) and `HandlerError` a ready error type for handlers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A single attempt (`wait` of zero) found the lock held by someone else.
    #[error("{} is held by another owner", .name.described())]
    Busy {
        /// The lock's name.
        name: LockName,
    },

    /// The lock stayed busy for the whole wait.
    #[error("{} still busy after waiting {waited:?}{}", .name.described(), fmt_attempts(*.attempts))]
    Timeout {
        /// The lock's name.
        name: LockName,
        /// How long the caller waited.
        waited: Duration,
        /// How many acquire attempts it sent. Zero when it waited its whole wait in line
        /// behind the tasks of this process that wait for the same lock: they go first (one
        /// attempt serves them all, and a release passes the lock among them).
        attempts: u32,
    },

    /// The lease ended while the holder still believed it held the lock: renewal was refused
    /// or did not succeed before the lease ran out. Anything done after this point may overlap
    /// with the next holder; fencing tokens let a resource refuse such late writes.
    ///
    /// The outcome of the work the lock protected is **unknown**: it may have run in part or
    /// to its end (a locked fn whose body returned `Ok` after the loss returns this). It is not
    /// [retryable](Error::is_retryable): repeating a non-idempotent operation (a payment, a
    /// deposit) could apply it twice. Check what was done first.
    #[error("lease on {} was lost after holding it for {held_for:?}", .name.described())]
    LeaseLost {
        /// The lock's name.
        name: LockName,
        /// How long the lock had been held when the loss was noticed.
        held_for: Duration,
    },

    /// A release or extension was refused because the lock is no longer ours (it expired and
    /// may have been taken by another owner, whose hold was left untouched).
    #[error("{} is not held by this owner (expired or taken over)", .name.described())]
    NotOwner {
        /// The lock's name.
        name: LockName,
    },

    /// Fewer than a majority of the quorum's nodes granted the request in time.
    #[error("quorum not reached for {}: {acked} of {needed} needed nodes agreed{}", .name.described(), fmt_node_errors(.errors))]
    QuorumNotReached {
        /// The lock's name.
        name: LockName,
        /// How many nodes granted the request.
        acked: usize,
        /// How many were needed (a majority).
        needed: usize,
        /// How many nodes the quorum has.
        nodes: usize,
        /// Why the others did not.
        errors: Vec<NodeError>,
    },

    /// A non-reentrant lock was requested again by the task that already holds it; waiting
    /// would deadlock, so the request fails at once.
    #[error("{} is already held by this task and is not reentrant (use a reentrant lock to nest)", .name.described())]
    Reentrant {
        /// The lock's name.
        name: LockName,
    },

    /// A task holding only the read lock asked for the write lock of the same name. Refused at
    /// once: two readers upgrading at the same time would each wait for the other forever.
    #[error("{} cannot be taken: this task holds the read lock of the name, which cannot be upgraded to write; release the read lock first, or take the write lock from the start", .name.described())]
    Upgrade {
        /// The lock's name.
        name: LockName,
    },

    /// The key holds a value that is not one of this library's locks (another type, or a plain
    /// string without expiry). It was left untouched.
    #[error("a key of {} holds a {found}, not lock data; it was left untouched (choose another lock name or key prefix)", .name.described())]
    WrongType {
        /// The lock's name.
        name: LockName,
        /// What the key holds.
        found: String,
    },

    /// The name is used in two modes: it is held as a lock of one mode and was asked for as
    /// another (a `setnx` lock asked for as `reentrant`, a read/write lock asked for as
    /// `setnx`, ...). **One name, one mode**: the modes keep different data under the key and
    /// cannot exclude each other, so the second use is refused rather than let in beside the
    /// first. Nothing was changed.
    ///
    /// It shows only when the two uses meet, under concurrency, so a test that runs them one
    /// after the other passes. The fix is in the code that takes the name: take every use of
    /// it in one mode. The common case is a name written with
    /// [`Client::write`](crate::Client::write) (or read with
    /// [`Client::read`](crate::Client::read)) and also taken in a set with
    /// [`Client::lock_many`](crate::Client::lock_many), whose names are exclusive (`setnx`)
    /// locks: take the set with [`Client::write_many`](crate::Client::write_many) instead
    /// (`#[write_lock(key = [..])]` rather than `#[distributed_lock(key = [..])]`).
    #[error("{} is used in two modes: held as a {held_as} lock, asked for as {requested}; locks of different modes cannot exclude each other. Take every use of one name in one mode (a set of names that are elsewhere taken with `write` or `read`: `write_many`, not `lock_many`)", .name.described())]
    ModeConflict {
        /// The lock's name.
        name: LockName,
        /// The mode the name is held in.
        held_as: LockMode,
        /// The mode that was asked for.
        requested: LockMode,
    },

    /// A semaphore was asked for with another number of permits than its holders recorded
    /// ([`Client::semaphore`](crate::Client::semaphore)). Every holder of one name must ask
    /// for the same number: the limit is recorded by the holder that finds the name free and
    /// is never changed while a permit is held. Nothing was changed.
    #[error("{} was asked for with {permits} permits, but its holders use {recorded}: every holder of one name must ask for the same number of permits", .name.described())]
    PermitsMismatch {
        /// The semaphore's name.
        name: LockName,
        /// The number of permits this request asked for.
        permits: u32,
        /// The number of permits the current holders recorded.
        recorded: u32,
    },

    /// The lock name cannot be used.
    #[error("invalid {} name `{name}`: {reason}", .name.primitive())]
    InvalidName {
        /// The lock's name (shortened).
        name: LockName,
        /// Why it was refused.
        reason: String,
    },

    /// Replica acknowledgement was asked for ([`Replicas`](crate::Replicas)) and fewer
    /// replicas than wanted confirmed the acquisition within the timeout. The acquisition was
    /// undone (released with its own id) before this was returned: the lock is not held.
    #[error("{}: {confirmed} of {wanted} replicas confirmed the acquisition within {timeout:?}; it was undone", .name.described())]
    ReplicasNotConfirmed {
        /// The lock's name.
        name: LockName,
        /// How many replicas had to confirm.
        wanted: u32,
        /// How many did.
        confirmed: u32,
        /// How long the master waited for them.
        timeout: Duration,
    },

    /// A setting is out of range or inconsistent; nothing was sent to Redis.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// The client was shut down ([`Client::shutdown`](crate::Client::shutdown)) before the lock
    /// was taken: nothing ran under it. This client takes no more locks; another instance of
    /// the service may (an HTTP service answers 503 while it stops).
    #[error("{} was not taken: the client is shut down", .name.described())]
    ShutDown {
        /// The lock's name.
        name: LockName,
    },

    /// A fenced resource refused a write: it has seen a higher fencing token, so a newer
    /// holder of the lock took it and wrote after this holder's lease ended (the holder
    /// stalled: a pause, a frozen VM, a slow network). Nothing was written. Not retryable:
    /// the newer holder is in charge; take the lock again to write.
    #[error("a fenced write was refused: token {token} is below {highest}, the highest the resource has seen (a newer holder wrote)")]
    StaleToken {
        /// The token presented.
        token: FencingToken,
        /// The highest token the resource had seen.
        highest: FencingToken,
    },

    /// A fenced store other than Redis failed: the database of
    /// [`fenced::postgres`](crate::fenced) could not be reached, or refused the statement for
    /// a reason of its own (a missing table, a constraint, a serialization failure). Not a
    /// refusal by the fence, which is [`Error::StaleToken`].
    ///
    /// In none of the predicates' groups: whether the write happened, and whether to retry,
    /// is the store's to say (a connection lost during a commit may have committed it).
    /// `source` is the driver's error (a `tokio_postgres::Error`, for its SQLSTATE); answered
    /// as `500`, with a body that names nothing of it.
    #[error("the fenced store failed: {source}")]
    Store {
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A locked function was called without `client = ..` and no default client was set.
    #[error(
        "no lock client: call distlock::set_default(client) at start-up or pass `client = ..`"
    )]
    NoClient,

    /// Redis failed or could not be reached.
    #[error("redis error during {op}{}{}: {source}", fmt_name(.name), fmt_server(.server))]
    Redis {
        /// What was being done.
        op: Op,
        /// The lock's name, when the failure concerns one lock.
        name: Option<String>,
        /// The server's address (any password removed), when the failure concerns one server
        /// rather than one lock (connecting to it, checking it). For the service's logs: the
        /// HTTP answer an error makes never shows it.
        server: Option<String>,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },
}

fn fmt_name(name: &Option<String>) -> String {
    name.as_ref()
        .map(|n| format!(" of `{n}`"))
        .unwrap_or_default()
}

fn fmt_attempts(attempts: u32) -> String {
    match attempts {
        0 => " in line behind this process's other waiters for it (no attempt of its own sent)"
            .to_owned(),
        1 => " (1 attempt)".to_owned(),
        n => format!(" ({n} attempts)"),
    }
}

fn fmt_server(server: &Option<String>) -> String {
    server
        .as_ref()
        .map(|s| format!(" at {s}"))
        .unwrap_or_default()
}

fn fmt_node_errors(errors: &[NodeError]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.node, e.reason))
        .collect();
    format!(" ({})", parts.join("; "))
}

impl Error {
    /// True when another owner held the lock: a single attempt found it busy
    /// ([`Error::Busy`]) or it stayed busy for the whole wait ([`Error::Timeout`]). Nothing
    /// ran under the lock; trying again later may succeed.
    ///
    /// ```
    /// let busy = distlock::Error::Busy { name: "order:42".into() };
    /// assert!(busy.is_contended() && busy.is_retryable());
    /// ```
    pub fn is_contended(&self) -> bool {
        matches!(self, Error::Busy { .. } | Error::Timeout { .. })
    }

    /// True when Redis could not be reached or could not confirm the request in time: a
    /// transport failure ([`Error::Redis`] with a dropped connection, a timeout, a server
    /// loading or failing over), a quorum short of nodes that may come back
    /// ([`Error::QuorumNotReached`] unless so many nodes refused for good that no majority is
    /// left), replicas that did
    /// not confirm ([`Error::ReplicasNotConfirmed`]). An acquisition that failed this way did
    /// not take the lock and ran nothing; the same call may succeed once Redis is back.
    pub fn is_transient(&self) -> bool {
        match self {
            // A replica that is slow or resyncing may confirm the next time.
            Error::ReplicasNotConfirmed { .. } => true,
            // Only while a majority may still grant it: nodes that refused for good (out of
            // memory, the application's data at the key, read-only) will refuse every try.
            Error::QuorumNotReached {
                errors,
                needed,
                nodes,
                ..
            } => {
                let refusing = errors.iter().filter(|e| !e.retryable).count();
                debug_assert_eq!(Majority::of(*nodes).needed(), *needed);
                !Majority::of(*nodes).out_of_reach(refusing)
            }
            Error::Redis { source, .. } => is_transient(source),
            _ => false,
        }
    }

    /// True for [`Error::LeaseLost`]: the lease ended while the protected work ran, so
    /// whether and how far it ran is unknown. Not retryable as such.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }

    /// True when the same call may be made again and may succeed: the lock was
    /// [contended](Self::is_contended) or Redis [transient](Self::is_transient)ly
    /// unavailable, and nothing ran. False for a lost lease (the
    /// [outcome is unknown](Self::is_outcome_unknown)) and for mistakes that fail the same way
    /// every time (a bad name or configuration, the wrong type at the key, no client, a
    /// reentrant or upgrade misuse, a semaphore's permits that disagree).
    pub fn is_retryable(&self) -> bool {
        self.is_contended() || self.is_transient()
    }

    /// The HTTP status a service should answer with when a request fails with this error:
    /// `409 Conflict` for [contention](Self::is_contended) (nothing ran; the client may try
    /// again), `503 Service Unavailable` for [transient](Self::is_transient) failures (nothing
    /// ran; send `Retry-After`), `400 Bad Request` for a lock name the request made unusable
    /// ([`Error::InvalidName`]: names usually come from request data), and
    /// `503` too for a client [shut down](Error::ShutDown) (the service is stopping; nothing
    /// ran, another instance may serve the request), `409` for [`Error::StaleToken`] (the
    /// request lost to a newer holder's write, which the store kept: a conflict with the
    /// resource's current state, not a fault of the service; a resubmitted request takes the
    /// lock afresh, while the same write with the same token stays refused, so it is not
    /// [retryable](Self::is_retryable)), and
    /// `500 Internal Server Error` for everything else, a lost lease included: its outcome is
    /// unknown, and a client must not repeat a non-idempotent request because of it.
    ///
    /// With the `axum` feature, `Error` implements `IntoResponse` with this status (and
    /// `Retry-After: 1` on 503) and a body that names no lock, key or server.
    pub fn http_status(&self) -> u16 {
        if self.is_contended() || matches!(self, Error::StaleToken { .. }) {
            409
        } else if self.is_transient() || matches!(self, Error::ShutDown { .. }) {
            503
        } else if matches!(self, Error::InvalidName { .. }) {
            400
        } else {
            500
        }
    }

    /// The lock's name this error concerns, if any: `None` for a failure that concerns no one
    /// lock (connecting to a server, a setting, no client).
    pub fn name(&self) -> Option<&str> {
        match self {
            Error::Busy { name }
            | Error::Timeout { name, .. }
            | Error::LeaseLost { name, .. }
            | Error::NotOwner { name }
            | Error::QuorumNotReached { name, .. }
            | Error::Reentrant { name }
            | Error::Upgrade { name }
            | Error::WrongType { name, .. }
            | Error::ModeConflict { name, .. }
            | Error::PermitsMismatch { name, .. }
            | Error::ReplicasNotConfirmed { name, .. }
            | Error::InvalidName { name, .. }
            | Error::ShutDown { name } => Some(name.as_str()),
            Error::Redis { name, .. } => name.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn redis(op: Op, key: &str, source: redis::RedisError) -> Self {
        Error::Redis {
            op,
            name: Some(key.to_owned()),
            server: None,
            source,
        }
    }

    /// A failure to reach or check the server at `addr` (already without its password).
    pub(crate) fn server(op: Op, addr: &str, source: redis::RedisError) -> Self {
        Error::Redis {
            op,
            name: None,
            server: Some(addr.to_owned()),
            source,
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            reason: reason.into(),
        }
    }
}

/// A failure of the transport rather than of the request: the same request may succeed once
/// the connection is back. `READONLY` (the server was demoted in a failover), `MOVED` and
/// `ASK` (a Cluster slot moved or is moving) pass once the client follows the new topology.
pub(crate) fn is_transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some(
                "LOADING"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "READONLY"
                    | "MOVED"
                    | "ASK"
            )
        )
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
