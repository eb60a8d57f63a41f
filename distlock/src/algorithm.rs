//! What a lock mode is: three scripts with one calling convention.
//!
//! Every mode's scripts take the same KEYS and ARGV and answer in the same shape, so the one
//! acquire loop, the lease, the guard and (for Redlock) the quorum layer run any mode without
//! knowing which it is. A mode is its `.lua` files plus a `static Algorithm`.
//!
//! | script  | KEYS                  | ARGV             | reply                                      |
//! |---------|-----------------------|------------------|--------------------------------------------|
//! | acquire | lock, then the fencing counter if fencing, then (setnx) the waited-for mark if the caller waits | owner, ttl in ms, retry flag, want holder ttl, nonce, holder, fencing flag, waits flag (sent only when set) | `{1, fence or -1}` / `{0, holder ms or -1}` / `{-1, type}` / `{-2, 'upgrade'}` / `{-3, mode}` |
//! | release | lock (its string is its channel), then (setnx) the waited-for mark | owner, nonce, wake-up id, `s` to SPUBLISH, `1` to publish unmarked; trailing empty ones left off | `1` released / `0` not held |
//! | extend  | lock                  | owner, ttl in ms, nonce | remaining ms (>= ttl) / `0` not held |
//!
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, Script, ServerErrorKind, Value};

use crate::client::Replicas;
use crate::conn::Conn;
use crate::error::{Error, Op};
use crate::key::{Kind, LockKey};

/// Which acquisition a call is about: the owner (the setnx token, or client id : context for
/// the modes that re-enter) and the acquisition's nonce (empty for setnx, whose token is
/// already unique per acquisition).
#[derive(Debug, Clone)]
pub(crate) struct HoldId {
    pub(crate) owner: Arc<str>,
    pub(crate) nonce: Arc<str>,
    /// Who took it (`holders::describe`), stored by the acquire script with the acquisition for
    /// inspection; empty where the owner token already carries it (setnx).
    pub(crate) holder: Arc<str>,
    /// Which of a single node's connections its commands travel on (see
    /// [`Node::lane`](crate::quorum::Node::lane)): the taking task's, so that a task's
    /// acquisitions keep to one connection.
    pub(crate) lane: u32,
}

/// One lock mode's scripts.
pub(crate) struct Algorithm {
    /// The mode's name, as the macros spell it.
    pub(crate) name: &'static str,
    /// Who owns a hold: a fresh token per acquisition, or the task (reentrant modes).
    pub(crate) owner: OwnerKind,
    /// Holders may share the lock (readers): a newcomer then need not queue behind the
    /// tasks of its process that wait, since it may get in beside the current holders.
    pub(crate) shared: bool,
    /// The mode may run on a Redlock quorum. Only the `setnx` lock is specified and tested
    /// as Redlock; the others are refused there rather than run unproven.
    pub(crate) quorum: bool,
    /// Without fencing, the acquire is the plain `SET key value NX PX ttl [GET]` rather than
    /// the script (setnx: the value alone is the lock).
    pub(crate) plain_acquire: bool,
    /// A waiter's busy attempt marks the lock as waited for ([`Kind::Waited`]), and only a
    /// release that finds the mark publishes (setnx); the other modes publish on every
    /// release and have no mark.
    pub(crate) waited_mark: bool,
    pub(crate) acquire: Lua,
    pub(crate) release: Lua,
    pub(crate) extend: Lua,
}

/// A script and its source: sent by hash, and by source where the server lacks it.
pub(crate) struct Lua {
    script: Script,
    code: &'static str,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Lua {
        Lua {
            script: Script::new(code),
            code,
        }
    }

    /// The script's source, for `SCRIPT LOAD` on a server that lacks it.
    pub(crate) fn source(&self) -> &'static str {
        self.code
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// How a mode names the owner of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerKind {
    /// 126 random bits per acquisition; the same task asking again is refused client-side,
    /// since waiting on itself would deadlock.
    Token,
    /// Client id plus the current [`LockContext`](crate::LockContext): the same task re-enters.
    Context,
}

