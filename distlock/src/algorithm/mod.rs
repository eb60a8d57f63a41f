//! What a lock mode is: three scripts with one calling convention.
//!
//! Every mode's scripts take the same KEYS and ARGV and answer in the same shape, so the one
//! acquire loop, the lease, the guard and (for Redlock) the quorum layer run any mode without
//! knowing which it is. A mode is its `.lua` files plus a `static Algorithm`.
//!
//! | script  | KEYS                  | ARGV             | reply                                      |
//! |---------|-----------------------|------------------|--------------------------------------------|
//! | acquire | lock, then the mode's helpers, then the fencing counter if fencing, then (setnx) the waited-for mark if the caller waits | owner, ttl in ms, retry flag, want holder ttl, nonce, holder, fencing flag, waits flag (sent only when set, or for a semaphore), then (semaphore) the permits asked for | `{1, fence or -1}` / `{0, holder ms or -1}` / `{-1, type}` / `{-2, 'upgrade'}` / `{-3, mode}` / `{-4, recorded, asked}` (semaphore) |
//! | release | lock (its string is its channel), then the mode's helpers, then (setnx) the waited-for mark | owner, nonce, wake-up id, `s` to SPUBLISH, `1` to publish unmarked; trailing empty ones left off | `1` released / `0` not held |
//! | extend  | lock, then the mode's helpers | owner, ttl in ms, nonce | remaining ms (>= ttl) / `0` not held |
//!
//! A set of names (`Client::lock_many`, see `key::set`) is one hold on several locks: each
//! kind of key comes once per name, in the set's order (every lock key, then every fencing
//! counter, then every mark), and the answers that concern one name (busy, another type,
//! another mode) add its place in the set, from 1: `{0, holder ms, i}`, `{-1, type, i}`,
//! `{-3, mode, i}`. A single name is a set of one, so its calls are exactly the ones above.
//! Every key a script touches is one of its KEYS (Redis Cluster and ACL key patterns rely on
//! the declaration), and a key it does not touch on a call is not sent: each argument costs
//! the server work on every call (see `setnx/release.lua`). Keys come from [`LockKey`], whose
//! layout keeps them all in one slot.
//!
//! Every call names the **acquisition** it belongs to ([`HoldId`]: the owner and a nonce drawn
//! once per acquisition), not only the owner. That makes each call idempotent, so a call whose
//! reply was lost can simply be sent again: a retried acquire finds its own hold and counts
//! nothing twice, a retried release finds nothing left to free. It also makes a guard from an
//! earlier tenure harmless: its nonce is not in the owner's new hold, so its release and its
//! renewals are refused instead of freeing or prolonging a hold that is not its own.

mod acquire;
#[cfg(test)]
pub(crate) mod calls_under_test;
mod script;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Cmd;

use crate::config::Settings;
use crate::conn::{Args, Command, Conn};
use crate::error::{Error, Op};

use crate::key::{Kind, LockKey};
use crate::mode::LockMode;
pub(crate) use script::{
    evalsha, invoke, invoke_args, is_noscript, pipeline_with_scripts, with_body, Lua, ScriptCall,
};

#[cfg(any(test, feature = "_fuzzing"))]
pub(crate) use acquire::parse_acquire;
pub(crate) use acquire::{Ask, Attempt, ServerQuirks};

/// Which acquisition a call is about: the owner (the setnx token, or client id : context for
/// the modes that re-enter) and the acquisition's nonce (empty for setnx, whose token is
/// already unique per acquisition).
#[derive(Debug, Clone)]
pub(crate) struct HoldId {
    pub(crate) owner: Arc<str>,
    pub(crate) nonce: Arc<str>,
    /// Who took it (`identity::describe`), stored by the acquire script with the acquisition for
    /// inspection; empty where the owner token already carries it (setnx).
    pub(crate) holder: Arc<str>,
    /// Which of a single node's connections its commands travel on (see
    /// [`Node::lane`](crate::nodes::Node::lane)): the taking task's, so that a task's
    /// acquisitions keep to one connection.
    pub(crate) lane: u32,
}

/// One lock mode's scripts.
pub(crate) struct Algorithm {
    /// Which mode this is.
    pub(crate) mode: LockMode,
    /// Who owns a hold: a fresh token per acquisition, or the task (reentrant modes).
    pub(crate) owner: OwnerKind,
    /// Holders may share the lock (readers, a semaphore's permits): a newcomer then need not
    /// queue behind the tasks of its process that wait, since it may get in beside the
    /// current holders.
    pub(crate) shared: bool,
    /// Why the mode is refused on a Redlock quorum (`None`: it runs there). Only the `setnx`
    /// lock is specified and tested as Redlock; the others are refused there rather than run
    /// unproven (see [`one_node_only`]).
    pub(crate) not_on_quorum: Option<&'static str>,
    /// Refuses the settings of a request this mode cannot serve (a semaphore without
    /// permits), before any attempt; [`any_settings`] for a mode that takes them all.
    pub(crate) check: fn(&Settings) -> Result<(), Error>,
    /// Without fencing, the acquire is the plain `SET key value NX PX ttl [GET]` rather than
    /// the script (setnx: the value alone is the lock).
    pub(crate) plain_acquire: bool,
    /// A waiter's busy attempt marks the lock as waited for ([`Kind::Waited`]), and only a
    /// release that finds the mark publishes (setnx); the other modes publish on every
    /// release and have no mark.
    pub(crate) waited_mark: bool,
    /// Helper keys every call of this mode declares right after the lock key (the
    /// read/write lock's readers and intents): state kept beside the lock that its scripts
    /// read and write on every call.
    pub(crate) helpers: &'static [Kind],
    /// A waiter's busy attempt registers an intent that keeps newcomers out until it comes
    /// back (the write side of a read/write lock). A waiter that gives up sends the release
    /// of the acquisition it never got, which withdraws the intent and wakes those it kept
    /// out.
    pub(crate) intents: bool,
    pub(crate) acquire: Lua,
    pub(crate) release: Lua,
    pub(crate) extend: Lua,
}

