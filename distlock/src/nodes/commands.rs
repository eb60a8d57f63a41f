//! Which of the server's own conditional commands a node has: `SET key value IFEQ old`
//! (Valkey 8.1, Redis 8.4), with which the watchdog renews a setnx lease without a script.
//!
//! Read with `COMMAND DOCS SET` (the option is listed among its arguments) when the client
//! connects, and again before the next renewal after every reconnection: the server behind an
//! address may be another one now (a Sentinel failover to a replica of another version, a
//! restart of another binary on the same port). Nodes of one client are read one by one, so a
//! quorum of different versions renews natively where it can and by script elsewhere.
//!
//! Nothing depends on the reading being current: a renewal that an older server refuses as a
//! syntax error is sent again as the script, and the node marked as lacking the command until
//! it is read again (see `watchdog::send`). A Redis Cluster is left to the scripts: its
//! masters can be of several versions, and each would need a reading of its own.

use std::sync::atomic::{AtomicU32, Ordering};

use redis::Value;

use crate::conn::Conn;

/// Not read since the connection (re)opened.
const UNKNOWN: u32 = 0;
/// The server has `SET .. IFEQ`.
const NATIVE: u32 = 1;
/// It has not (or may not be asked): renewals go as scripts.
const SCRIPTS: u32 = 2;
/// The state's bits; the others count reconnections, so that a reading taken across one is
/// not kept.
const STATE: u32 = 3;

/// What one node's server was found to have.
pub(crate) struct NativeCommands {
    state: AtomicU32,
}

impl NativeCommands {
    pub(crate) fn new() -> NativeCommands {
        NativeCommands {
            state: AtomicU32::new(UNKNOWN),
        }
    }

    /// For a Cluster: never read, always the scripts.
    pub(crate) fn scripts_only() -> NativeCommands {
        NativeCommands {
            state: AtomicU32::new(SCRIPTS),
        }
    }

    /// A connection to the node opened again: read the commands before the next renewal.
    pub(crate) fn reconnected(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((s & !STATE).wrapping_add(STATE + 1))
            });
    }

    /// The server refused a native renewal as a syntax error: it lacks the command.
    pub(crate) fn lacking(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some(s & !STATE | SCRIPTS)
            });
    }

    /// True when renewals on this node may use `SET .. IFEQ`; reads the server's commands
    /// first if they are not known. A reading that fails in transit leaves them unknown (this
    /// batch goes as scripts, the next one reads again); a server that refuses `COMMAND DOCS`
    /// (older than Redis 7, or an ACL without it) is taken to lack the command until the
    /// node reconnects.
    pub(crate) async fn has_set_ifeq(&self, conn: &Conn) -> bool {
        let before = self.state.load(Ordering::Acquire);
        match before & STATE {
            NATIVE => return true,
            SCRIPTS => return false,
            _ => {}
        }
        let mut docs = redis::cmd("COMMAND");
        docs.arg("DOCS").arg("SET");
        // Boxed: once per connection, and it would otherwise size every renewal's future.
        let read = Box::pin(docs.query_async::<Value>(&mut conn.clone())).await;
        let found = match read {
            Ok(reply) if lists_token(&reply, b"IFEQ") => NATIVE,
            Ok(_) => SCRIPTS,
            Err(e)
                if e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal() =>
            {
                return false
            }
            Err(_) => SCRIPTS,
        };
        // Kept only if the node did not reconnect meanwhile.
        let _ = self.state.compare_exchange(
            before,
            before | found,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        found == NATIVE
    }
}

/// True when a `COMMAND DOCS` reply names `token` (an option's token, as `IFEQ`) anywhere.
fn lists_token(value: &Value, token: &[u8]) -> bool {
    match value {
        Value::BulkString(bytes) => bytes.eq_ignore_ascii_case(token),
        Value::SimpleString(text) => text.as_bytes().eq_ignore_ascii_case(token),
        Value::Array(items) | Value::Set(items) => items.iter().any(|v| lists_token(v, token)),
        Value::Map(pairs) => pairs
            .iter()
            .any(|(k, v)| lists_token(k, token) || lists_token(v, token)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_is_found_among_the_arguments() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ifeq = Value::Map(vec![
            (bulk("name"), bulk("comparison-value")),
            (bulk("token"), bulk("IFEQ")),
        ]);
        let docs = Value::Map(vec![(
            bulk("set"),
            Value::Map(vec![(bulk("arguments"), Value::Array(vec![ifeq]))]),
        )]);
        assert!(lists_token(&docs, b"IFEQ"));
        let older = Value::Map(vec![(
            bulk("set"),
            Value::Map(vec![(
                bulk("arguments"),
                Value::Array(vec![Value::Map(vec![(bulk("token"), bulk("NX"))])]),
            )]),
        )]);
        assert!(!lists_token(&older, b"IFEQ"));
        // The summary mentions the option in prose: only a whole value counts.
        assert!(!lists_token(
            &bulk("8.1.0 Added the `IFEQ` option."),
            b"IFEQ"
        ));
    }
}