/// What one server was found to refuse, learnt from its answers and kept per server (a node of
/// a quorum, or the one deployment): another server of the same process may well be newer.
#[derive(Debug, Default)]
pub(crate) struct ServerQuirks {
    /// The server refused `SET .. NX .. GET` (Redis before 7.0): setnx locks for callers that
    /// do not wait are taken there with the acquire script, which needs no newer server.
    set_nx_get_refused: AtomicBool,
}

impl ServerQuirks {
    /// True once the server refused `SET .. NX .. GET`.
    pub(crate) fn refuses_set_nx_get(&self) -> bool {
        self.set_nx_get_refused.load(Ordering::Relaxed)
    }
}

/// The answer to one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Held, with this fencing token when one was asked for.
    Acquired { fence: Option<u64> },
    /// Held by someone else, whose lease has this much left (when the server said).
    Busy { holder_ttl: Option<Duration> },
}

/// What one acquire attempt asks for besides the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    /// An earlier attempt of this acquisition may have succeeded without its reply reaching
    /// us: a hold of this acquisition found in place is taken, not waited for.
    pub(crate) unsure: bool,
    /// Report how long a busy lock's holder has left (a waiter that learnt it recently can
    /// spare the server the call).
    pub(crate) want_holder_ttl: bool,
    /// The caller waits if the lock is busy (not a single try): a busy answer then marks the
    /// lock as waited for (a setnx lock's release publishes only when it finds that mark) and
    /// reports the holder's remaining lease.
    pub(crate) waits: bool,
    /// Mint a fencing token (see [`LockRequest::fencing`](crate::LockRequest::fencing)).
    pub(crate) fencing: bool,
}

/// One acquire attempt as built for the wire: a script call, or (setnx without fencing) the
/// plain `SET key value NX PX ttl [GET]`. Built once per attempt; a quorum sends the same one
/// to every node.
pub(crate) struct AcquireCall<'a> {
    key: &'a LockKey,
    id: &'a HoldId,
    ttl_ms: u64,
    ask: Ask,
    cmd: Cmd,
    plain: bool,
    /// The plain command carries `GET` (a caller that does not wait).
    get: bool,
}

