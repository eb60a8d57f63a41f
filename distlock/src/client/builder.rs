//! Configuring and connecting a client.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::channels::Channels;
use crate::config::{
    HandOffLimits, Replicas, DEFAULT_CONNECTIONS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_NAME_LEN,
    DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_RESTART_DELAY, MAX_CONNECTIONS,
};
use crate::conn::PushSink;
use crate::error::{Error, NodeError};
use crate::key;
use crate::majority::Majority;
use crate::nodes::{Node, NodeSettings, Nodes, Records};
use crate::notify::Notifier;
use crate::runtime::Shared;
use crate::tasks::Tasks;
use crate::watchdog::Watchdog;

use super::Client;

/// Settings for a [`Client`]; see [`Client::builder`].
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct ClientBuilder {
    urls: Vec<String>,
    shape: Shape,
    replicas: Option<Replicas>,
    node_timeout: Option<Duration>,
    restart_delay: Option<Duration>,
    prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    max_name_len: usize,
    handoff: Option<HandOffLimits>,
    connections: Option<usize>,
    allow_eviction: bool,
    #[cfg(feature = "tls")]
    tls_root_cert: Option<Vec<u8>>,
}

/// Written by hand: the URLs carry passwords, and a builder is what services print when they
/// log their configuration.
impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self
            .urls
            .iter()
            .map(|u| crate::conn::url::redact(u))
            .collect();
        let mut out = f.debug_struct("ClientBuilder");
        out.field("urls", &urls)
            .field("shape", &self.shape)
            .field("replicas", &self.replicas)
            .field("node_timeout", &self.node_timeout)
            .field("restart_delay", &self.restart_delay)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("max_name_len", &self.max_name_len)
            .field("handoff", &self.handoff)
            .field("connections", &self.connections)
            .field("allow_eviction", &self.allow_eviction);
        #[cfg(feature = "tls")]
        out.field(
            "tls_root_cert",
            &self
                .tls_root_cert
                .as_ref()
                .map(|pem| format!("{} bytes", pem.len())),
        );
        out.finish()
    }
}

impl ClientBuilder {
    pub(super) fn new(urls: Vec<String>, shape: Shape) -> Self {
        ClientBuilder {
            urls,
            shape,
            replicas: None,
            node_timeout: None,
            restart_delay: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            handoff: None,
            connections: None,
            allow_eviction: false,
            #[cfg(feature = "tls")]
            tls_root_cert: None,
        }
    }

