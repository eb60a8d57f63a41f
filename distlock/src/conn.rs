//! The connection to one deployment: a single node, a Redis Cluster, or a master found through
//! Sentinel.
//!
//! Everything above this module (the scripts, the acquire loop, the quorum layer, the
//! watchdog, the wake-ups) talks to a [`Conn`] through `redis::aio::ConnectionLike` and does
//! not know which deployment is behind it. The differences live here:
//!
//! * **single node**: redis-rs's `ConnectionManager`, which reconnects by itself;
//! * **Cluster**: redis-rs's cluster connection routes every script by its first key (all keys
//!   of one lock share a slot), follows `MOVED`/`ASK` and refreshes the topology after a
//!   failover. Wake-ups use sharded pub/sub (`SSUBSCRIBE`, and the release scripts
//!   `SPUBLISH`), so a release is heard on the slot's shard only, not broadcast to the
//!   whole cluster;
//! * **Sentinel**: see [`sentinel`].

pub(crate) mod sentinel;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

pub(crate) use sentinel::SentinelConn;

/// A connection to one deployment; cheap to clone (clones share the connection).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// True on a Redis Cluster: wake-ups use sharded pub/sub there.
    pub(crate) fn sharded(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Subscribes to a lock's wake-up channel (`SSUBSCRIBE` on a Cluster, on the shard that
    /// owns the channel's slot). The subscription is confirmed when this returns, and is
    /// renewed by itself after reconnections (and, on a Cluster, topology changes).
    pub(crate) async fn subscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Conn::Single(c) => c.subscribe(channel).await,
            Conn::Cluster(c) => c.ssubscribe(channel).await,
            Conn::Sentinel(c) => c.subscribe(channel).await,
        }
    }

    /// Undoes [`subscribe`](Self::subscribe).
    pub(crate) async fn unsubscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Conn::Single(c) => c.unsubscribe(channel).await,
            Conn::Cluster(c) => c.sunsubscribe(channel).await,
            Conn::Sentinel(c) => c.unsubscribe(channel).await,
        }
    }

    /// Sends `pipeline` as one request to the master serving `slot` (a Cluster), or to the one
    /// server: every command of it travels on one connection, in order. Answers come back
    /// one per command, errors included.
    pub(crate) async fn pipeline_to_slot(
        &mut self,
        pipeline: &Pipeline,
        slot: u16,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Cluster(c) => {
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                c.route_pipeline(pipeline.clone(), 0, pipeline.len(), route)
                    .await
            }
            other => other.req_packed_commands(pipeline, 0, pipeline.len()).await,
        }
    }
}

/// The Redis Cluster slot of a key: CRC16 of its hash tag (or of the whole key without one),
/// modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let len = key[open + 1..].iter().position(|&b| b == b'}')?;
        (len > 0).then(|| &key[open + 1..open + 1 + len])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_computed_like_redis_cluster() {
        // `CLUSTER KEYSLOT` answers.
        assert_eq!(super::slot(b"foo"), 12182);
        assert_eq!(
            super::slot(b"{user1000}.following"),
            super::slot(b"user1000")
        );
        assert_eq!(
            super::slot(b"distlock:{order:42}:fence"),
            super::slot(b"order:42")
        );
        assert_eq!(super::slot(b"a{}b"), super::slot(b"a{}b")); // empty tag: whole key
    }
}