impl Algorithm {
    /// The acquire attempt as a command, built once per attempt. A setnx lock without
    /// fencing is one plain command, no script. For a caller that waits it is
    /// `SET key value NX PX ttl`: taken (`OK`), or not, and then the acquire script follows
    /// (as it would anyway for a waiter that finds the lock busy: it marks the lock as waited
    /// for and reports the holder's lease; it also recognises this acquisition's own hold
    /// after a lost reply, and another mode's lock or the application's data). For a caller
    /// that does not wait it is `SET key value NX PX ttl GET` (Redis 7.0 or later), whose
    /// reply says whether the lock is free (nil), already this acquisition's or someone
    /// else's, so that a busy lock costs one round trip; the rare answers that need more are
    /// settled by a follow-up, see [`send_acquire`](Self::send_acquire). `GET` costs the
    /// server about 900 instructions per acquisition (callgrind), a waiter has no use for
    /// it. Every other case runs the mode's acquire script, as does every call where the
    /// server refused `GET` before (`get_refused`, see [`ServerQuirks`]).
    pub(crate) fn acquire_cmd<'a>(
        &self,
        key: &'a LockKey,
        id: &'a HoldId,
        ttl_ms: u64,
        ask: Ask,
        get_refused: bool,
    ) -> AcquireCall<'a> {
        let get = !ask.waits;
        let plain = self.plain_acquire && !ask.fencing && !(get && get_refused);
        let cmd = if plain {
            let mut cmd = Cmd::with_capacity(7, key.lock().len() + id.owner.len() + 40);
            cmd.arg("SET")
                .arg(key.lock())
                .arg(&*id.owner)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms);
            if get {
                cmd.arg("GET");
            }
            cmd
        } else {
            self.acquire_script_cmd(key, id, ttl_ms, ask)
        };
        AcquireCall {
            key,
            id,
            ttl_ms,
            ask,
            cmd,
            plain,
            get,
        }
    }

    /// The acquire script's call (see the table above).
    fn acquire_script_cmd(&self, key: &LockKey, id: &HoldId, ttl_ms: u64, ask: Ask) -> Cmd {
        let flag = |on: bool| if on { "1" } else { "0" };
        let marks = ask.waits && self.waited_mark;
        let keys = 1 + usize::from(ask.fencing) + usize::from(marks);
        let bytes =
            keys * (key.lock().len() + 8) + id.owner.len() + id.nonce.len() + id.holder.len() + 20;
        let mut cmd = evalsha(
            &self.acquire,
            keys,
            keys + 7 + usize::from(ask.waits),
            bytes,
        );
        cmd.arg(key.lock());
        if ask.fencing {
            cmd.arg(key.helper_arg(Kind::Fence));
        }
        if marks {
            cmd.arg(key.helper_arg(Kind::Waited));
        }
        cmd.arg(&*id.owner)
            .arg(ttl_ms)
            .arg(flag(ask.unsure))
            .arg(flag(ask.want_holder_ttl))
            .arg(&*id.nonce)
            .arg(&*id.holder)
            .arg(flag(ask.fencing));
        // The script reads a missing flag as unset (see setnx/release.lua on what an
        // argument costs); only a waiter sends it.
        if ask.waits {
            cmd.arg("1");
        }
        cmd
    }

    /// Sends an [`acquire_cmd`](Self::acquire_cmd) on one connection. A script goes by
    /// `EVALSHA`, and on `NOSCRIPT` (a restarted server, `SCRIPT FLUSH`) the script is loaded
    /// and the command sent again, so a restarted server just works.
    ///
    /// A waiter's plain `SET .. NX PX` is settled from its reply: `OK` is the lock taken,
    /// nil needs the script (see [`acquire_cmd`](Self::acquire_cmd)).
    ///
    /// A plain `SET .. GET` is settled from its reply: nil is the lock taken; another
    /// holder's value is busy for a caller that does not wait. The other replies need the
    /// script: a value that is not one of ours (a string without expiry is the
    /// application's, not a lock), this acquisition's own value (an earlier attempt took the
    /// lock and its reply was lost: the script makes the lease last at least the ttl, never
    /// shortening it) and `WRONGTYPE` (a lock of another mode, or the application's data:
    /// the script tells which).
    pub(crate) async fn send_acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        call: &AcquireCall<'_>,
        server: &ServerQuirks,
    ) -> Result<Attempt, Error> {
        let key = call.key;
        if !call.plain {
            // Boxed: the fenced acquisition would size the plain one's future too.
            let reply: Value = Box::pin(invoke(&self.acquire, &call.cmd, conn))
                .await
                .map_err(|e| script_error(Op::Acquire, key, e))?;
            return parse_acquire(self.name, key, reply);
        }
        let reply: Value = match call.cmd.query_async(conn).await {
            Ok(reply) => reply,
            Err(e) if is_wrong_type(&e) => {
                return Box::pin(self.settle_by_script(conn, call, false)).await
            }
            // A server older than 7.0 refuses NX with GET: its script does the same work.
            Err(e) if is_syntax_error(&e) => {
                server.set_nx_get_refused.store(true, Ordering::Relaxed);
                return Box::pin(self.settle_by_script(conn, call, false)).await;
            }
            Err(e) => return Err(Error::redis(Op::Acquire, key.name(), e)),
        };
        match reply {
            Value::Okay if !call.get => Ok(Attempt::Acquired { fence: None }),
            Value::SimpleString(ok) if !call.get && ok == "OK" => {
                Ok(Attempt::Acquired { fence: None })
            }
            // Not set: busy (or ours after a lost reply, or another mode's, or the
            // application's); the waiter's script settles which, and marks the lock.
            Value::Nil if !call.get => Box::pin(self.settle_by_script(conn, call, false)).await,
            Value::Nil => Ok(Attempt::Acquired { fence: None }),
            Value::BulkString(held) if held == call.id.owner.as_bytes() => {
                // Boxed, like the other rare paths: it would size every attempt's future.
                Box::pin(self.settle_by_script(conn, call, true)).await
            }
            Value::BulkString(held) => {
                if !call.ask.waits && is_lock_value(&held) {
                    return Ok(Attempt::Busy { holder_ttl: None });
                }
                // A caller that waits marks the lock as waited for, so that its release
                // publishes, in the same step that finds it busy (and learns the holder's
                // lease); a value that is not one of our locks needs the script's verdict.
                Box::pin(self.settle_by_script(conn, call, false)).await
            }
            _ => Err(Error::Redis {
                op: Op::Acquire,
                key: Some(key.name().to_owned()),
                source: redis::RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "SET .. NX PX answered in an unexpected shape",
                )),
            }),
        }
    }

    /// The acquire script as the follow-up of a plain `SET .. GET` whose reply needs it:
    /// `own` when the reply was this acquisition's own value.
    async fn settle_by_script<C: ConnectionLike>(
        &self,
        conn: &mut C,
        call: &AcquireCall<'_>,
        own: bool,
    ) -> Result<Attempt, Error> {
        let ask = Ask {
            unsure: call.ask.unsure || own,
            want_holder_ttl: true,
            ..call.ask
        };
        let cmd = self.acquire_script_cmd(call.key, call.id, call.ttl_ms, ask);
        let reply: Value = invoke(&self.acquire, &cmd, conn)
            .await
            .map_err(|e| script_error(Op::Acquire, call.key, e))?;
        parse_acquire(self.name, call.key, reply)
    }

    /// One acquire attempt on one connection to `server`.
    pub(crate) async fn try_acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        server: &ServerQuirks,
        key: &LockKey,
        id: &HoldId,
        ttl_ms: u64,
        ask: Ask,
    ) -> Result<Attempt, Error> {
        let call = self.acquire_cmd(key, id, ttl_ms, ask, server.refuses_set_nx_get());
        self.send_acquire(conn, &call, server).await
    }

    /// One acquire attempt followed by `WAIT count timeout` in one pipeline: both travel on
    /// one connection to the master of the lock's slot, so the `WAIT` counts the script's
    /// write (it counts the writes of the connection it runs on, and a `WAIT` sent on its own
    /// could go out on a fresh connection after a reconnection and confirm nothing). An
    /// acquisition that fewer replicas confirmed is reported as
    /// [`Error::ReplicasNotConfirmed`]; the caller undoes it. Always the acquire script (also
    /// where a plain `SET .. GET` would do without acknowledgement): its one reply settles
    /// every case, so the `WAIT` behind it confirms exactly that write.
    pub(crate) async fn try_acquire_acked(
        &self,
        conn: &mut Conn,
        call: &AcquireCall<'_>,
        replicas: Replicas,
    ) -> Result<Attempt, Error> {
        let key = call.key;
        let script;
        let cmd = if call.plain {
            script = self.acquire_script_cmd(key, call.id, call.ttl_ms, call.ask);
            &script
        } else {
            &call.cmd
        };
        let timeout_ms = replicas.timeout.as_millis().max(1);
        let mut first = cmd.clone();
        for _ in 0..3 {
            let mut pipe = redis::Pipeline::with_capacity(2);
            pipe.add_command(first.clone());
            pipe.cmd("WAIT").arg(replicas.count).arg(timeout_ms as u64);
            let values = conn
                .pipeline_to_slot(&pipe, key.slot())
                .await
                .map_err(|e| script_error(Op::Acquire, key, e))?;
            let mut values = values.into_iter();
            let (reply, confirmed) = (values.next(), values.next());
            let reply = match reply {
                Some(Value::ServerError(e)) if e.code() == "NOSCRIPT" => {
                    // A promoted replica or a restarted server without the script.
                    first = with_body(&self.acquire, cmd);
                    continue;
                }
                Some(Value::ServerError(e)) if e.code() == "MOVED" => {
                    // The slot moved: a keyed command through the normal routing follows the
                    // redirection and refreshes the slot map; then try again.
                    let _: redis::RedisResult<Value> =
                        redis::cmd("PTTL").arg(key.lock()).query_async(conn).await;
                    continue;
                }
                Some(Value::ServerError(e)) => {
                    return Err(script_error(Op::Acquire, key, e.into()));
                }
                Some(reply) => reply,
                None => return Err(script_error(Op::Acquire, key, short_reply())),
            };
            let attempt = parse_acquire(self.name, key, reply)?;
            if let Attempt::Acquired { .. } = attempt {
                let confirmed = match confirmed {
                    Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
                    // An error (a server that refuses WAIT) confirms nothing.
                    _ => 0,
                };
                if confirmed < replicas.count {
                    return Err(Error::ReplicasNotConfirmed {
                        key: key.name().to_owned(),
                        wanted: replicas.count,
                        confirmed,
                        timeout: replicas.timeout,
                    });
                }
            }
            return Ok(attempt);
        }
        Err(script_error(
            Op::Acquire,
            key,
            (
                ErrorKind::Server(ServerErrorKind::TryAgain),
                "the lock's slot kept moving",
            )
                .into(),
        ))
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
        let args = [
            id.owner.as_bytes(),
            id.nonce.as_bytes(),
            wake.as_bytes(),
            if sharded { &b"s"[..] } else { b"" },
            if listening { &b"1"[..] } else { b"" },
        ];
        // The script reads a missing argument as empty; each one sent costs the server work
        // on every release (see setnx/release.lua).
        let sent = args
            .iter()
            .rposition(|a| !a.is_empty())
            .map_or(0, |i| i + 1);
        let keys = 1 + usize::from(self.waited_mark);
        let bytes = keys * (key.lock().len() + 8) + args.iter().map(|a| a.len()).sum::<usize>();
        let mut cmd = evalsha(&self.release, keys, keys + sent, bytes);
        cmd.arg(key.lock());
        if self.waited_mark {
            cmd.arg(key.helper_arg(Kind::Waited));
        }
        for arg in &args[..sent] {
            cmd.arg(*arg);
        }
        cmd
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
    pub(crate) async fn try_release<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LockKey,
        id: &HoldId,
        sharded: bool,
        listening: bool,
    ) -> Result<bool, Error> {
        let cmd = self.release_cmd(key, id, "", sharded, listening);
        self.send_release(conn, key, &cmd).await
    }

    /// The extension as a command: makes the lease last at least `ttl_ms` from now if the
    /// acquisition is still held.
    pub(crate) fn extend_cmd(&self, key: &LockKey, id: &HoldId, ttl_ms: u64) -> Cmd {
        let bytes = key.lock().len() + id.owner.len() + id.nonce.len() + 24;
        let mut cmd = evalsha(&self.extend, 1, 4, bytes);
        cmd.arg(key.lock())
            .arg(&*id.owner)
            .arg(ttl_ms)
            .arg(&*id.nonce);
        cmd
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

/// `EVALSHA <sha> <numkeys>`, with room for `args` more arguments of about `bytes` in all.
/// Built directly rather than through `redis::Script::key/arg`, which copies every argument
/// into a vector of its own and then again into the command: about a dozen allocations per
/// call on the hot path, for nothing.
fn evalsha(script: &Lua, numkeys: usize, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + args, 64 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(numkeys);
    cmd
}

/// Sends an `EVALSHA` built by [`evalsha`]; on `NOSCRIPT` sends the script itself
/// ([`with_body`]), which also caches it on that server for the next `EVALSHA`.
async fn invoke<C: ConnectionLike, T: FromRedisValue>(
    script: &Lua,
    cmd: &Cmd,
    conn: &mut C,
) -> redis::RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            with_body(script, cmd).query_async(conn).await
        }
        other => other,
    }
}

