//! Sending scripts, and the one way a server that lacks one (freshly started, restarted, a
//! promoted replica, `SCRIPT FLUSH`) gets it: the command answered `NOSCRIPT` is sent again as
//! `EVAL` with the script's source, which also caches it there. Routed like the `EVALSHA` (by
//! its first key), so on a Redis Cluster it reaches exactly the server that lacked the script,
//! where a `SCRIPT LOAD` would go to every node and fail while any one is down.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, Script, ServerErrorKind, Value};

use crate::conn::{Args, Command, Conn};

/// A script and its source: sent by hash, and by source where the server lacks it.
pub(crate) struct Lua {
    script: Script,
    code: &'static str,
    /// `EVALSHA <sha>` packed as RESP, for [`ScriptCall`].
    head: Vec<u8>,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Lua {
        let script = Script::new(code);
        let head = crate::conn::pack::packed(&[b"EVALSHA", script.get_hash().as_bytes()]);
        Lua { script, code, head }
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// `EVALSHA <sha> <numkeys>`, with room for `args` more arguments of about `bytes` in all.
/// Built directly rather than through `redis::Script::key/arg`, which copies every argument
/// into a vector of its own and then again into the command: about a dozen allocations per
/// call on the hot path, for nothing.
pub(crate) fn evalsha(script: &Lua, numkeys: usize, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + args, 64 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(numkeys);
    cmd
}

/// Sends an `EVALSHA` built by [`evalsha`]; on `NOSCRIPT` sends the script itself
/// ([`with_body`]), which also caches it on that server for the next `EVALSHA`.
pub(crate) async fn invoke<C: ConnectionLike, T: FromRedisValue>(
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

/// A script call as a [`Command`]: `EVALSHA <sha>`, or for a server that lacks the script
/// `EVAL <source>`, then `args` (`numkeys`, the KEYS, the ARGV).
pub(crate) struct ScriptCall<'a, A> {
    pub(crate) script: &'a Lua,
    pub(crate) source: bool,
    pub(crate) args: A,
}

impl<A: Command> Command for ScriptCall<'_, A> {
    fn write(&self, out: &mut impl Args) {
        if self.source {
            out.push(&[b"EVAL"]);
            out.push(&[self.script.code.as_bytes()]);
        } else {
            let sha = self.script.get_hash().as_bytes();
            out.push_packed(&self.script.head, &[b"EVALSHA", sha]);
        }
        self.args.write(out);
    }
}

/// [`invoke`] for a call described as a [`Command`] (`args`: `numkeys`, the KEYS, the
/// ARGV), packed straight into the connection's output where it can be (see `conn::pack`).
pub(crate) async fn invoke_args<T: FromRedisValue, A: Command + Sync>(
    script: &Lua,
    args: &A,
    conn: &mut Conn,
) -> redis::RedisResult<T> {
    let call = |source| ScriptCall {
        script,
        source,
        args,
    };
    let value = match conn.send(&call(false)).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            conn.send(&call(true)).await
        }
        other => other,
    }?;
    Ok(redis::from_redis_value(value)?)
}

/// Sends calls `0..n` as one pipeline with `send(indices, with_source)`, then those a server
/// answered `NOSCRIPT` again together, as `EVAL`s with the source (which also caches the
/// script there): a missing script costs a round trip, not a failed call. Fails only when the
/// first pipeline does; a failed second one leaves those answers `NOSCRIPT`.
pub(crate) async fn pipeline_with_scripts<F, Fut>(
    indices: &[usize],
    send: F,
) -> redis::RedisResult<Vec<Value>>
where
    F: Fn(Vec<usize>, bool) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<Vec<Value>>>,
{
    let mut values = send(indices.to_vec(), false).await?;
    let missing: Vec<usize> = (0..values.len().min(indices.len()))
        .filter(|&k| is_noscript(&values[k]))
        .collect();
    if !missing.is_empty() {
        let again = missing.iter().map(|&k| indices[k]).collect();
        if let Ok(retried) = send(again, true).await {
            for (&k, value) in missing.iter().zip(retried) {
                values[k] = value;
            }
        }
    }
    Ok(values)
}

/// True when a reply says the server lacks the script it was asked to run.
pub(crate) fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}
