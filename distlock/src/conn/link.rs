//! distlock's own connection to a node over plain TCP: one socket that the calling tasks
//! write to and read from themselves ([`wire`](super::wire)), opened again by itself after a
//! failure.
//!
//! redis-rs's `MultiplexedConnection` (inside `ConnectionManager`) runs a driver task that
//! owns the socket: every request is handed to it through a channel and every answer handed
//! back, so each round trip wakes two tasks, often on two threads. On loopback that hand-off
//! costs about as much as the network, and an uncontended lock cycle is two round trips.
//! Here a lone caller writes its request and reads its own answer, and under load one write
//! carries several callers' requests (see [`wire`](super::wire)).
//!
//! Failures: a connection that fails (reset, closed, bytes that are not RESP or nested or
//! sized beyond [`resp`](super::resp)'s bounds, an answer nobody asked for) fails every caller
//! waiting on it with an I/O error, which the acquire loop retries as a transient failure,
//! and is opened again by the next request. So is a connection gone **silent** (a NAT or
//! firewall that dropped its state, a frozen peer): one whose oldest request timed out with
//! nothing read since it was sent, or with its bytes still not all taken, or that is still
//! unanswered after two timeouts whatever else came. A timeout while the answers still come
//! leaves the connection as it is: the late answer is read and dropped in its turn. TCP
//! keepalive and `TCP_USER_TIMEOUT` bound what the kernel waits for on its own.
//!
//! Subscriptions (a link given a push sink: a node's first connection, Sentinel's connection
//! to the master): a channel counts as subscribed once the server's confirmation arrived on
//! the connection that carries it ([`subscriptions`](super::subscriptions)); every connection
//! opened after the first subscribes every channel again before any other request, and the
//! failure of an open connection reaches the sink as a `PushKind::Disconnection` (the
//! waiters then know releases may have gone unheard; see `notify::Channels::on_push`). While
//! channels are subscribed, a connection on which nothing was read for a second is sent a
//! `PING`, so that a silent one is found even when nothing else is asked, and a failed one is
//! opened again at once rather than at the next request.
//!
//! Only plain TCP: `rediss://` and Unix sockets keep redis-rs's `ConnectionManager` (see
//! [`Link::new`]), as do Redis Cluster connections.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, Pipeline, PushKind, RedisError, RedisFuture, RedisResult,
    Value,
};
use tokio::net::TcpStream;

use super::subscriptions::{change, confirmed, no_subscriptions, Subscriptions, SUBSCRIBE_TRIES};
use super::wire::{tick, PushSink, Wire};
use crate::sync::lock;

/// A connection with subscriptions on which nothing was read for this long is sent a `PING`.
const PING_AFTER: Duration = Duration::from_secs(1);
/// TCP keepalive: first probe after this much idleness, then one per interval; with
/// `TCP_USER_TIMEOUT` at their sum, a peer that stopped acknowledging is given up then.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(
    KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_PROBES as u64,
);
/// Pauses between the reconnections of a link with subscriptions whose server is gone.
const RECONNECT_FIRST: Duration = Duration::from_millis(10);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// A connection that opens (and after a failure, reopens) itself on use; cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    host: String,
    port: u16,
    info: ConnectionInfo,
    connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    /// The open connection; `None` until the first use.
    current: Mutex<Option<Arc<Wire>>>,
    /// Held while a connection is being opened, so concurrent callers open one, not several.
    pub(super) opening: tokio::sync::Mutex<()>,
    /// Called whenever a connection is opened after the first: the old one failed.
    reopened: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Set once a connection was opened.
    opened_once: AtomicBool,
    /// Where push frames go; `None`: the link carries commands only, and no subscription.
    pub(super) sink: Option<PushSink>,
    pub(super) subscriptions: Subscriptions,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(wire) = lock(&self.current).take() {
            wire.close();
        }
    }
}