/// The `EVALSHA <sha> ...` command `cmd` as `EVAL <script> ...`. Routed like the `EVALSHA`
/// (by its first key), so on a Redis Cluster it reaches exactly the server that lacked the
/// script, where a `SCRIPT LOAD` would go to every node and fail while any one is down.
pub(crate) fn with_body(script: &Lua, cmd: &Cmd) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(script.code);
    for arg in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

fn short_reply() -> redis::RedisError {
    (
        ErrorKind::UnexpectedReturnType,
        "a pipeline answered with fewer replies than commands",
    )
        .into()
}

/// An extend script's reply: the remaining lease in ms, or 0 when not held.
pub(crate) fn renewed_lease(ms: i64) -> Option<Duration> {
    u64::try_from(ms)
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

pub(crate) fn parse_acquire(
    self_name: &'static str,
    key: &LockKey,
    reply: Value,
) -> Result<Attempt, Error> {
    let malformed = || Error::Redis {
        op: Op::Acquire,
        key: Some(key.name().to_owned()),
        source: redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "acquire script answered in an unexpected shape",
        )),
    };
    let Value::Array(items) = reply else {
        return Err(malformed());
    };
    match items.as_slice() {
        // A negative token: none was asked for.
        [Value::Int(1), Value::Int(fence)] => Ok(Attempt::Acquired {
            fence: u64::try_from(*fence).ok(),
        }),
        [Value::Int(0), Value::Int(ms)] => Ok(Attempt::Busy {
            holder_ttl: u64::try_from(*ms).ok().map(Duration::from_millis),
        }),
        // Refused for good, not busy: the task holds the read side and asked for the write side.
        [Value::Int(-2), _] => Err(Error::Upgrade {
            key: key.name().to_owned(),
        }),
        [Value::Int(-3), held_as] => Err(Error::ModeConflict {
            key: key.name().to_owned(),
            held_as: text(held_as),
            requested: self_name,
        }),
        [Value::Int(-1), found] => Err(Error::WrongType {
            key: key.name().to_owned(),
            found: text(found),
        }),
        _ => Err(malformed()),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => "value of another type".to_owned(),
    }
}

