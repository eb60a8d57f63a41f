//! The connection to one deployment: a single node, a Redis Cluster, or a master found through
//! Sentinel.
//!
//! Everything above this module (the scripts, the acquire loop, the quorum layer, the
//! watchdog, the wake-ups) talks to a [`Conn`] through `redis::aio::ConnectionLike` and does
//! not know which deployment is behind it. The differences live here:
//!
//! * **single node**: over plain TCP, distlock's own connections ([`Link`]), which reopen by
//!   themselves: the first carries the subscriptions (it hears the pushes), renewals and
//!   inspection, the others the acquisitions, each acquisition's commands on one of them (see
//!   `nodes::Node::lane`); each node of a Redlock quorum has two, the first and one for its
//!   commands (`nodes::Node::commands`). Over TLS (`rediss://`) or a Unix socket, redis-rs's
//!   `ConnectionManager`s in the same roles;
//! * **Cluster**: redis-rs's cluster connection routes every script by its first key (all keys
//!   of one lock share a slot), follows `MOVED`/`ASK` and refreshes the topology after a
//!   failover. Wake-ups use sharded pub/sub (`SSUBSCRIBE`, and the release scripts
//!   `SPUBLISH`), so a release is heard on the slot's shard only, not broadcast to the
//!   whole cluster;
//! * **Sentinel**: see [`sentinel`].

pub(crate) mod link;
pub(crate) mod pack;
mod read;
pub(crate) mod resp;
pub(crate) mod sentinel;
mod subscriptions;
pub(crate) mod url;
mod wire;

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

pub(crate) use link::Link;
pub(crate) use pack::{Args, Command};
pub(crate) use sentinel::SentinelConn;
pub(crate) use wire::PushSink;

/// A connection to one deployment; cheap to clone (clones share the connection).
#[derive(Clone)]
pub(crate) enum Conn {
    /// A connection of a single node or quorum node over TLS or a Unix socket.
    Single(ConnectionManager),
    /// A connection of a single node or quorum node over plain TCP (see [`link`]).
    Link(Link),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Link(c) => c.req_packed_command(cmd),
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
            Conn::Link(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Link(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// redis-rs's `ConnectionManager` settings, as every connection of this crate that uses one
/// takes them: the client's timeouts, and a reconnection that is quick after a restart but
/// never spins (at most 1 s between tries).
pub(crate) fn manager_config(
    connect_timeout: Duration,
    response_timeout: Duration,
) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_secs(1))
}

/// What a request or a connection that took too long is told: an I/O timeout, which callers
/// treat as transient.
pub(crate) fn no_answer_within(limit: Duration) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {limit:?}"),
    )
    .into()
}

/// `future`, or [`no_answer_within`] `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    future: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| Err(no_answer_within(limit)))
}

impl Conn {
    /// The connections to a node over TLS or a Unix socket, which [`link`] does not speak:
    /// `lanes` redis-rs `ConnectionManager`s, the first with the push sink and the
    /// subscriptions (which redis-rs subscribes again after a reconnection), the others for
    /// commands only, each opened within the connect timeout of `timeouts` (connect,
    /// response). A node down at start-up (`lazy_if_down`) gets one, connected lazily, and the
    /// error.
    pub(crate) async fn managers(
        client: &redis::Client,
        timeouts: (Duration, Duration),
        lanes: usize,
        on_push: PushSink,
        lazy_if_down: bool,
    ) -> RedisResult<(Vec<Conn>, Option<redis::RedisError>)> {
        let (connect_timeout, response_timeout) = timeouts;
        let plain = manager_config(connect_timeout, response_timeout);
        let first = plain
            .clone()
            .set_push_sender(move |push: redis::PushInfo| {
                on_push(push);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();
        // All at once: a node that answers one answers the others within the same timeout.
        let connecting = (0..lanes).map(|lane| {
            let config = if lane == 0 { &first } else { &plain };
            let connecting = ConnectionManager::new_with_config(client.clone(), config.clone());
            within(connect_timeout, Box::pin(connecting))
        });
        let opened: RedisResult<Vec<ConnectionManager>> =
            futures_util::future::join_all(connecting)
                .await
                .into_iter()
                .collect();
        match opened {
            Ok(managers) => Ok((managers.into_iter().map(Conn::Single).collect(), None)),
            Err(source) if lazy_if_down => {
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), first)?;
                Ok((vec![Conn::Single(conn)], Some(source)))
            }
            Err(source) => Err(source),
        }
    }

    /// Sends `command` and returns its answer, a server error as `Err` (as
    /// `Cmd::query_async` does). On distlock's own connections the command is packed straight
    /// into the bytes waiting to be written; the others get it as a `Cmd`.
    pub(crate) async fn send(&mut self, command: &(impl Command + Sync)) -> RedisResult<Value> {
        let answer = match self {
            // Boxed, as redis-rs boxes every request: the wait for the answer would otherwise
            // size (and be moved with) each caller's future.
            Conn::Link(link) => Box::pin(link.call(|out| pack::pack(out, command), 1))
                .await?
                .pop()
                .unwrap_or(Value::Nil),
            other => Box::pin(other.query_cmd(pack::to_cmd(command))).await?,
        };
        answer.extract_error()
    }