    /// One node only (any other client refuses it at [`connect`](Self::connect)): how many
    /// connections the client opens to it (default
    /// [`DEFAULT_CONNECTIONS`], at most [`MAX_CONNECTIONS`]). Each acquisition sends all its
    /// commands (attempts, release, the give-back of an abandoned attempt) on one of them,
    /// the one of the task that takes the lock, so they reach the server in order as on one
    /// connection; the tasks spread over them. Many tasks locking at once then do not all
    /// queue behind one connection's reader and writer, at the price of fewer requests per
    /// system call (which wins depends on the machine: see
    /// [Connections](crate::guide::design#connections)). Wake-ups, renewals and inspection use the first connection, and with
    /// two or more, acquisitions use the others: an acquisition never waits behind a batch
    /// of renewals, and a waiter's attempts never wait for the subscriptions' connection to
    /// come back after a loss (the waiter is told when it is back, and tries then). Each
    /// connection takes one of the server's client slots (`maxclients`, `CLIENT LIST`), and
    /// `connect` fails unless all of them open. A quorum node keeps two (the first, and one for
    /// acquisitions); a Cluster and Sentinel one per server (a Cluster's per-master
    /// connections are redis-rs's).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// // One connection, as a client with few concurrent locks needs.
    /// let locks = distlock::Client::builder("redis://127.0.0.1/")
    ///     .connections(1)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = Some(connections);
        self
    }

    /// Quorum only (any other client refuses it at [`connect`](Self::connect)): how long one
    /// node may take to answer inside a quorum operation (default:
    /// the response timeout, at most 100 ms). A slow or frozen node then costs a lock no more
    /// than this, and the majority decides without it.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Quorum only (any other client refuses it at [`connect`](Self::connect)): how long a
    /// node's server must have been up before its vote counts
    /// (default 30 s, the default ttl). Set it to your longest ttl: a server that restarted
    /// without its data forgot its locks, and until they have expired everywhere else its
    /// vote could hand a held lock to a second owner.
    ///
    /// The client reads each server's uptime (`INFO server`) when it connects and after every
    /// reconnection: a server up for less than the delay casts no vote until it has been up
    /// that long, also for a client started after the restart. A restart seen while connected
    /// (new `run_id`) costs the full delay. So on a freshly started deployment a quorum client
    /// cannot lock until its nodes have been up for the delay (acquisitions fail with
    /// [`Error::QuorumNotReached`], or wait if given a wait). `Duration::ZERO` turns the guard
    /// off.
    pub fn restart_delay(mut self, delay: Duration) -> Self {
        self.restart_delay = Some(delay);
        self
    }
    /// Prefix of every key this client writes (default `"distlock"`; empty for none). It must
    /// not contain `{` or `}`, which Redis Cluster would take as the hash tag.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long opening a connection may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one reply may take (default 1 s). Keep it well below your lock ttls.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Local hand-off (setnx locks on one node, Sentinel or a Cluster; a quorum client refuses
    /// it at [`connect`](Self::connect)): a lock released while
    /// another task of this client waits for it passes straight to that task, with no command
    /// to Redis, at most `passes` times in a row and only within `window` of when it was taken
    /// from Redis; then it is really released, so other processes get their turn. Default: 8
    /// passes within 25 ms. `local_handoff(0, Duration::ZERO)` turns it off: every
    /// acquisition then takes the lock from Redis with a token of its own.
    ///
    /// Only interchangeable holds pass: the waiter asked for the same ttl, renewal period,
    /// label and locked fn (as traces and metrics name them), the watchdog is on, at least half the lease is left, and neither side asked for
    /// a fencing token, replica acknowledgement, `max_hold` or `min_hold` (those waiters get a
    /// real release, and nobody behind them overtakes them). Reentrant and read/write locks
    /// never pass (their hold names the owning task on the server); nor does a quorum. The
    /// waiter's guard shares the lease: [`Guard::is_held`](crate::Guard::is_held) and renewal
    /// go on as before, and [`Client::inspect`] shows the task that took the lock from Redis.
    /// A waiter whose future is dropped after the hold reached it releases it in the
    /// background.
    ///
    /// A longer window lets a busy lock stay in this process for longer (higher throughput
    /// for its tasks, longer waits for other processes' waiters).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// // Every acquisition takes the lock from Redis, with an owner token of its own.
    /// let locks = distlock::Client::builder("redis://127.0.0.1/")
    ///     .local_handoff(0, Duration::ZERO)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn local_handoff(mut self, passes: u32, window: Duration) -> Self {
        self.handoff = Some(HandOffLimits { passes, window });
        self
    }

    /// Lock on servers that may evict keys under memory pressure (default `false`: refused).
    ///
    /// A Redis server with any `maxmemory-policy` but `noeviction` deletes keys when it runs
    /// out of memory, and lock keys carry a ttl, so the `volatile-*` policies pick them first:
    /// a second owner then takes a lock whose first owner still says held, and nothing tells
    /// either. So the client reads each server's policy (`INFO memory`) when it connects and
    /// after every reconnection, and refuses a policy that may evict with
    /// [`Error::InvalidConfig`] (at [`connect`](Self::connect), or at the next acquisition
    /// after a reconnection). Run the lock server with `maxmemory-policy noeviction`; if you
    /// cannot, and accept that a held lock may vanish, `allow_eviction(true)` skips the check
    /// (logged at WARN when the client connects).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Longest accepted lock name in bytes (default 8 KiB).
    pub fn max_name_len(mut self, bytes: usize) -> Self {
        self.max_name_len = bytes;
        self
    }

    /// Replica acknowledgement for every write acquisition of this client (off by default;
    /// a lock request may set its own with [`LockRequest::replicas`](crate::LockRequest::replicas)).
    /// See [`Replicas`].
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas { count, timeout });
        self
    }

    /// `rediss://` only (feature `tls`): trust the server certificates signed by this root (one
    /// or more PEM certificates, e.g. your private CA's) **instead of** the webpki roots that
    /// are trusted by default. A root certificate given with a `redis://` URL is refused by
    /// [`connect`](Self::connect) with [`Error::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let locks = distlock::Client::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(ca)
    ///     .connect()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_cert = Some(pem.into());
        self
    }

    /// Opens the connections. Fails within the connect timeout when no server answers (for a
    /// quorum: when a majority does not).
    pub async fn connect(self) -> Result<Client, Error> {
        key::validate_prefix(&self.prefix)?;
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::config(
                "connect and response timeouts must be above zero",
            ));
        }
        if let Some(replicas) = &self.replicas {
            replicas.validate(self.response_timeout)?;
        }
        self.refuse_what_does_not_apply()?;
        let connections = self.connections.unwrap_or(DEFAULT_CONNECTIONS);
        if !(1..=MAX_CONNECTIONS).contains(&connections) {
            return Err(Error::config(format!(
                "connections: {connections} is not between 1 and {MAX_CONNECTIONS}"
            )));
        }
        if self.shape != Shape::Nodes {
            return self.connect_one_deployment().await;
        }
        let n = self.urls.len();
        if n == 0 || n == 2 {
            return Err(Error::config(format!(
                "{n} Redis URLs given: use one node, or a quorum of at least 3 independent masters"
            )));
        }
        let majority = Majority::of(n);
        let settings = NodeSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            restart_guard: Some(self.restart_delay.unwrap_or(DEFAULT_RESTART_DELAY))
                .filter(|delay| n > 1 && !delay.is_zero()),
            // A quorum node: one connection for the subscriptions and renewals, one for the
            // acquisitions (see `conn::link`).
            lanes: if n == 1 { connections } else { 2 },
            allow_eviction: self.allow_eviction,
            #[cfg(feature = "tls")]
            tls_root_cert: self.tls_root_cert.clone(),
        };
        let channels = Arc::new(Channels::default());
        let connecting = self
            .urls
            .iter()
            .map(|url| Node::connect(url, &settings, sink(&channels), n > 1));
        let mut nodes = Vec::with_capacity(n);
        let mut failures = Vec::new();
        for result in futures_util::future::join_all(connecting).await {
            match result {
                Ok((node, down)) => {
                    nodes.push(node);
                    failures.extend(down);
                }
                Err(e) => failures.push(e),
            }
        }
        if n == 1 {
            if let Some(e) = failures.pop() {
                return Err(e);
            }
        } else if nodes.len() < n || !majority.reached(n - failures.len()) {
            // Nodes down at start-up join once they answer, but a majority must answer now.
            return Err(Error::QuorumNotReached {
                name: "(connect)".into(),
                acked: n - failures.len(),
                needed: majority.needed(),
                nodes: n,
                errors: failures
                    .into_iter()
                    .map(|e| NodeError {
                        node: e.name().unwrap_or("?").to_owned(),
                        reason: e.to_string(),
                        retryable: e.is_retryable(),
                    })
                    .collect(),
            });
        }
        let node_timeout = self
            .node_timeout
            .unwrap_or_else(|| self.response_timeout.min(Duration::from_millis(100)));
        let nodes = Arc::new(Nodes {
            records: Records::new(&self.prefix, nodes.len()),
            nodes,
            majority,
            node_timeout,
            listeners: channels.clone(),
            tasks: Tasks::default(),
        });
        Ok(self.finish(channels, nodes))
    }

    /// Refuses a setting the chosen deployment would ignore: a caller who set it expects it
    /// to act.
    fn refuse_what_does_not_apply(&self) -> Result<(), Error> {
        let shape = match (&self.shape, self.urls.len()) {
            (Shape::Cluster, _) => "a Redis Cluster client",
            (Shape::Sentinel(_), _) => "a Sentinel client",
            (Shape::Nodes, 1) => "a single-node client",
            (Shape::Nodes, _) => "a quorum client",
        };
        let quorum = self.shape == Shape::Nodes && self.urls.len() > 1;
        let single = self.shape == Shape::Nodes && self.urls.len() == 1;
        #[cfg(feature = "tls")]
        let tls_root = self.tls_root_cert.is_some();
        #[cfg(not(feature = "tls"))]
        let tls_root = false;
        let refused = [
            (self.connections.is_some() && !single, "connections", "it sets the connections to one node"),
            (self.node_timeout.is_some() && !quorum, "node_timeout", "it bounds one node's answer inside a quorum"),
            (self.restart_delay.is_some() && !quorum, "restart_delay", "it keeps a restarted quorum node from voting"),
            (self.handoff.is_some() && quorum, "local_handoff", "a quorum's holds never pass between tasks"),
            (self.replicas.is_some() && quorum, "replicas", "replica acknowledgement is for a deployment with replicas (one node, Sentinel, Cluster), not for the independent masters of a quorum"),
            // redis-rs builds these connections itself from the URLs; a private root is not
            // handed through yet. Refused rather than silently trusting the default roots.
            (tls_root && !(single || quorum), "tls_root_certificate", "it is not supported with Client::cluster or Client::sentinel yet: use certificates signed by a webpki root"),
        ];
        match refused.into_iter().find(|(set, _, _)| *set) {
            Some((_, setting, why)) => Err(Error::config(format!(
                "{setting} does not apply to {shape}: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// A Cluster or Sentinel client: one [`Node`] whose connection knows the topology.
    async fn connect_one_deployment(self) -> Result<Client, Error> {
        if self.urls.is_empty() {
            return Err(Error::config("no Redis URL given"));
        }
        let settings = NodeSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            restart_guard: None,
            lanes: 1,
            allow_eviction: self.allow_eviction,
            #[cfg(feature = "tls")]
            tls_root_cert: None,
        };
        let channels = Arc::new(Channels::default());
        let node = match &self.shape {
            Shape::Cluster => Node::cluster(&self.urls, &settings, sink(&channels)).await?,
            Shape::Sentinel(master) => {
                Node::sentinel(&self.urls, master, &settings, sink(&channels)).await?
            }
            Shape::Nodes => unreachable!("handled by connect"),
        };
        let nodes = Arc::new(Nodes {
            nodes: vec![node],
            majority: Majority::of(1),
            node_timeout: self.response_timeout,
            listeners: channels.clone(),
            records: Records::new(&self.prefix, 1),
            tasks: Tasks::default(),
        });
        Ok(self.finish(channels, nodes))
    }

    fn finish(self, channels: Arc<Channels>, nodes: Arc<Nodes>) -> Client {
        Client {
            inner: Arc::new(Shared {
                prefix: self.prefix,
                max_name_len: self.max_name_len,
                id: crate::identity::client_id(),
                notifier: Notifier::new(channels, nodes.clone()),
                watchdog: Watchdog::start(nodes.clone()),
                nodes,
                holds: Default::default(),
                nonces: AtomicU64::new(1),
                replicas: self.replicas,
                response_timeout: self.response_timeout,
                handoff: self.handoff.unwrap_or_default(),
            }),
        }
    }
}

/// Which deployment a [`ClientBuilder`] connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Shape {
    /// One node, or the independent masters of a quorum.
    Nodes,
    Cluster,
    /// Sentinels, and the master name they know.
    Sentinel(String),
}

/// Where the nodes' push frames go: the waiters' channels.
fn sink(channels: &Arc<Channels>) -> PushSink {
    let channels = channels.clone();
    Arc::new(move |push| channels.on_push(push))
}
