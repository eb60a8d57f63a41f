//! One Redis server the client talks to: its connection, and whether its votes can be trusted.
//!
//! A Redis master restarted without its data has forgotten every lock it held. In a quorum,
//! that lets a second client win a majority while the first still holds the lock (the hazard
//! the Redlock description calls out). A node's vote therefore counts only once its server has
//! been up for the restart delay (set it to your longest ttl): by then every lock it may have
//! forgotten has expired on the other nodes. Each quorum node reads `INFO server` when it is
//! first connected and again after every reconnection (from the disconnection until that
//! answer the node is suspect and casts no vote):
//!
//! * **uptime**: a server that may have been up for less than the delay casts no vote until
//!   it surely has. This covers a client that starts after a node restarted (a deploy,
//!   autoscaling) and so never saw the server that forgot the locks, and a node that was down
//!   when the client started. Redis computes `uptime_in_seconds` from whole seconds of its
//!   clock (now and start time, each truncated), so a reported `u` means more than `u - 1`
//!   seconds: the node waits `delay - (u - 1 s)` more, never less than needed and at most 2 s
//!   more. A server whose `INFO` has no uptime counts as just started;
//! * **`run_id`**: if it changed across a disconnection, the server restarted while this client
//!   watched, and the node casts no vote for the full delay.
//!
//! The price: on a freshly started deployment a quorum client cannot lock until its nodes have
//! been up for the restart delay. `Duration::ZERO` turns the guard off (nothing is read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc;

use crate::algorithm::ServerQuirks;
use crate::conn::sentinel::SentinelSettings;
use crate::conn::{within, Conn, Link, PushSink, SentinelConn};
use crate::error::{Error, Op};

use super::eviction::EvictionCheck;
use crate::sync::lock;

/// How often a suspect node's `run_id` is read again while it does not answer.
const RECHECK: Duration = Duration::from_millis(100);

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
    health: Arc<Health>,
    /// The task that re-reads the run_id after a disconnection; stopped with the node.
    monitor: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct Health {
    run_id: Mutex<Option<String>>,
    /// Set on disconnection; cleared once `INFO server` was read again.
    suspect: AtomicBool,
    /// The server is younger than the restart delay, or restarted: no votes before this instant.
    distrust_until: Mutex<Option<Instant>>,
}