    /// Sends `commands` as one pipeline and returns their answers, one per command, a
    /// server's error in its command's place; fails only when the pipeline does. On
    /// distlock's own connections the commands are packed straight into the bytes waiting to
    /// be written; the others get them as a `redis::Pipeline`.
    pub(crate) async fn send_each<C: Command + Sync>(
        &mut self,
        commands: &[C],
    ) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Link(link) => {
                let write = |out: &mut Vec<u8>| {
                    for command in commands {
                        pack::pack(out, command);
                    }
                };
                Box::pin(link.call(write, commands.len())).await
            }
            other => {
                let pipeline = pack::pipeline(commands);
                Box::pin(other.req_packed_commands(&pipeline, 0, pipeline.len())).await
            }
        }
    }

    /// `cmd`'s raw answer, the command kept in this future rather than in the caller's.
    async fn query_cmd(&mut self, cmd: Cmd) -> RedisResult<Value> {
        self.req_packed_command(&cmd).await
    }

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
            Conn::Link(c) => c.subscribe(channel).await,
            Conn::Cluster(c) => c.ssubscribe(channel).await,
            Conn::Sentinel(c) => c.subscribe(channel).await,
        }
    }

    /// Publishes `payload` on a lock's wake-up channel, as [`subscribe`](Self::subscribe)
    /// listens to it: `SPUBLISH` on a Cluster (heard on the channel's shard), else `PUBLISH`.
    /// A Redis 6 Cluster refuses `SPUBLISH`, as it refuses the subscription: nobody there
    /// listens on the channel, and the refusal is the answer.
    pub(crate) async fn publish(&mut self, channel: &[u8], payload: &[u8]) -> RedisResult<()> {
        let mut publish = redis::cmd(if self.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        });
        publish.arg(channel).arg(payload);
        publish.query_async::<Value>(self).await.map(drop)
    }

    /// Undoes [`subscribe`](Self::subscribe).
    pub(crate) async fn unsubscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Conn::Single(c) => c.unsubscribe(channel).await,
            Conn::Link(c) => c.unsubscribe(channel).await,
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

impl Conn {
    /// Sends `pipeline` as one request to the cluster node at `host:port` (the master that
    /// [`SlotOwners`] says serves its keys' slots); answers come back one per command, a
    /// `MOVED` among them where that node no longer serves a slot.
    pub(crate) async fn pipeline_to_node(
        &mut self,
        pipeline: &Pipeline,
        host: &str,
        port: u16,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Cluster(c) => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.to_owned(),
                    port,
                };
                c.route_pipeline(pipeline.clone(), 0, pipeline.len(), route)
                    .await
            }
            other => other.req_packed_commands(pipeline, 0, pipeline.len()).await,
        }
    }
}

/// Which master serves which slots, as `CLUSTER SLOTS` last said. It lets the watchdog send
/// one pipeline per master rather than one per slot (10,000 held locks sit on about as many
/// slots). Only a hint: a renewal sent to a master that lost its slot is answered `MOVED` and
/// sent again through the routing that follows redirections, and the map is read again.
#[derive(Debug, Default)]
pub(crate) struct SlotOwners {
    /// `(first slot, last slot, host, port)`, sorted by first slot.
    ranges: Vec<(u16, u16, String, u16)>,
    read_at: Option<std::time::Instant>,
    stale: bool,
}

impl SlotOwners {
    /// A map older than this is read again before use: topology changes that caused no
    /// error yet (a failover between two ticks) are noticed within it.
    const MAX_AGE: Duration = Duration::from_secs(5);

    pub(crate) fn needs_reading(&self) -> bool {
        self.stale || self.read_at.is_none_or(|t| t.elapsed() > Self::MAX_AGE)
    }

    /// Something was sent to the wrong master: read the map again before the next use.
    pub(crate) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// The master serving `slot`, if the map knows one.
    pub(crate) fn owner(&self, slot: u16) -> Option<(&str, u16)> {
        let i = self
            .ranges
            .partition_point(|r| r.0 <= slot)
            .checked_sub(1)?;
        let (first, last, host, port) = &self.ranges[i];
        (*first <= slot && slot <= *last).then_some((host.as_str(), *port))
    }

    /// Reads the map with `CLUSTER SLOTS` (sent to any node). On failure the old map stays,
    /// still marked for reading.
    pub(crate) async fn read(&mut self, conn: &mut Conn) {
        let Ok(reply) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Value>(conn)
            .await
        else {
            return;
        };
        self.ranges = parse_cluster_slots(&reply);
        self.ranges.sort_unstable_by_key(|r| r.0);
        self.read_at = Some(std::time::Instant::now());
        self.stale = false;
    }
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, ..], replicas..], ..]`. Ranges whose
/// master has no usable address (an empty or `?` host) are left out: their slots go through
/// the per-slot routing.
fn parse_cluster_slots(reply: &Value) -> Vec<(u16, u16, String, u16)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (first, last) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let Value::Array(master) = parts.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let port = int(master.get(1)?)?;
            (!host.is_empty() && host != "?").then_some((first, last, host, port))
        })
        .collect()
}