/// How a mode names the owner of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerKind {
    /// 126 random bits per acquisition; the same task asking again is refused client-side,
    /// since waiting on itself would deadlock, unless holders share the lock (a semaphore: the
    /// task takes one more permit).
    Token,
    /// Client id plus the current [`LockContext`](crate::LockContext): the same task re-enters.
    Context,
}

/// Why a mode that has no reason of its own is refused on a Redlock quorum: `$mode`, as
/// [`LockMode`] names it.
macro_rules! one_node_only {
    ($mode:literal) => {
        concat!(
            "the ",
            $mode,
            " lock runs on one Redis node (or a Cluster), not on a Redlock quorum: use Client::lock (several names: Client::lock_many) on this client"
        )
    };
}
pub(crate) use one_node_only;

/// The [`Algorithm::check`] of a mode that serves every request's settings.
pub(crate) fn any_settings(_: &Settings) -> Result<(), Error> {
    Ok(())
}

impl Algorithm {
    /// Refuses, before any attempt, a request this mode cannot serve: on a Redlock quorum
    /// (`quorum`) where it does not run, or with settings it refuses (see
    /// [`check`](Self::check)).
    pub(crate) fn admit(&self, settings: &Settings, quorum: bool) -> Result<(), Error> {
        match self.not_on_quorum {
            Some(reason) if quorum => Err(Error::config(reason)),
            _ => (self.check)(settings),
        }
    }

    /// The release as a command: gives the acquisition back if it is still held. `wake` is
    /// what a setnx release publishes: empty, or on a quorum an id unique to this release
    /// call, which waiters hearing it from several nodes count once (one acquisition may be
    /// given back more than once: a failed quorum attempt, then the final release).
    /// `sharded`: publish with `SPUBLISH` (Redis Cluster), else `PUBLISH`. `listening`:
    /// waiters of this client listen, so a setnx release publishes even if the lock is not
    /// marked as waited for (they queued behind a local attempt, and never marked it).
    pub(crate) fn release_cmd(
        &self,
        key: &LockKey,
        id: &HoldId,
        wake: &str,
        sharded: bool,
        listening: bool,
    ) -> Cmd {
        let args = self.release_args(key, id, wake, sharded, listening);
        crate::conn::pack::to_cmd(&ScriptCall {
            script: &self.release,
            source: false,
            args: &args,
        })
    }