impl Link {
    /// A link to the node at `info`, or `None` if this module does not speak its transport
    /// (TLS, Unix sockets): the caller keeps redis-rs's connection for those. `sink`, if any,
    /// hears the push frames and disconnections, and lets the link carry subscriptions.
    pub(crate) fn new(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
        reopened: Option<Arc<dyn Fn() + Send + Sync>>,
        sink: Option<PushSink>,
    ) -> Option<Link> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        Some(Link {
            shared: Arc::new(Shared {
                host: host.clone(),
                port: *port,
                info: info.clone(),
                connect_timeout,
                response_timeout,
                current: Mutex::new(None),
                opening: tokio::sync::Mutex::new(()),
                reopened,
                opened_once: AtomicBool::new(false),
                sink,
                subscriptions: Subscriptions::default(),
            }),
        })
    }

    /// Opens the connection now (it would open on first use otherwise): a node that does not
    /// answer is reported when the client connects.
    pub(crate) async fn open(&self) -> redis::RedisResult<()> {
        self.wire().await.map(drop)
    }

    /// Sends the `count` commands `write` appends and returns their `count` answers.
    pub(super) async fn call(
        &self,
        write: impl FnOnce(&mut Vec<u8>),
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let wire = self.wire().await?;
        wire.request_with(write, count, None)
            .await
            .map_err(|kind| self.failure(kind))
    }

    /// The error a caller gets for a failed request.
    pub(super) fn failure(&self, kind: io::ErrorKind) -> RedisError {
        if kind == io::ErrorKind::TimedOut {
            return super::no_answer_within(self.shared.response_timeout);
        }
        failure(kind)
    }

    /// The open connection, opened first if there is none.
    pub(super) async fn wire(&self) -> redis::RedisResult<Arc<Wire>> {
        if let Some(wire) = self.usable() {
            return Ok(wire);
        }
        let _opening = self.shared.opening.lock().await;
        if let Some(wire) = self.usable() {
            return Ok(wire);
        }
        let shared = &self.shared;
        let wire = super::within(shared.connect_timeout, shared.open()).await?;
        *lock(&shared.current) = Some(wire.clone());
        if shared.sink.is_some() {
            tokio::spawn(listener(wire.clone(), Arc::downgrade(shared)));
        }
        if shared.opened_once.swap(true, Ordering::AcqRel) {
            if let Some(reopened) = &shared.reopened {
                reopened();
            }
        }
        Ok(wire)
    }

    /// The open connection, unless it failed.
    pub(super) fn usable(&self) -> Option<Arc<Wire>> {
        lock(&self.shared.current)
            .as_ref()
            .filter(|wire| !wire.is_broken())
            .cloned()
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut values = self.call(|out| cmd.write_packed_command(out), 1).await?;
            Ok(values.pop().unwrap_or(Value::Nil))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let sent = pipeline.len() + if pipeline.is_transaction() { 2 } else { 0 };
            let packed = pipeline.get_packed_pipeline();
            let mut values = self
                .call(|out| out.extend_from_slice(&packed), sent)
                .await?;
            if pipeline.is_transaction() {
                // MULTI, QUEUED.., then EXEC's array of the answers.
                return match values.pop() {
                    Some(Value::Array(answers)) => Ok(answers),
                    Some(other) => other.extract_error().map(|v| vec![v]),
                    None => Ok(Vec::new()),
                };
            }
            Ok(values.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.info.redis_settings().db()
    }
}

impl Shared {
    /// Connects and says hello: RESP3 (the answers then look exactly like those of the
    /// client's other connections, and pushes come as pushes), the credentials, the
    /// database; then subscribes every channel again, before anything else is sent.
    async fn open(self: &Arc<Self>) -> redis::RedisResult<Arc<Wire>> {
        let stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
        configure(&stream)?;
        let wire = Arc::new(Wire::new(stream, self.sink.clone()));
        let listening = Arc::downgrade(self);
        tokio::spawn(tick(
            Arc::downgrade(&wire),
            self.response_timeout / 4,
            PING_AFTER,
            move || {
                listening
                    .upgrade()
                    .is_some_and(|shared| shared.sink.is_some() && shared.subscriptions.any())
            },
        ));
        let settings = self.info.redis_settings();
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        if let Some(password) = settings.password() {
            hello
                .arg("AUTH")
                .arg(settings.username().unwrap_or("default"))
                .arg(password);
        }
        let mut commands = vec![hello];
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            commands.push(select);
        }
        for command in commands {
            let answer = wire.request(&command.get_packed_command(), 1, None).await;
            if let Err(kind) = answer {
                wire.close();
                return Err(failure(kind));
            }
            let reply = answer.unwrap_or_default().pop().unwrap_or(Value::Nil);
            if let Err(e) = reply.extract_error() {
                wire.close();
                return Err(e);
            }
        }
        if wire.is_broken() {
            // More replies than were asked for came with the hello's.
            return Err(failure(io::ErrorKind::InvalidData));
        }
        if self.sink.is_some() {
            self.subscriptions.send_all(&wire);
        }
        wire.set_ready();
        Ok(wire)
    }
}