fn is_syntax_error(e: &redis::RedisError) -> bool {
    e.to_string().contains("syntax error")
}

/// True for Redis's WRONGTYPE error: the key holds a value of another type.
fn is_wrong_type(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

/// True when a string value has the shape of a setnx lock's (see
/// `token::owner_token_described`): a token and a tab. Earlier builds wrote 32 hex digits
/// as the token, which passes too (a value it misjudges only costs the script call).
fn is_lock_value(value: &[u8]) -> bool {
    let token = value.iter().position(|&c| c == b'\t').unwrap_or(0);
    (16..=32).contains(&token)
        && value[..token]
            .iter()
            .all(|c| crate::holders::ALPHABET.contains(c))
}

/// Maps a failed script call, turning Redis's WRONGTYPE (a helper key of the lock holds the
/// application's own data) into [`Error::WrongType`].
pub(crate) fn script_error(op: Op, key: &LockKey, e: redis::RedisError) -> Error {
    if is_wrong_type(&e) {
        return Error::WrongType {
            key: key.name().to_owned(),
            found: "value of another type".to_owned(),
        };
    }
    Error::redis(op, key.name(), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .skip(2) // EVALSHA and the hash
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn id(nonce: &str) -> HoldId {
        HoldId {
            owner: Arc::from("t0k3n"),
            nonce: Arc::from(nonce),
            holder: Arc::from(""),
            lane: 0,
        }
    }

    fn ask(waits: bool, fencing: bool) -> Ask {
        Ask {
            unsure: false,
            want_holder_ttl: true,
            waits,
            fencing,
        }
    }

    /// The KEYS of a script call: what `numkeys` says, and those arguments.
    fn declared(cmd: &Cmd) -> Vec<Vec<u8>> {
        let all = args(cmd);
        let n: usize = std::str::from_utf8(&all[0]).unwrap().parse().unwrap();
        all[1..=n].to_vec()
    }

    #[test]
    fn only_a_waiting_acquire_sends_the_waits_flag() {
        let setnx = &crate::setnx::SETNX;
        let key = LockKey::new("p", b"k", 64).unwrap();
        let once = args(&setnx.acquire_script_cmd(&key, &id(""), 1000, ask(false, false)));
        assert_eq!(once.len(), 1 + 1 + 7, "{once:?}");
        let waiting = args(&setnx.acquire_script_cmd(&key, &id(""), 1000, ask(true, false)));
        assert_eq!(waiting.len(), once.len() + 2, "{waiting:?}");
        assert_eq!(waiting.last(), Some(&b"1".to_vec()));
    }

    /// Every key a script touches on a call is declared, and only those: the fencing counter
    /// when fencing, a setnx lock's waited-for mark when the caller waits (the acquire) and
    /// always for its release (which deletes the mark with the lock).
    #[test]
    fn script_calls_declare_exactly_the_keys_they_touch() {
        let key = LockKey::new("p", b"k", 64).unwrap();
        let (lock, fence, waited) = (
            key.lock().to_vec(),
            key.helper(Kind::Fence),
            key.helper(Kind::Waited),
        );
        let setnx = &crate::setnx::SETNX;
        for (waits, fencing, expected) in [
            (false, false, vec![lock.clone()]),
            (false, true, vec![lock.clone(), fence.clone()]),
            (true, false, vec![lock.clone(), waited.clone()]),
            (
                true,
                true,
                vec![lock.clone(), fence.clone(), waited.clone()],
            ),
        ] {
            let cmd = setnx.acquire_script_cmd(&key, &id(""), 1000, ask(waits, fencing));
            assert_eq!(declared(&cmd), expected, "waits {waits}, fencing {fencing}");
        }
        let release = setnx.release_cmd(&key, &id(""), "", false, false);
        assert_eq!(declared(&release), [lock.clone(), waited]);
        for mode in [
            &*crate::reentrant::REENTRANT,
            &*crate::rwlock::READ,
            &*crate::rwlock::WRITE,
        ] {
            for waits in [false, true] {
                let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, false));
                assert_eq!(declared(&cmd), [&lock[..]], "{}", mode.name);
                let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, true));
                assert_eq!(
                    declared(&cmd),
                    [lock.clone(), fence.clone()],
                    "{}",
                    mode.name
                );
            }
            let release = mode.release_cmd(&key, &id("n"), "", true, false);
            assert_eq!(declared(&release), [&lock[..]], "{}", mode.name);
        }
        for mode in [&*crate::setnx::SETNX, &*crate::reentrant::REENTRANT] {
            assert_eq!(
                declared(&mode.extend_cmd(&key, &id("n"), 1000)),
                [&lock[..]]
            );
        }
    }

    #[test]
    fn only_an_acquire_that_does_not_wait_asks_set_for_the_old_value() {
        let setnx = &crate::setnx::SETNX;
        let key = LockKey::new("p", b"k", 64).unwrap();
        let id = id("");
        let words = |waits| -> Vec<Vec<u8>> {
            let call = setnx.acquire_cmd(&key, &id, 1000, ask(waits, false), false);
            assert!(call.plain && call.get != waits);
            call.cmd
                .args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(bytes) => bytes.to_vec(),
                    _ => Vec::new(),
                })
                .collect()
        };
        let set = [&b"SET"[..], b"p:{k}", b"t0k3n", b"NX", b"PX", b"1000"];
        assert_eq!(words(true), set);
        assert_eq!(words(false)[..6], set);
        assert_eq!(words(false)[6..], [b"GET".to_vec()]);
        // A server that refused `GET` gets the script from a caller that does not wait; a
        // waiter's plain `SET .. NX PX` needs no `GET` and goes on as before.
        assert!(
            !setnx
                .acquire_cmd(&key, &id, 1000, ask(false, false), true)
                .plain
        );
        assert!(
            setnx
                .acquire_cmd(&key, &id, 1000, ask(true, false), true)
                .plain
        );
    }

    #[test]
    fn a_release_leaves_off_its_trailing_empty_arguments_only() {
        let setnx = &crate::setnx::SETNX;
        let key = LockKey::new("p", b"k", 64).unwrap();
        let keys = [&b"2"[..], b"p:{k}", b"p:#waited:{k}"];
        let with = |rest: &[&[u8]]| -> Vec<Vec<u8>> {
            keys.iter().chain(rest).map(|a| a.to_vec()).collect()
        };
        let plain = setnx.release_cmd(&key, &id(""), "", false, false);
        assert_eq!(args(&plain), with(&[b"t0k3n"]));
        let listening = setnx.release_cmd(&key, &id(""), "", false, true);
        assert_eq!(args(&listening), with(&[b"t0k3n", b"", b"", b"", b"1"]));
        let quorum = setnx.release_cmd(&key, &id(""), "w1", false, false);
        assert_eq!(args(&quorum), with(&[b"t0k3n", b"", b"w1"]));
        let sharded = setnx.release_cmd(&key, &id("n"), "", true, false);
        assert_eq!(args(&sharded), with(&[b"t0k3n", b"n", b"", b"s"]));
    }
}