    /// What [`release_cmd`](Self::release_cmd) sends after the script: `numkeys`, the KEYS,
    /// the ARGV.
    pub(crate) fn release_args<'a>(
        &'a self,
        key: &'a LockKey,
        id: &'a HoldId,
        wake: &'a str,
        sharded: bool,
        listening: bool,
    ) -> ReleaseArgs<'a> {
        ReleaseArgs {
            algorithm: self,
            key,
            id,
            wake,
            sharded,
            listening,
        }
    }

    /// The keys every call declares first: each name's lock key, then each name's helper
    /// keys of this mode.
    pub(crate) fn lock_keys(&self, out: &mut impl Args, names: &[LockKey]) {
        for name in names {
            out.push(&[name.lock()]);
        }
        for &kind in self.helpers {
            for name in names {
                out.push(&name.helper_arg(kind).parts());
            }
        }
    }

    /// Sends a [`release_cmd`](Self::release_cmd); `false` when the lock was not ours
    /// (expired or taken).
    pub(crate) async fn send_release<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LockKey,
        cmd: &Cmd,
    ) -> Result<bool, Error> {
        let n: i64 = invoke(&self.release, cmd, conn)
            .await
            .map_err(|e| script_error(Op::Release, key, e))?;
        Ok(n == 1)
    }

    /// Gives the acquisition back if it is still held; `false` when it was not (expired,
    /// taken, or given back by an earlier try).
    pub(crate) async fn try_release(
        &self,
        conn: &mut Conn,
        key: &LockKey,
        id: &HoldId,
        sharded: bool,
        listening: bool,
    ) -> Result<bool, Error> {
        let args = self.release_args(key, id, "", sharded, listening);
        let n: i64 = invoke_args(&self.release, &args, conn)
            .await
            .map_err(|e| script_error(Op::Release, key, e))?;
        Ok(n == 1)
    }

    /// The extension as a command: makes the lease last at least `ttl_ms` from now if the
    /// acquisition is still held.
    pub(crate) fn extend_cmd(&self, key: &LockKey, id: &HoldId, ttl_ms: u64) -> Cmd {
        crate::conn::pack::to_cmd(&self.extend_call(key, id, ttl_ms, false))
    }

    /// The extension as a [`Command`], packed straight into a connection's output where it
    /// can be (the watchdog's pipelines); `source`: as `EVAL` with the script's source, for a
    /// server that answered `NOSCRIPT`.
    pub(crate) fn extend_call<'a>(
        &'a self,
        key: &'a LockKey,
        id: &'a HoldId,
        ttl_ms: u64,
        source: bool,
    ) -> ScriptCall<'a, ExtendArgs<'a>> {
        ScriptCall {
            script: &self.extend,
            source,
            args: ExtendArgs {
                algorithm: self,
                key,
                id,
                ttl_ms,
            },
        }
    }

    /// Sends an [`extend_cmd`](Self::extend_cmd): the lease the server now holds, or `None`
    /// when the acquisition is no longer held.
    pub(crate) async fn send_extend<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LockKey,
        cmd: &Cmd,
    ) -> Result<Option<Duration>, Error> {
        let ms: i64 = invoke(&self.extend, cmd, conn)
            .await
            .map_err(|e| script_error(Op::Extend, key, e))?;
        Ok(renewed_lease(ms))
    }

    /// Makes the lease last at least `ttl_ms` from now if the acquisition is still held; the
    /// lease the server now holds, or `None` when it was not held.
    pub(crate) async fn try_extend<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LockKey,
        id: &HoldId,
        ttl_ms: u64,
    ) -> Result<Option<Duration>, Error> {
        let cmd = self.extend_cmd(key, id, ttl_ms);
        self.send_extend(conn, key, &cmd).await
    }
}

/// A release's `numkeys`, KEYS and ARGV (see the table above): each lock key, the mode's
/// helpers, a setnx lock's waited-for mark; the owner, the nonce, the wake-up id, `s` to
/// SPUBLISH, `1` to publish unmarked.
pub(crate) struct ReleaseArgs<'a> {
    algorithm: &'a Algorithm,
    key: &'a LockKey,
    id: &'a HoldId,
    wake: &'a str,
    sharded: bool,
    listening: bool,
}

impl Command for ReleaseArgs<'_> {
    fn write(&self, out: &mut impl Args) {
        let algorithm = self.algorithm;
        let args = [
            self.id.owner.as_bytes(),
            self.id.nonce.as_bytes(),
            self.wake.as_bytes(),
            if self.sharded { &b"s"[..] } else { b"" },
            if self.listening { &b"1"[..] } else { b"" },
        ];
        // The script reads a missing argument as empty; each one sent costs the server work
        // on every release (see setnx/release.lua).
        let sent = args
            .iter()
            .rposition(|a| !a.is_empty())
            .map_or(0, |i| i + 1);
        let names = self.key.members();
        let keys = names.len() * (1 + algorithm.helpers.len() + usize::from(algorithm.waited_mark));
        out.push_int(keys as u64);
        algorithm.lock_keys(out, names);
        if algorithm.waited_mark {
            for name in names {
                out.push(&name.helper_arg(Kind::Waited).parts());
            }
        }
        for arg in &args[..sent] {
            out.push(&[arg]);
        }
    }
}

/// An extension's `numkeys`, KEYS and ARGV (see the table above): each lock key and the
/// mode's helpers; the owner, the ttl in ms, the nonce.
pub(crate) struct ExtendArgs<'a> {
    algorithm: &'a Algorithm,
    key: &'a LockKey,
    id: &'a HoldId,
    ttl_ms: u64,
}

impl Command for ExtendArgs<'_> {
    fn write(&self, out: &mut impl Args) {
        let names = self.key.members();
        out.push_int((names.len() * (1 + self.algorithm.helpers.len())) as u64);
        self.algorithm.lock_keys(out, names);
        out.push(&[self.id.owner.as_bytes()]);
        out.push_int(self.ttl_ms);
        out.push(&[self.id.nonce.as_bytes()]);
    }
}

/// An extend script's reply: the remaining lease in ms, or 0 when not held.
pub(crate) fn renewed_lease(ms: i64) -> Option<Duration> {
    u64::try_from(ms)
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

/// True for Redis's WRONGTYPE error: the key holds a value of another type.
fn is_wrong_type(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

/// Maps a failed script call, turning Redis's WRONGTYPE (a helper key of the lock holds the
/// application's own data) into [`Error::WrongType`].
pub(crate) fn script_error(op: Op, key: &LockKey, e: redis::RedisError) -> Error {
    if is_wrong_type(&e) {
        return Error::WrongType {
            name: key.lock_name(),
            found: "value of another type".to_owned(),
        };
    }
    Error::redis(op, key.name(), e)
}
