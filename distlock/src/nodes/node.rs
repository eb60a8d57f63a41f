//! One Redis server the client talks to: its connections (a single node's lanes, a quorum
//! node's two, a Cluster's or Sentinel's one), how they are opened, and whether the node's
//! answers count (see `health`: the restart guard; `eviction`: servers that may evict keys).
use std::sync::Arc;
use std::time::Duration;

use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc;

use crate::algorithm::ServerQuirks;
use crate::conn::sentinel::SentinelSettings;
use crate::conn::{within, Conn, Link, PushSink, SentinelConn};
use crate::error::{Error, Op};

use super::commands::NativeCommands;
use super::eviction::EvictionCheck;
use super::health::{server_info, spawn_monitor, Health};

/// Connection settings shared by every node of a client.
#[derive(Clone)]
pub(crate) struct NodeSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `Some(delay)`: trust a node only once its server has been up for `delay`.
    pub(crate) restart_guard: Option<Duration>,
    /// Connections to a single node (see [`Node::lane`]); at least 1.
    pub(crate) lanes: usize,
    /// Lock on servers whose `maxmemory-policy` may evict keys (see [`super::eviction`]).
    pub(crate) allow_eviction: bool,
    /// PEM root certificate(s) to trust instead of the webpki roots (`rediss://` only).
    #[cfg(feature = "tls")]
    pub(crate) tls_root_cert: Option<Vec<u8>>,
}

pub(crate) struct Node {
    /// The node's first connection: subscriptions, watchdog batches, inspection.
    pub(crate) conn: Conn,
    /// Every connection of a single node, `conn` first; empty on a Cluster, through Sentinel
    /// and in a quorum, which use `conn` for everything.
    lanes: Vec<Conn>,
    pub(crate) addr: String,
    /// What the server was found to refuse (per node: another node may be newer).
    pub(crate) quirks: ServerQuirks,
    /// Whether the server may evict keys, read again after every reconnection.
    pub(crate) eviction: Arc<EvictionCheck>,
    /// Which native conditional commands the server has, read again after every
    /// reconnection.
    pub(crate) native: Arc<NativeCommands>,
    health: Arc<Health>,
    /// The task that re-reads the run_id after a disconnection; stopped with the node.
    monitor: Option<tokio::task::AbortHandle>,
}

