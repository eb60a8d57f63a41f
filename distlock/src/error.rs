//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

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
/// Every variant carries the lock's key (shortened for display when it is very long) and the
/// context needed to act on it. [`Error::is_retryable`] tells transient conditions (busy,
/// timeout, a dropped connection) from mistakes that will fail again (a bad key or config).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A single attempt (`wait` of zero) found the lock held by someone else.
    #[error("lock `{key}` is held by another owner")]
    Busy {
        /// The lock's name.
        key: String,
    },

    /// The lock stayed busy for the whole wait.
    #[error("lock `{key}` still busy after waiting {waited:?} ({attempts} attempts)")]
    Timeout {
        /// The lock's name.
        key: String,
        /// How long the caller waited.
        waited: Duration,
        /// How many acquire attempts were sent.
        attempts: u32,
    },

    /// The lease ended while the holder still believed it held the lock: renewal was refused
    /// or did not succeed before the lease ran out. Anything done after this point may overlap
    /// with the next holder; fencing tokens let a resource refuse such late writes.
    #[error("lease on `{key}` was lost after holding it for {held_for:?}")]
    LeaseLost {
        /// The lock's name.
        key: String,
        /// How long the lock had been held when the loss was noticed.
        held_for: Duration,
    },

    /// A release or extension was refused because the lock is no longer ours (it expired and
    /// may have been taken by another owner, whose hold was left untouched).
    #[error("lock `{key}` is not held by this owner (expired or taken over)")]
    NotOwner {
        /// The lock's name.
        key: String,
    },

    /// Fewer than a majority of the quorum's nodes granted the request in time.
    #[error("quorum not reached for `{key}`: {acked} of {needed} needed nodes agreed{}", fmt_node_errors(.errors))]
    QuorumNotReached {
        /// The lock's name.
        key: String,
        /// How many nodes granted the request.
        acked: usize,
        /// How many were needed (a majority).
        needed: usize,
        /// Why the others did not.
        errors: Vec<NodeError>,
    },

    /// A non-reentrant lock was requested again by the task that already holds it; waiting
    /// would deadlock, so the request fails at once.
    #[error("lock `{key}` is already held by this task and is not reentrant (use a reentrant lock to nest)")]
    Reentrant {
        /// The lock's name.
        key: String,
    },

    /// A task holding only the read lock asked for the write lock of the same name. Refused at
    /// once: two readers upgrading at the same time would each wait for the other forever.
    #[error("lock `{key}` is held for reading by this task and cannot be upgraded to write: release the read lock first, or take the write lock from the start")]
    Upgrade {
        /// The lock's name.
        key: String,
    },

    /// The key holds a value that is not one of this library's locks (another type, or a plain
    /// string without expiry). It was left untouched.
    #[error("a key of lock `{key}` holds a {found}, not lock data; it was left untouched (choose another lock name or key prefix)")]
    WrongType {
        /// The lock's name.
        key: String,
        /// What the key holds.
        found: String,
    },

    /// The name is held as a lock of another mode (a `setnx` lock asked for as `reentrant`, a
    /// read/write lock asked for as `setnx`, ...). One name is one lock of one mode: the modes
    /// keep different data under the key and cannot exclude each other. Nothing was changed.
    #[error("lock `{key}` is in use as a {held_as} lock and was asked for as {requested}: one name must be used with one lock mode")]
    ModeConflict {
        /// The lock's name.
        key: String,
        /// The mode the name is held in.
        held_as: String,
        /// The mode that was asked for.
        requested: &'static str,
    },

    /// The lock name cannot be used.
    #[error("invalid lock name `{key}`: {reason}")]
    InvalidKey {
        /// The lock's name (shortened).
        key: String,
        /// Why it was refused.
        reason: String,
    },

    /// Replica acknowledgement was asked for ([`Replicas`](crate::Replicas)) and fewer
    /// replicas than wanted confirmed the acquisition within the timeout. The acquisition was
    /// undone (released with its own id) before this was returned: the lock is not held.
    #[error("lock `{key}`: {confirmed} of {wanted} replicas confirmed the acquisition within {timeout:?}; it was undone")]
    ReplicasNotConfirmed {
        /// The lock's name.
        key: String,
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

    /// A locked function was called without `client = ..` and no default client was set.
    #[error(
        "no lock client: call distlock::set_default(client) at start-up or pass `client = ..`"
    )]
    NoClient,

    /// Redis failed or could not be reached.
    #[error("redis error during {op}{}: {source}", fmt_key(.key))]
    Redis {
        /// What was being done.
        op: Op,
        /// The lock's name, when the failure concerns one lock.
        key: Option<String>,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },
}

fn fmt_key(key: &Option<String>) -> String {
    key.as_ref()
        .map(|k| format!(" of `{k}`"))
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
    /// True when trying the same operation again later may succeed: the lock was busy, the
    /// wait ran out, a lease was lost, a quorum was short, or the connection failed. False for
    /// mistakes that will fail again the same way (bad key, bad config, wrong type, no client).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Busy { .. } | Error::Timeout { .. } | Error::LeaseLost { .. } => true,
            // A replica that is slow or resyncing may confirm the next time.
            Error::ReplicasNotConfirmed { .. } => true,
            // Only if every node's failure may pass: a majority out of memory or holding
            // the application's data fails the same way on every try.
            Error::QuorumNotReached { errors, .. } => errors.iter().all(|e| e.retryable),
            Error::Redis { source, .. } => is_transient(source),
            // Fails the same way until the task releases its read lock.
            Error::Upgrade { .. } => false,
            _ => false,
        }
    }

    /// The lock's name this error concerns, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Error::Busy { key }
            | Error::Timeout { key, .. }
            | Error::LeaseLost { key, .. }
            | Error::NotOwner { key }
            | Error::QuorumNotReached { key, .. }
            | Error::Reentrant { key }
            | Error::Upgrade { key }
            | Error::WrongType { key, .. }
            | Error::ModeConflict { key, .. }
            | Error::ReplicasNotConfirmed { key, .. }
            | Error::InvalidKey { key, .. } => Some(key),
            Error::Redis { key, .. } => key.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn redis(op: Op, key: &str, source: redis::RedisError) -> Self {
        Error::Redis {
            op,
            key: Some(key.to_owned()),
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