/// [`listen`], boxed: its future awaits the opening of a connection, which spawns the next
/// listener (a cycle the compiler cannot prove `Send` through).
fn listener(
    wire: Arc<Wire>,
    shared: Weak<Shared>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(listen(wire, shared))
}

/// Reads a connection's pushes while no caller waits; once it failed, opens a new one at
/// once if channels are subscribed (their messages would be lost until the next request).
async fn listen(wire: Arc<Wire>, shared: Weak<Shared>) {
    wire.listen().await;
    let mut pause = RECONNECT_FIRST;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if !strong.subscriptions.any()
            || lock(&strong.current)
                .as_ref()
                .is_some_and(|w| !w.is_broken())
        {
            return;
        }
        // A new connection is listened to by a task of its own.
        if (Link { shared: strong }).wire().await.is_ok() {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// Socket options: no Nagle delay (requests are written whole), keepalive probes on an idle
/// connection, and a bound on how long written bytes may stay unacknowledged.
fn configure(stream: &TcpStream) -> io::Result<()> {
    use redis::io::tcp::socket2::{SockRef, TcpKeepalive};
    stream.set_nodelay(true)?;
    let socket = SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(not(any(target_os = "windows", target_os = "openbsd", target_os = "redox")))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    socket.set_tcp_keepalive(&keepalive)?;
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    socket.set_tcp_user_timeout(Some(KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES))?;
    Ok(())
}

/// The same keepalive and `TCP_USER_TIMEOUT` for the connections redis-rs opens (TLS, Unix
/// sockets, Sentinel's and Cluster's).
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(not(any(target_os = "windows", target_os = "openbsd", target_os = "redox")))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

/// The error a failed connection gives its callers: an I/O error, which the acquire loop
/// treats as transient (retried, the attempt possibly taken).
pub(super) fn failure(kind: io::ErrorKind) -> RedisError {
    io::Error::new(kind, "the connection to Redis failed").into()
}

impl Link {
    /// Listens on `channel`: returns once the server confirmed the subscription on the open
    /// connection, which every later connection of this link subscribes again. Only for a
    /// link with a push sink.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let shared = &self.shared;
        if shared.sink.is_none() {
            return Err(no_subscriptions());
        }
        lock(&shared.subscriptions.channels).insert(channel.to_vec());
        let mut tries = 0;
        let result = loop {
            tries += 1;
            let wire = match self.wire().await {
                Ok(wire) => wire,
                Err(e) => break Err(e),
            };
            let (bytes, confirm) = change("SUBSCRIBE", PushKind::Subscribe, channel);
            match wire.request(&bytes, 1, Some(confirm)).await {
                Ok(answer) => break confirmed(answer),
                // The connection failed before the confirmation came: the next one
                // subscribes the channel first thing.
                Err(kind) if kind != io::ErrorKind::TimedOut && tries < SUBSCRIBE_TRIES => {}
                Err(kind) => break Err(self.failure(kind)),
            }
        };
        if result.is_err() {
            lock(&shared.subscriptions.channels).remove(channel);
            // A connection opened meanwhile may have subscribed it all the same.
            let _opening = shared.opening.lock().await;
            if let Some(wire) = self.usable() {
                wire.send_unanswered([change("UNSUBSCRIBE", PushKind::Unsubscribe, channel)]);
            }
        }
        result
    }

    /// Stops listening on `channel`: no later connection subscribes it, and the open one (if
    /// any) unsubscribes it, confirmed when this returns.
    pub(crate) async fn unsubscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let shared = &self.shared;
        if shared.sink.is_none() {
            return Err(no_subscriptions());
        }
        lock(&shared.subscriptions.channels).remove(channel);
        // A connection being opened subscribes the channels as they were: wait for it.
        let wire = {
            let _opening = shared.opening.lock().await;
            self.usable()
        };
        let Some(wire) = wire else {
            // No connection open: the channel is subscribed nowhere.
            return Ok(());
        };
        let (bytes, confirm) = change("UNSUBSCRIBE", PushKind::Unsubscribe, channel);
        let answer = wire.request(&bytes, 1, Some(confirm)).await;
        answer
            .map_err(|kind| self.failure(kind))
            .and_then(confirmed)
    }
}