impl Node {
    /// Opens the connections (RESP3, so release notifications arrive as push frames and feed
    /// `sink`). Fails within the connect timeout when no server answers, unless
    /// `lazy_if_down`: a quorum node that is down at start-up is then connected lazily, kept
    /// out of quorums until it answers (and, like every node, until its server has been up
    /// for the restart delay), and returned with the error that made it lazy.
    pub(crate) async fn connect(
        url: &str,
        settings: &NodeSettings,
        sink: PushSink,
        lazy_if_down: bool,
    ) -> Result<(Node, Option<Error>), Error> {
        let addr = crate::conn::url::redact(url);
        let bad_url =
            |e: redis::RedisError| Error::config(format!("cannot use Redis URL `{addr}`: {e}"));
        let info = url.into_connection_info().map_err(bad_url)?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info
            .set_redis_settings(resp3)
            .set_tcp_settings(crate::conn::link::tcp_settings());
        let client = open_client(info, settings).map_err(bad_url)?;
        let health = Arc::new(Health::default());
        let eviction = Arc::new(EvictionCheck::new(&addr, settings.allow_eviction));
        let native = Arc::new(NativeCommands::new());
        // The push handler lives inside the connection, so it must not own the connection
        // (a cycle would leak it): it only flags the node and wakes the monitor task.
        let (recheck, rechecks) = mpsc::unbounded_channel::<()>();
        let on_push: PushSink = {
            let (health, guarded) = (health.clone(), settings.restart_guard.is_some());
            let (recheck, eviction) = (recheck.clone(), eviction.clone());
            let native = native.clone();
            Arc::new(move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    eviction.reconnected();
                    native.reconnected();
                    if guarded {
                        health.suspect();
                        let _ = recheck.send(());
                    }
                }
                sink(push);
            })
        };
        // An acquisition connection that had to open again saw the server go away, perhaps
        // restarted (empty, or with another configuration): its eviction policy is read
        // again, and a guarded node is distrusted until its `INFO` is read, as when the first
        // connection says it was disconnected (whichever notices first).
        let reopened: Option<Arc<dyn Fn() + Send + Sync>> = {
            let (health, recheck) = (health.clone(), recheck.clone());
            let (guarded, eviction) = (settings.restart_guard.is_some(), eviction.clone());
            let native = native.clone();
            Some(Arc::new(move || {
                eviction.reconnected();
                native.reconnected();
                if guarded {
                    health.suspect();
                    let _ = recheck.send(());
                }
            }) as Arc<dyn Fn() + Send + Sync>)
        };
        let lanes = settings.lanes.max(1);
        let info = client.get_connection_info();
        let first = Link::new(
            info,
            settings.connect_timeout,
            settings.response_timeout,
            None,
            Some(on_push.clone()),
        );
        let (lanes, failure) = match first {
            // Plain TCP: distlock's own connections (`conn::link`), the first with the push
            // sink and the subscriptions, the others for commands only: no pushes to hear,
            // and their disconnections must not wake the waiters (the sink reads a disconnection as lost wake-ups).
            Some(first) => {
                let others = (1..lanes).filter_map(|_| {
                    Link::new(
                        info,
                        settings.connect_timeout,
                        settings.response_timeout,
                        reopened.clone(),
                        None,
                    )
                });
                let links: Vec<Link> = std::iter::once(first).chain(others).collect();
                // All at once: a node that answers one answers the others within the same
                // connect timeout. A node down at start-up keeps them: a link opens on use.
                let opened = futures_util::future::join_all(links.iter().map(Link::open)).await;
                let failure = match opened.into_iter().collect::<Result<(), _>>() {
                    Ok(()) => None,
                    Err(source) if lazy_if_down => Some(source),
                    Err(source) => return Err(connect_error(&addr, source)),
                };
                (links.into_iter().map(Conn::Link).collect(), failure)
            }
            None => Conn::managers(
                &client,
                (settings.connect_timeout, settings.response_timeout),
                lanes,
                on_push,
                lazy_if_down,
            )
            .await
            .map_err(|e| connect_error(&addr, e))?,
        };
        let conn: Conn = lanes.first().cloned().expect("at least one connection");
        let failure = failure.map(|e| connect_error(&addr, e));
        if failure.is_none() {
            // Refused at once rather than at the first lock: a misconfigured server is found
            // when the service starts.
            eviction.check(&mut conn.clone()).await?;
            native.has_set_ifeq(&conn).await;
        }
        let monitor = match settings.restart_guard {
            None => None,
            Some(delay) => {
                if failure.is_none() {
                    let info = server_info(&mut conn.clone())
                        .await
                        .map_err(|e| connect_error(&addr, e))?;
                    health.judge(info, delay);
                }
                Some(spawn_monitor(
                    conn.clone(),
                    health.clone(),
                    rechecks,
                    delay,
                    failure.is_some(),
                ))
            }
        };
        let node = Node {
            conn,
            lanes: if lanes.len() == 1 { Vec::new() } else { lanes },
            addr,
            quirks: ServerQuirks::default(),
            eviction,
            native,
            health,
            monitor,
        };
        Ok((node, failure))
    }

    /// Connects to a Redis Cluster through any of its nodes (RESP3, sharded wake-ups feed
    /// `sink`). redis-rs discovers the topology, routes each script to the master of its
    /// slot, follows `MOVED`/`ASK` and refreshes the slot map after a failover.
    pub(crate) async fn cluster(
        urls: &[String],
        settings: &NodeSettings,
        sink: PushSink,
    ) -> Result<Node, Error> {
        let addr = urls
            .iter()
            .map(|u| crate::conn::url::redact(u))
            .collect::<Vec<_>>()
            .join(",");
        let bad_url =
            |e: redis::RedisError| Error::config(format!("cannot use Redis URLs `{addr}`: {e}"));
        let infos = urls
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad_url)?;
        let eviction = Arc::new(EvictionCheck::new(&addr, settings.allow_eviction));
        let on_push = {
            let eviction = eviction.clone();
            move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    eviction.reconnected();
                }
                sink(push);
                Ok::<(), std::convert::Infallible>(())
            }
        };
        let client = redis::cluster::ClusterClientBuilder::new(infos)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(on_push)
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .build()
            .map_err(bad_url)?;
        let connecting = client.get_async_connection();
        let conn = within(settings.connect_timeout, connecting)
            .await
            .map_err(|e| connect_error(&addr, e))?;
        let mut conn = Conn::Cluster(conn);
        eviction.check(&mut conn).await?;
        Ok(Node {
            conn,
            lanes: Vec::new(),
            addr,
            quirks: ServerQuirks::default(),
            eviction,
            native: Arc::new(NativeCommands::scripts_only()),
            health: Arc::new(Health::default()),
            monitor: None,
        })
    }

    /// Connects to the master the sentinels at `urls` know as `master_name`, and follows it
    /// across failovers (see [`crate::conn::sentinel`]).
    pub(crate) async fn sentinel(
        urls: &[String],
        master_name: &str,
        settings: &NodeSettings,
        sink: PushSink,
    ) -> Result<Node, Error> {
        let addr = format!(
            "{} ({master_name})",
            urls.iter()
                .map(|u| crate::conn::url::redact(u))
                .collect::<Vec<_>>()
                .join(",")
        );
        let bad_url =
            |e: redis::RedisError| Error::config(format!("cannot use sentinel URLs `{addr}`: {e}"));
        let sentinels = urls
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad_url)?;
        // The data servers take the first sentinel URL's credentials and database.
        let data = sentinels
            .first()
            .map(|s| s.redis_settings().clone())
            .unwrap_or_default();
        let sentinel_settings = SentinelSettings {
            sentinels,
            master_name: master_name.to_owned(),
            data,
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
        };
        let eviction = Arc::new(EvictionCheck::new(&addr, settings.allow_eviction));
        let native = Arc::new(NativeCommands::new());
        // A new master, or the same one after a reconnection: its policy and its commands are
        // read again.
        let sink: PushSink = {
            let (eviction, native) = (eviction.clone(), native.clone());
            Arc::new(move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    eviction.reconnected();
                    native.reconnected();
                }
                sink(push);
            })
        };
        let (conn, monitor) = SentinelConn::connect(sentinel_settings, sink)
            .await
            .map_err(|e| connect_error(&addr, e))?;
        let mut conn = Conn::Sentinel(conn);
        eviction.check(&mut conn).await?;
        native.has_set_ifeq(&conn).await;
        Ok(Node {
            conn,
            lanes: Vec::new(),
            addr,
            quirks: ServerQuirks::default(),
            eviction,
            native,
            health: Arc::new(Health::default()),
            monitor: Some(monitor),
        })
    }

    /// The connection for the commands of a hold taken on `lane` (see `LockContext::lane`): all of them (its attempts, its
    /// release, the give-back of an abandoned attempt) travel on one connection, so they
    /// reach the server in the order they were sent, as on a client with one connection.
    /// Holds of different tasks spread over the lanes, so that many tasks locking at once
    /// are not all queued behind one connection's reader and writer. The first connection
    /// (`conn`, also `lanes[0]`) is left to the subscriptions, the watchdog's batches and
    /// inspection whenever there is another: no acquisition waits behind a batch of
    /// renewals, and a lost subscriptions' connection costs no attempt (`Notifier::rejoins`).
    pub(crate) fn lane(&self, lane: u32) -> Conn {
        match self.lanes.len() {
            0 | 1 => self.conn.clone(),
            n => self.lanes[1 + lane as usize % (n - 1)].clone(),
        }
    }

    /// The connection for a quorum's commands on this node (attempts, releases, renewals
    /// asked by hand, fence raises): its acquisition connection when it has one.
    pub(crate) fn commands(&self) -> Conn {
        match self.lanes.get(1) {
            Some(lane) => lane.clone(),
            None => self.conn.clone(),
        }
    }

    /// True when this node's answers count toward a quorum now.
    pub(crate) fn trusted(&self) -> bool {
        self.health.trusted()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(monitor) = &self.monitor {
            monitor.abort();
        }
    }
}

/// The redis-rs client for one node, trusting the configured root certificate if any.
fn open_client(
    info: redis::ConnectionInfo,
    settings: &NodeSettings,
) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(root) = &settings.tls_root_cert {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root.clone()),
        };
        return redis::Client::build_with_tls(info, certificates);
    }
    let _ = settings;
    redis::Client::open(info)
}

fn connect_error(addr: &str, source: redis::RedisError) -> Error {
    Error::server(Op::Connect, addr, source)
}
