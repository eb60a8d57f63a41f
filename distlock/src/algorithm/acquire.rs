//! The acquire attempt: the plain `SET .. NX PX [GET]` where it settles the attempt, the
//! mode's acquire script otherwise, and what each reply means (see the table in the parent
//! module).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::{
    evalsha, invoke, is_noscript, is_wrong_type, script_error, with_body, Algorithm, HoldId,
};
use crate::config::{Replicas, Settings};
use crate::conn::{Args, Command, Conn};
use crate::error::{Error, Op};
use crate::key::{Kind, LockKey};
use crate::mode::LockMode;
use crate::token::FencingToken;

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
    Acquired { fence: Option<FencingToken> },
    /// Held by someone else, whose lease has this much left (when the server said).
    /// `member`: which name is (the first found busy), by its place in
    /// [`LockKey::members`]; 0 for a single name.
    Busy {
        holder_ttl: Option<Duration>,
        member: usize,
    },
}

impl<'a> AcquireCall<'a> {
    /// The plain `SET`, no script.
    #[cfg(test)]
    pub(crate) fn plain(&self) -> bool {
        self.script.is_none()
    }

    /// The plain `SET key value NX PX ttl [GET]` (for a call without a script).
    pub(crate) fn set_nx(&self) -> SetNx<'a> {
        SetNx {
            key: self.key.lock(),
            value: self.id.owner.as_bytes(),
            ttl_ms: self.ttl_ms,
            get: self.get,
        }
    }

    /// The call as a `redis::Cmd`: the script's, or the plain `SET`.
    #[cfg(test)]
    pub(crate) fn cmd(&self) -> Cmd {
        match &self.script {
            Some(cmd) => cmd.clone(),
            None => crate::conn::pack::to_cmd(&self.set_nx()),
        }
    }
}

/// `SET key value NX PX ttl`, and `GET` for a caller that does not wait.
pub(crate) struct SetNx<'a> {
    key: &'a [u8],
    value: &'a [u8],
    ttl_ms: u64,
    get: bool,
}

impl Command for SetNx<'_> {
    fn write(&self, out: &mut impl Args) {
        out.push_packed(b"$3\r\nSET\r\n", &[b"SET"]);
        out.push(&[self.key]);
        out.push(&[self.value]);
        out.push_packed(b"$2\r\nNX\r\n$2\r\nPX\r\n", &[b"NX", b"PX"]);
        out.push_int(self.ttl_ms);
        if self.get {
            out.push_packed(b"$3\r\nGET\r\n", &[b"GET"]);
        }
    }
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
    /// The number of permits a semaphore is asked to have (`None` for the other modes): the
    /// script refuses a number other than the one its holders recorded.
    pub(crate) permits: Option<u32>,
}

impl Ask {
    /// What every attempt of a request with `settings` asks (`waits`: the caller waits for a
    /// busy lock); an attempt sets what it learnt on top (`unsure`, `want_holder_ttl`).
    pub(crate) fn new(settings: &Settings, waits: bool) -> Ask {
        Ask {
            unsure: false,
            want_holder_ttl: true,
            waits,
            fencing: settings.fencing,
            permits: settings.permits,
        }
    }
}