impl Health {
    /// Judges the server by what `INFO server` just said: a `run_id` other than the one
    /// known means a restart seen while watching (the full delay); otherwise the server's
    /// own uptime decides (the rest of the delay, counting the uptime it surely has). Never
    /// shortens a distrust in force.
    fn judge(&self, info: ServerInfo, delay: Duration) {
        let now = Instant::now();
        let mut known = lock(&self.run_id);
        let wait = match known.as_deref() {
            Some(id) if id != info.run_id => delay,
            _ => delay.saturating_sub(info.surely_up()),
        };
        if !wait.is_zero() {
            // `restart_delay(Duration::MAX)` means "never trust a restarted node", not a panic.
            let until = crate::lease::after(now, wait);
            let mut distrust = lock(&self.distrust_until);
            if distrust.is_none_or(|t| t < until) {
                *distrust = Some(until);
            }
        }
        *known = Some(info.run_id);
    }
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
        // The push handler lives inside the connection, so it must not own the connection
        // (a cycle would leak it): it only flags the node and wakes the monitor task.
        let (recheck, rechecks) = mpsc::unbounded_channel::<()>();
        let on_push: PushSink = {
            let (health, guarded) = (health.clone(), settings.restart_guard.is_some());
            let (recheck, eviction) = (recheck.clone(), eviction.clone());
            Arc::new(move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    eviction.reconnected();
                    if guarded {
                        health.suspect.store(true, Ordering::Release);
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
            Some(Arc::new(move || {
                eviction.reconnected();
                if guarded {
                    health.suspect.store(true, Ordering::Release);
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
        // A new master, or the same one after a reconnection: its policy is read again.
        let sink: PushSink = {
            let eviction = eviction.clone();
            Arc::new(move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    eviction.reconnected();
                }
                sink(push);
            })
        };
        let (conn, monitor) = SentinelConn::connect(sentinel_settings, sink)
            .await
            .map_err(|e| connect_error(&addr, e))?;
        let mut conn = Conn::Sentinel(conn);
        eviction.check(&mut conn).await?;
        Ok(Node {
            conn,
            lanes: Vec::new(),
            addr,
            quirks: ServerQuirks::default(),
            eviction,
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
        if self.health.suspect.load(Ordering::Acquire) {
            return false;
        }
        lock(&self.health.distrust_until).is_none_or(|t| Instant::now() >= t)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(monitor) = &self.monitor {
            monitor.abort();
        }
    }
}

/// Watches one node: after every disconnection (and at once for a node that was down at
/// start-up) reads `INFO server` until the server answers, and judges it by its `run_id` and
/// uptime ([`Health::judge`]). The node stays suspect, casting no vote, until then.
fn spawn_monitor(
    conn: Conn,
    health: Arc<Health>,
    mut rechecks: mpsc::UnboundedReceiver<()>,
    delay: Duration,
    check_now: bool,
) -> tokio::task::AbortHandle {
    if check_now {
        health.suspect.store(true, Ordering::Release);
    }
    tokio::spawn(async move {
        let mut pending = check_now;
        loop {
            if !pending && rechecks.recv().await.is_none() {
                return;
            }
            pending = false;
            while rechecks.try_recv().is_ok() {}
            let info = until_answered(RECHECK, || {
                let mut conn = conn.clone();
                async move { server_info(&mut conn).await }
            })
            .await;
            health.judge(info, delay);
            health.suspect.store(false, Ordering::Release);
        }
    })
    .abort_handle()
}

/// Asks until the server answers, pausing `pause` after each failure. After a disconnection
/// the first answer comes once redis-rs has connected again, and on a connection with
/// subscriptions, once it has sent them again (they go first on the new connection).
pub(crate) async fn until_answered<T, F, Fut>(pause: Duration, mut ask: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    loop {
        if let Ok(answer) = ask().await {
            return answer;
        }
        tokio::time::sleep(pause).await;
    }
}

/// What `INFO server` says about the server process.
struct ServerInfo {
    run_id: String,
    /// `uptime_in_seconds`: the server's clock now minus its start time, both in whole
    /// seconds, so the true uptime may be up to 1 s less (or more).
    uptime: Duration,
}

impl ServerInfo {
    /// The uptime the server has for certain: one second less than it reports.
    fn surely_up(&self) -> Duration {
        self.uptime.saturating_sub(Duration::from_secs(1))
    }
}

async fn server_info(conn: &mut Conn) -> redis::RedisResult<ServerInfo> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    parse_server_info(&info).ok_or_else(|| {
        (
            redis::ErrorKind::UnexpectedReturnType,
            "INFO server has no run_id",
        )
            .into()
    })
}

/// `None` without a `run_id`. A missing or unreadable uptime counts as 0: just started.
fn parse_server_info(info: &str) -> Option<ServerInfo> {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key == name).then(|| value.trim())
        })
    };
    let run_id = field("run_id")?.to_owned();
    let uptime = field("uptime_in_seconds")
        .and_then(|s| s.parse().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    Some(ServerInfo { run_id, uptime })
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
    Error::Redis {
        op: Op::Connect,
        key: Some(addr.to_owned()),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_run_id_and_uptime() {
        let info = "# Server\r\nredis_version:7.2.4\r\nrun_id:abc123\r\ntcp_port:6379\r\n\
            uptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        let parsed = parse_server_info(info).expect("run_id present");
        assert_eq!(parsed.run_id, "abc123");
        assert_eq!(parsed.uptime, Duration::from_secs(42));
        let young = parse_server_info("run_id:x\r\n").expect("run_id present");
        assert_eq!(
            young.uptime,
            Duration::ZERO,
            "no uptime: counted as just started"
        );
        assert!(parse_server_info("uptime_in_seconds:5\r\n").is_none());
    }

    fn info(run_id: &str, uptime_secs: u64) -> ServerInfo {
        ServerInfo {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime_secs),
        }
    }

    fn distrusted_for(health: &Health) -> Duration {
        lock(&health.distrust_until).map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    #[test]
    fn a_young_server_waits_out_the_rest_of_the_delay() {
        let delay = Duration::from_secs(30);
        let health = Health::default();
        // Reported 10 s: surely up for more than 9 s, so 21 s to go.
        health.judge(info("a", 10), delay);
        let left = distrusted_for(&health);
        assert!(
            left <= Duration::from_secs(21) && left > Duration::from_secs(20),
            "{left:?}"
        );
        // Reported 30 s may be 29 s and a bit: still 1 s to go.
        let almost = Health::default();
        almost.judge(info("a", 30), delay);
        assert!(distrusted_for(&almost) > Duration::ZERO);

        let old = Health::default();
        old.judge(info("a", 31), delay);
        assert_eq!(
            *lock(&old.distrust_until),
            None,
            "surely up for the delay: trusted at once"
        );
    }

    #[test]
    fn a_restart_seen_while_watching_costs_the_full_delay() {
        let delay = Duration::from_secs(30);
        let health = Health::default();
        health.judge(info("a", 100), delay);
        assert_eq!(*lock(&health.distrust_until), None);
        // Reconnected to another process, already up for a while: still the full delay.
        health.judge(info("b", 20), delay);
        assert!(distrusted_for(&health) > Duration::from_secs(29));
        // The same process again after a blip: the distrust in force is not shortened.
        health.judge(info("b", 25), delay);
        assert!(distrusted_for(&health) > Duration::from_secs(29));
    }
}
