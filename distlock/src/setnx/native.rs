//! The setnx lease renewed with the server's own conditional `SET` instead of `extend.lua`,
//! where the server has it (Valkey 8.1, Redis 8.4: see `nodes::commands`).
//!
//! `SET key token IFEQ token PX ttl` renews the lease only while the key holds our token, as
//! the script does, in one command the server runs without a script. It differs from the
//! script in one point: it sets the lease to exactly the ttl, where the script never shortens
//! a longer one. The watchdog therefore uses it only for leases that cannot be longer than
//! its ttl (see `lease::native`). It touches neither the fencing counter nor the waited-for
//! mark, as the script does not; its answer is `OK` (renewed: the lease is now the ttl), nil
//! (not ours, or gone) or `WRONGTYPE` (another mode's lock of the name: not ours either, as
//! the script's `pcall` reads it).
//!
//! A native release (`DELIFEQ`, Valkey 9.0; `DELEX key IFEQ`, Redis 8.4) is not used: no
//! server it could be tested on runs here, and a path no test runs is not shipped.

use std::time::Duration;

use redis::Value;

use super::SETNX;
use crate::algorithm::{Algorithm, HoldId};
use crate::conn::{Args, Command};
use crate::key::LockKey;

/// What a server said to a native renewal.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NativeAnswer {
    /// Renewed: the lease is now the ttl.
    Renewed(Duration),
    /// The lock is not ours (expired, taken by another owner, or a lock of another mode).
    Refused,
    /// The server does not know the option (older than Valkey 8.1 or Redis 8.4): send the
    /// script instead.
    Unsupported,
    /// Anything else (an error): no answer about the lease.
    Failed,
}

/// True when a lease of `algorithm` on `key` can be renewed natively: a setnx lock of one
/// name.
pub(crate) fn renews_natively(algorithm: &Algorithm, key: &LockKey) -> bool {
    std::ptr::eq(algorithm, &*SETNX) && key.members().len() == 1
}

/// The native renewal of `key`'s lease for `ttl_ms`, or `None` when `algorithm` is not the
/// setnx lock of one name (the other modes' holds are not a plain value).
pub(crate) fn native_extend<'a>(
    algorithm: &Algorithm,
    key: &'a LockKey,
    id: &'a HoldId,
    ttl_ms: u64,
) -> Option<NativeExtend<'a>> {
    renews_natively(algorithm, key).then_some(NativeExtend { key, id, ttl_ms })
}

/// `SET key token IFEQ token PX ttl`, as a [`Command`] packed straight into a connection's
/// output where it can be.
pub(crate) struct NativeExtend<'a> {
    key: &'a LockKey,
    id: &'a HoldId,
    ttl_ms: u64,
}

impl Command for NativeExtend<'_> {
    fn write(&self, out: &mut impl Args) {
        let token = self.id.owner.as_bytes();
        out.push(&[b"SET"]);
        out.push(&[self.key.lock()]);
        out.push(&[token]);
        out.push(&[b"IFEQ"]);
        out.push(&[token]);
        out.push(&[b"PX"]);
        out.push_int(self.ttl_ms);
    }
}

/// Reads a server's answer to a [`NativeExtend`].
pub(crate) fn native_answer(value: &Value, ttl_ms: u64) -> NativeAnswer {
    match value {
        Value::Okay => NativeAnswer::Renewed(Duration::from_millis(ttl_ms)),
        Value::SimpleString(s) if s == "OK" => NativeAnswer::Renewed(Duration::from_millis(ttl_ms)),
        Value::Nil => NativeAnswer::Refused,
        Value::ServerError(e) if e.code() == "WRONGTYPE" => NativeAnswer::Refused,
        Value::ServerError(e)
            if e.code() == "ERR"
                && e.details()
                    .is_some_and(|d| d.to_ascii_lowercase().contains("syntax error")) =>
        {
            NativeAnswer::Unsupported
        }
        _ => NativeAnswer::Failed,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::Value;

    use super::*;
    use crate::key::LockKey;

    fn error(line: &str) -> Value {
        let reply = format!("-{line}\r\n");
        match redis::parse_redis_value(reply.as_bytes()) {
            Ok(value @ Value::ServerError(_)) => value,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_answers_mean_what_the_script_would_have_answered() {
        assert_eq!(
            native_answer(&Value::Okay, 3_000),
            NativeAnswer::Renewed(Duration::from_secs(3))
        );
        assert_eq!(native_answer(&Value::Nil, 3_000), NativeAnswer::Refused);
        // Another mode's lock of the name: the script's pcall reads it as not ours.
        let wrong = error("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(native_answer(&wrong, 3_000), NativeAnswer::Refused);
        // A server without the option: the script again.
        assert_eq!(
            native_answer(&error("ERR syntax error"), 3_000),
            NativeAnswer::Unsupported
        );
        assert_eq!(
            native_answer(&error("NOPERM no permissions"), 3_000),
            NativeAnswer::Failed
        );
        assert_eq!(native_answer(&Value::Int(1), 3_000), NativeAnswer::Failed);
    }

    #[test]
    fn only_a_setnx_lock_of_one_name_renews_natively() {
        let key = LockKey::new("p", b"a", 64).expect("key");
        let id = HoldId {
            owner: Arc::from("t0k3n"),
            nonce: Arc::from(""),
            holder: Arc::from(""),
            lane: 0,
        };
        let native = native_extend(&SETNX, &key, &id, 3_000).expect("setnx");
        let cmd = crate::conn::pack::to_cmd(&native);
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let expected: [&[u8]; 7] = [
            b"SET",
            key.lock(),
            b"t0k3n",
            b"IFEQ",
            b"t0k3n",
            b"PX",
            b"3000",
        ];
        assert_eq!(args, expected.map(<[u8]>::to_vec));
        assert!(native_extend(&crate::reentrant::REENTRANT, &key, &id, 3_000).is_none());
    }
}