/// One acquire attempt as built for the wire: a script call, or (setnx without fencing) the
/// plain `SET key value NX PX ttl [GET]`. Built once per attempt; a quorum sends the same one
/// to every node.
pub(crate) struct AcquireCall<'a> {
    key: &'a LockKey,
    id: &'a HoldId,
    ttl_ms: u64,
    ask: Ask,
    /// The script's call; `None` for the plain `SET`, which is packed from the fields above
    /// where it is sent (see [`SetNx`]).
    script: Option<Cmd>,
    /// The plain command carries `GET` (a caller that does not wait).
    pub(crate) get: bool,
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
        let script = (!plain).then(|| self.acquire_script_cmd(key, id, ttl_ms, ask));
        AcquireCall {
            key,
            id,
            ttl_ms,
            ask,
            script,
            get,
        }
    }

    /// The acquire script's call (see the table above).
    pub(crate) fn acquire_script_cmd(
        &self,
        key: &LockKey,
        id: &HoldId,
        ttl_ms: u64,
        ask: Ask,
    ) -> Cmd {
        let flag = |on: bool| if on { "1" } else { "0" };
        let marks = ask.waits && self.waited_mark;
        let names = key.members();
        let keys =
            names.len() * (1 + self.helpers.len() + usize::from(ask.fencing) + usize::from(marks));
        let bytes =
            keys * (key.lock().len() + 10) + id.owner.len() + id.nonce.len() + id.holder.len() + 20;
        let flags = if ask.permits.is_some() {
            2
        } else {
            usize::from(ask.waits)
        };
        let mut cmd = evalsha(&self.acquire, keys, keys + 7 + flags, bytes);
        self.lock_keys(&mut cmd, names);
        if ask.fencing {
            for name in names {
                cmd.arg(name.helper_arg(Kind::Fence));
            }
        }
        if marks {
            for name in names {
                cmd.arg(name.helper_arg(Kind::Waited));
            }
        }
        cmd.arg(&*id.owner)
            .arg(ttl_ms)
            .arg(flag(ask.unsure))
            .arg(flag(ask.want_holder_ttl))
            .arg(&*id.nonce)
            .arg(&*id.holder)
            .arg(flag(ask.fencing));
        // The script reads a missing flag as unset (see setnx/release.lua on what an
        // argument costs); only a waiter sends it, and a semaphore, whose permits follow it.
        if let Some(permits) = ask.permits {
            cmd.arg(flag(ask.waits)).arg(permits);
        } else if ask.waits {
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
    pub(crate) async fn send_acquire(
        &self,
        conn: &mut Conn,
        call: &AcquireCall<'_>,
        server: &ServerQuirks,
    ) -> Result<Attempt, Error> {
        let key = call.key;
        if let Some(script) = &call.script {
            // Boxed: the fenced acquisition would size the plain one's future too.
            let reply: Value = Box::pin(invoke(&self.acquire, script, conn))
                .await
                .map_err(|e| script_error(Op::Acquire, key, e))?;
            return parse_acquire(self.mode, key, reply);
        }
        let reply: Value = match conn.send(&call.set_nx()).await {
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
                    return Ok(Attempt::Busy {
                        holder_ttl: None,
                        member: 0,
                    });
                }
                // A caller that waits marks the lock as waited for, so that its release
                // publishes, in the same step that finds it busy (and learns the holder's
                // lease); a value that is not one of our locks needs the script's verdict.
                Box::pin(self.settle_by_script(conn, call, false)).await
            }
            _ => Err(Error::Redis {
                op: Op::Acquire,
                name: Some(key.name().to_owned()),
                server: None,
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
        parse_acquire(self.mode, call.key, reply)
    }

    /// One acquire attempt on one connection to `server`.
    pub(crate) async fn try_acquire(
        &self,
        conn: &mut Conn,
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
        let cmd = match &call.script {
            Some(cmd) => cmd,
            None => {
                script = self.acquire_script_cmd(key, call.id, call.ttl_ms, call.ask);
                &script
            }
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
                Some(ref noscript) if is_noscript(noscript) => {
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
            let attempt = parse_acquire(self.mode, key, reply)?;
            if let Attempt::Acquired { .. } = attempt {
                let confirmed = match confirmed {
                    Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
                    // An error (a server that refuses WAIT) confirms nothing.
                    _ => 0,
                };
                if confirmed < replicas.count {
                    return Err(Error::ReplicasNotConfirmed {
                        name: key.lock_name(),
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
}

fn short_reply() -> redis::RedisError {
    (
        ErrorKind::UnexpectedReturnType,
        "a pipeline answered with fewer replies than commands",
    )
        .into()
}

/// An acquire script's reply (see the table in the parent module), `key` the lock or set
/// it was about.
pub(crate) fn parse_acquire(
    requested: LockMode,
    key: &LockKey,
    reply: Value,
) -> Result<Attempt, Error> {
    let malformed = || Error::Redis {
        op: Op::Acquire,
        name: Some(key.name().to_owned()),
        server: None,
        source: redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "acquire script answered in an unexpected shape",
        )),
    };
    let Value::Array(items) = reply else {
        return Err(malformed());
    };
    // A fenced permit: its token and its permit slot (a semaphore is never part of a set).
    if let (LockMode::Semaphore, [Value::Int(1), Value::Int(fence), Value::Int(slot)]) =
        (requested, items.as_slice())
    {
        return match (u64::try_from(*fence), u32::try_from(*slot)) {
            (Ok(fence), Ok(slot)) => Ok(Attempt::Acquired {
                fence: Some(FencingToken::new(fence).in_slot(slot)),
            }),
            _ => Err(malformed()),
        };
    }
    // The name an answer concerns: its place in the set, from 1, when the script says (a
    // semaphore's `{-4, recorded, asked}` is three items of its own).
    let (items, member) = match items.as_slice() {
        [first @ .., Value::Int(place)] if first.len() == 2 && first[0] != Value::Int(-4) => {
            let member = usize::try_from(*place)
                .ok()
                .and_then(|place| place.checked_sub(1))
                .filter(|&member| member < key.members().len())
                .ok_or_else(malformed)?;
            (first, member)
        }
        items => (items, 0),
    };
    let name = || key.members()[member].lock_name();
    match items {
        // A negative token: none was asked for.
        [Value::Int(1), Value::Int(fence)] => Ok(Attempt::Acquired {
            fence: u64::try_from(*fence).ok().map(FencingToken::new),
        }),
        [Value::Int(0), Value::Int(ms)] => Ok(Attempt::Busy {
            holder_ttl: u64::try_from(*ms).ok().map(Duration::from_millis),
            member,
        }),
        // Refused for good, not busy: the task holds the read side and asked for the write side.
        [Value::Int(-2), _] => Err(Error::Upgrade { name: name() }),
        [Value::Int(-3), held_as] => match LockMode::named(&text(held_as)) {
            Some(held_as) => Err(Error::ModeConflict {
                name: name(),
                held_as,
                requested,
            }),
            None => Err(malformed()),
        },
        // A semaphore whose holders recorded another number of permits.
        [Value::Int(-4), Value::Int(recorded), Value::Int(asked)] => {
            match (u32::try_from(*recorded), u32::try_from(*asked)) {
                (Ok(recorded), Ok(permits)) => Err(Error::PermitsMismatch {
                    name: key.lock_name(),
                    permits,
                    recorded,
                }),
                _ => Err(malformed()),
            }
        }
        [Value::Int(-1), found] => Err(Error::WrongType {
            name: name(),
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

/// True when a string value has the shape of a setnx lock's (see
/// `identity::owner_token_described`): a token and a tab. Earlier builds wrote 32 hex digits
/// as the token, which passes too (a value it misjudges only costs the script call).
fn is_lock_value(value: &[u8]) -> bool {
    let token = value.iter().position(|&c| c == b'\t').unwrap_or(0);
    (16..=32).contains(&token)
        && value[..token]
            .iter()
            .all(|c| crate::identity::ALPHABET.contains(c))
}
