//! What the scripts touch, and how they behave on servers that differ from the one they were
//! written on.
//!
//! * Every key a script reads or writes is declared in its KEYS (Redis Cluster and ACL key
//!   patterns rely on the declaration; Redis 7.0 does not enforce it, so a checking wrapper
//!   around `redis.call` does, on a real server).
//! * Every argument a script passes to `redis.call` is a string: Redis 7.2.0 to 7.2.4 turn a
//!   Lua number into text as `1.8e+15`, after which the counter (or the ttl) is refused.
//! * A release whose `PUBLISH` fails (`SPUBLISH` on a Redis 6 Cluster) still frees the lock and
//!   says so; publishing is best-effort.
//! * A server that refuses `SET .. NX .. GET` (Redis 6) changes how the acquisitions on that
//!   server are sent, not those of other clients on other servers.

use crate::common;

use std::time::Duration;

use common::{as_other_owner, client};
use distlock::Client;
use distlock_testkit::RedisServer;
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod fenced;
mod modes;
mod refusals;
mod sets;

/// A script's source as the library composes it: the files under `distlock/src`, in order.
fn script(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|part| {
            let path = format!("{}/../distlock/src/{part}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Put in front of a script, this `redis` shadows Redis's own: every command the script runs
/// goes through it, and it fails the script (with `SHIM:` in the error) when an argument is
/// not a string or a key the command touches is not one of the script's KEYS.
const CHECKED: &str = r#"
local real = redis
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end
local keyless = {time = true, publish = true, spublish = true}
local function fault(cmd, ...)
  local n = select('#', ...)
  local args = {...}
  local name = string.lower(cmd)
  local last = 1
  if keyless[name] then last = 0 end
  if name == 'del' or name == 'exists' then last = n end
  for i = 1, math.min(last, n) do
    if not declared[args[i]] then
      return cmd .. ' touches `' .. tostring(args[i]) .. '`, which is not among the KEYS'
    end
  end
  for i = 1, n do
    if type(args[i]) ~= 'string' then
      return 'argument ' .. i .. ' of ' .. cmd .. ' is a ' .. type(args[i]) .. ' (' .. tostring(args[i]) .. ')'
    end
  end
  return nil
end
local redis = setmetatable({
  call = function(cmd, ...)
    local bad = fault(cmd, ...)
    if bad then error('SHIM: ' .. bad) end
    return real.call(cmd, ...)
  end,
  pcall = function(cmd, ...)
    local bad = fault(cmd, ...)
    if bad then error('SHIM: ' .. bad) end
    return real.pcall(cmd, ...)
  end,
}, {__index = real})
"#;

/// Runs `source` behind [`CHECKED`] on `server`; a failure of the check fails the test.
async fn run(
    conn: &mut redis::aio::MultiplexedConnection,
    what: &str,
    source: &str,
    keys: &[&str],
    args: &[&str],
) -> Value {
    let mut eval = redis::cmd("EVAL");
    eval.arg(format!("{CHECKED}\n{source}")).arg(keys.len());
    for k in keys {
        eval.arg(*k);
    }
    for a in args {
        eval.arg(*a);
    }
    match eval.query_async::<Value>(conn).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::Array(items) => int(&items[0]),
        other => panic!("not a number: {other:?}"),
    }
}

/// A read/write lock helper key (`readers`, `intents`) beside the lock key `lock` (whose
/// prefix is `distlock`): what inspect and force unlock declare for any name.
fn rw_helper(lock: &str, kind: &str) -> String {
    lock.replacen("distlock:", &format!("distlock:#{kind}:"), 1)
}

/// The second item of a `{status, value}` reply.
fn second(v: &Value) -> i64 {
    match v {
        Value::Array(items) => int(&items[1]),
        other => panic!("not a pair: {other:?}"),
    }
}
