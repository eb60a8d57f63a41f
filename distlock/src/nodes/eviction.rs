//! A server that may evict keys may evict a held lock.
//!
//! Under memory pressure a Redis server with any `maxmemory-policy` but `noeviction` deletes
//! keys to make room, and lock keys carry a ttl, so the `volatile-*` policies pick them first:
//! a second owner then takes a lock whose first owner still says held, for the rest of its
//! lease, and nothing tells either of them. So each node's policy is read (`INFO memory`) when
//! the client connects and again after every reconnection (the server may be another one now,
//! or restarted with another configuration), before the next acquisition on it; a policy that
//! may evict is refused with [`Error::InvalidConfig`] unless the client opted in
//! ([`ClientBuilder::allow_eviction`](crate::ClientBuilder::allow_eviction)), which is logged at
//! WARN each time the policy is read.

use std::sync::atomic::{AtomicU8, Ordering};

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::Value;

use crate::conn::Conn;
use crate::error::{Error, Op};

/// Not read since the connection (re)opened.
const UNKNOWN: u8 = 0;
/// `noeviction`, or an evicting policy the client opted in to.
const ACCEPTED: u8 = 1;

/// What one node's server was found to do under memory pressure.
pub(crate) struct EvictionCheck {
    state: AtomicU8,
    /// The client opted in to servers that may evict: read nothing, refuse nothing.
    allowed: bool,
    /// The node's address, for messages.
    addr: String,
}

impl EvictionCheck {
    pub(crate) fn new(addr: &str, allowed: bool) -> EvictionCheck {
        if allowed {
            tracing::warn!(
                server = addr,
                "eviction allowed: a server under memory pressure may delete a held lock, and a second owner take it"
            );
        }
        EvictionCheck {
            state: AtomicU8::new(if allowed { ACCEPTED } else { UNKNOWN }),
            allowed,
            addr: addr.to_owned(),
        }
    }

    /// A connection to the node opened again: the policy is read before the next acquisition.
    pub(crate) fn reconnected(&self) {
        if !self.allowed {
            self.state.store(UNKNOWN, Ordering::Release);
        }
    }

    /// Ok when locks may be taken on this node; reads the policy first if it is not known.
    /// A transport failure is returned as such (the acquisition is retried, the policy read
    /// again); a policy that may evict is refused for as long as it is the server's.
    pub(crate) async fn check(&self, conn: &mut Conn) -> Result<(), Error> {
        if self.state.load(Ordering::Acquire) == ACCEPTED {
            return Ok(());
        }
        // Boxed: once per server, and its state would otherwise size every acquisition's future.
        let policies = Box::pin(read_policies(conn)).await.map_err(|e| {
            if e.code() == Some("NOPERM") {
                return Error::config(format!(
                    "the Redis user at {} may not run INFO, which the client needs to check that                      the server does not evict held locks: grant it +info, or skip the check with                      ClientBuilder::allow_eviction(true) ({e})",
                    self.addr
                ));
            }
            Error::server(Op::Connect, &self.addr, e)
        })?;
        if policies.is_empty() {
            // Not Redis's INFO (a proxy or another server speaking its protocol): nothing to
            // refuse, but nothing verified either.
            tracing::warn!(
                server = %self.addr,
                "INFO memory names no maxmemory_policy: cannot tell whether the server may evict held locks"
            );
        }
        match policies.iter().find(|policy| *policy != "noeviction") {
            Some(policy) => Err(Error::config(format!(
                "the Redis server at {} may evict keys under memory pressure (maxmemory-policy {policy}): \
                 a held lock could vanish and a second owner take it. Run it with maxmemory-policy \
                 noeviction, or accept the risk with ClientBuilder::allow_eviction(true)",
                self.addr
            ))),
            None => {
                self.state.store(ACCEPTED, Ordering::Release);
                Ok(())
            }
        }
    }
}

/// The `maxmemory_policy` of the server behind `conn`: of every master on a Cluster.
async fn read_policies(conn: &mut Conn) -> redis::RedisResult<Vec<String>> {
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    let reply: Value = match conn {
        Conn::Cluster(cluster) => {
            // Without a response policy, each master's answer comes back by its address.
            let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            cluster.route_command(info, all).await?
        }
        other => info.query_async(other).await?,
    };
    let mut texts = Vec::new();
    collect_texts(&reply, &mut texts);
    Ok(texts.iter().filter_map(|t| policy_of(t)).collect())
}

/// The texts in an `INFO` reply: one, or one per node of a Cluster (an array or a map).
fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::SimpleString(text) => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            for item in items {
                collect_texts(item, out);
            }
        }
        Value::Map(pairs) => {
            for (_, item) in pairs {
                collect_texts(item, out);
            }
        }
        _ => {}
    }
}

/// The `maxmemory_policy:` field of one `INFO` text.
fn policy_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(|policy| policy.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_each_node_of_a_reply() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:volatile-ttl\r\n";
        assert_eq!(policy_of(info).as_deref(), Some("volatile-ttl"));
        assert_eq!(policy_of("# Memory\r\nused_memory:1\r\n"), None);
        let reply = Value::Map(vec![
            (
                Value::SimpleString("a:1".into()),
                Value::BulkString(b"maxmemory_policy:noeviction\r\n".to_vec()),
            ),
            (
                Value::SimpleString("b:2".into()),
                Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: "maxmemory_policy:allkeys-lru\r\n".into(),
                },
            ),
        ]);
        let mut texts = Vec::new();
        collect_texts(&reply, &mut texts);
        let policies: Vec<String> = texts.iter().filter_map(|t| policy_of(t)).collect();
        assert_eq!(policies, ["noeviction", "allkeys-lru"]);
    }
}
