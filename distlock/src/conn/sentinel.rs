//! A master found through Sentinel, followed across failovers.
//!
//! The client asks the sentinels (`SENTINEL get-master-addr-by-name`) where the master is,
//! checks that the server there says `ROLE` master, and connects to it. It asks again
//!
//! * whenever the connection reports trouble: a disconnection, a refused or timed-out
//!   request, or `READONLY` (the server it talks to was demoted to a replica: a write there
//!   is refused by Redis, so nothing is ever written to a replica);
//! * and once a second in any case, so a failover that happened while the client was idle
//!   is noticed before the next lock call pays for it.
//!
//! When the sentinels name another master, a new connection is opened to it, the lock
//! channels this client listens on are subscribed there, and it replaces the old one; every
//! waiter is woken to try again at once (releases published on the old master are lost).
//!
//! The connection to the master is a [`Link`] over plain TCP: a request to a master that is
//! gone fails within the timeouts it was given (a refused connection at once), rather than
//! waiting for redis-rs's manager to retry the dead address, and the monitor hears of it. Over
//! TLS or a Unix socket it is redis-rs's `ConnectionManager`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};

use super::{manager_config, within, Conn, Link, PushSink};
use crate::sync::lock;
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, PushInfo, PushKind,
    RedisError, RedisFuture, RedisResult, Value,
};
use tokio::sync::Notify;

/// How often the sentinels are asked even when nothing went wrong.
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// Pause between two tries while no sentinel names a reachable master.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Where a [`SentinelConn`] connects and how.
pub(crate) struct SentinelSettings {
    /// The sentinels' URLs.
    pub(crate) sentinels: Vec<redis::ConnectionInfo>,
    pub(crate) master_name: String,
    /// Credentials and database for the data servers, taken from the first sentinel URL's
    /// user, password and db unless given (sentinels and data servers often share them).
    pub(crate) data: redis::RedisConnectionInfo,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

/// A connection to whichever server the sentinels name as the master.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<Shared>,
}

struct Shared {
    settings: SentinelSettings,
    /// The master's `host:port` and the connection to it (set before the first request).
    current: Mutex<Option<(String, Conn)>>,
    /// Wakes the monitor to ask the sentinels now.
    recheck: Arc<Notify>,
    /// Channels this client listens on, to subscribe again on a new master.
    subscriptions: Mutex<HashSet<Vec<u8>>>,
    /// Where push frames go (the wake-ups), and the disconnection a switch of master means.
    sink: PushSink,
}

impl SentinelConn {
    /// Finds the master and connects to it; fails within the connect timeout when no sentinel
    /// names a master that answers as one. Returns the connection and the task that follows
    /// failovers (abort it to stop).
    pub(crate) async fn connect(
        settings: SentinelSettings,
        sink: PushSink,
    ) -> RedisResult<(SentinelConn, tokio::task::AbortHandle)> {
        let limit = settings.connect_timeout;
        let found = tokio::time::timeout(limit, async {
            let mut sentinels = vec![None; settings.sentinels.len()];
            loop {
                match locate(&settings, &mut sentinels).await {
                    Ok(found) => return Ok(found),
                    Err(e) if is_no_answer(&e) => tokio::time::sleep(RETRY_AFTER).await,
                    Err(e) => return Err(e),
                }
            }
        })
        .await
        .map_err(|_| {
            RedisError::from((
                redis::ErrorKind::Io,
                "no sentinel named a master that answers",
                format!("within {limit:?}"),
            ))
        })??;
        let (addr, info) = found;
        let shared = Arc::new(Shared {
            current: Mutex::new(None),
            settings,
            recheck: Arc::new(Notify::new()),
            subscriptions: Mutex::new(HashSet::new()),
            sink,
        });
        let first = open(&shared, info).await?;
        *lock(&shared.current) = Some((addr, first));
        let recheck = shared.recheck.clone();
        let monitor = tokio::spawn(monitor(Arc::downgrade(&shared), recheck)).abort_handle();
        Ok((SentinelConn { shared }, monitor))
    }

    fn current(&self) -> RedisResult<Conn> {
        lock(&self.shared.current)
            .as_ref()
            .map(|(_, conn)| conn.clone())
            .ok_or_else(|| (redis::ErrorKind::Io, "not connected to a master yet").into())
    }

    pub(crate) async fn subscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        lock(&self.shared.subscriptions).insert(channel.to_vec());
        let result = change(&self.current()?, channel, true).await;
        self.check(&result);
        result
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        lock(&self.shared.subscriptions).remove(channel);
        change(&self.current()?, channel, false).await
    }

    /// Asks the monitor to look for a new master if `result` says this one is gone or demoted.
    fn check<T>(&self, result: &RedisResult<T>) {
        if let Err(e) = result {
            if is_no_answer(e) || is_readonly(e) {
                self.shared.recheck.notify_one();
            }
        }
    }

    fn check_values(&self, values: &RedisResult<Vec<Value>>) {
        let demoted = values.as_ref().is_ok_and(|values| {
            values.iter().any(|v| match v {
                Value::ServerError(e) => e.code() == "READONLY",
                _ => false,
            })
        });
        if demoted {
            self.shared.recheck.notify_one();
        } else {
            self.check(values);
        }
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.current()?.req_packed_command(cmd).await;
            self.check(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let result = self
                .current()?
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.check_values(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.settings.data.db()
    }
}

/// Follows the master: asks the sentinels when told to (and once a second), and switches to
/// the master they name when it changed.
async fn monitor(shared: std::sync::Weak<Shared>, recheck: Arc<Notify>) {
    let mut sentinels = Vec::new();
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if sentinels.len() != strong.settings.sentinels.len() {
            sentinels = vec![None; strong.settings.sentinels.len()];
        }
        let notified = recheck.notified();
        let mut wait = RECHECK_EVERY;
        match locate(&strong.settings, &mut sentinels).await {
            Ok((addr, info)) => {
                let known = lock(&strong.current).as_ref().map(|(a, _)| a.clone());
                if known.as_deref() != Some(addr.as_str()) {
                    match open(&strong, info).await {
                        Ok(conn) => switch(&strong, addr, conn).await,
                        Err(_) => wait = RETRY_AFTER,
                    }
                }
            }
            Err(_) => wait = RETRY_AFTER,
        }
        drop(strong);
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Makes `conn` (to the master at `addr`) the connection every request uses from now on.
async fn switch(shared: &Shared, addr: String, conn: Conn) {
    *lock(&shared.current) = Some((addr, conn.clone()));
    // Subscribed after the switch: a waiter that subscribes meanwhile registers its channel
    // first and then uses the new connection, so every channel ends up subscribed there.
    let channels: Vec<Vec<u8>> = lock(&shared.subscriptions).iter().cloned().collect();
    for channel in channels {
        let _ = change(&conn, &channel, true).await;
    }
    // Releases published on the old master are lost: every waiter tries once now.
    (shared.sink)(PushInfo {
        kind: PushKind::Disconnection,
        data: Vec::new(),
    });
}

/// Asks each sentinel in turn for the master's address until one answers, and checks that the
/// server there is a master. Returns its `host:port` and how to connect to it.
async fn locate(
    settings: &SentinelSettings,
    sentinels: &mut [Option<MultiplexedConnection>],
) -> RedisResult<(String, redis::ConnectionInfo)> {
    let mut last = None;
    for (i, slot) in sentinels.iter_mut().enumerate() {
        let conn = match slot {
            Some(conn) => conn,
            None => match connect_plain(settings.sentinels[i].clone(), settings).await {
                Ok(conn) => slot.insert(conn),
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            },
        };
        let reply: RedisResult<Option<(String, u16)>> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&settings.master_name)
            .query_async(conn)
            .await;
        match reply {
            Ok(Some((host, port))) => {
                let info = format!("redis://{host}:{port}")
                    .into_connection_info()?
                    .set_redis_settings(settings.data.clone());
                if is_master(info.clone(), settings).await? {
                    return Ok((format!("{host}:{port}"), info));
                }
                last = Some(RedisError::from((
                    redis::ErrorKind::Io,
                    "the server the sentinels name is not a master (yet)",
                )));
            }
            Ok(None) => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "the sentinels know no master by this name",
                    settings.master_name.clone(),
                )))
            }
            Err(e) => {
                *slot = None;
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| (redis::ErrorKind::Io, "no sentinel answered").into()))
}

async fn is_master(info: redis::ConnectionInfo, settings: &SentinelSettings) -> RedisResult<bool> {
    let mut conn = match connect_plain(info, settings).await {
        Ok(conn) => conn,
        Err(_) => return Ok(false),
    };
    let role: Value = match redis::cmd("ROLE").query_async(&mut conn).await {
        Ok(role) => role,
        Err(_) => return Ok(false),
    };
    Ok(matches!(&role, Value::Array(parts)
        if matches!(parts.first(), Some(Value::BulkString(r)) if r.as_slice() == b"master")))
}

async fn connect_plain(
    info: redis::ConnectionInfo,
    settings: &SentinelSettings,
) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_response_timeout(Some(settings.response_timeout));
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The connection to the master, RESP3 so release notifications arrive as push frames; a
/// disconnection also asks the monitor to look for a new master.
async fn open(shared: &Arc<Shared>, info: redis::ConnectionInfo) -> RedisResult<Conn> {
    let settings = &shared.settings;
    let weak = Arc::downgrade(shared);
    let sink = shared.sink.clone();
    let on_push: PushSink = Arc::new(move |push: PushInfo| {
        if push.kind == PushKind::Disconnection {
            if let Some(shared) = weak.upgrade() {
                shared.recheck.notify_one();
            }
        }
        sink(push);
    });
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    if let Some(link) = Link::new(
        &info,
        connect_timeout,
        response_timeout,
        None,
        Some(on_push.clone()),
    ) {
        link.open().await?;
        return Ok(Conn::Link(link));
    }
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info
        .set_redis_settings(resp3)
        .set_tcp_settings(super::link::tcp_settings());
    let client = redis::Client::open(info)?;
    let config = manager_config(connect_timeout, response_timeout)
        .set_push_sender(move |push: PushInfo| {
            on_push(push);
            Ok::<(), std::convert::Infallible>(())
        })
        .set_automatic_resubscription();
    let connecting = ConnectionManager::new_with_config(client, config);
    within(connect_timeout, connecting).await.map(Conn::Single)
}

/// Subscribes `channel` on the master's connection (or unsubscribes it). Not through
/// `Conn::subscribe`, which leads back here for a Sentinel connection.
async fn change(conn: &Conn, channel: &[u8], subscribe: bool) -> RedisResult<()> {
    match (conn, subscribe) {
        (Conn::Link(link), true) => link.subscribe(channel).await,
        (Conn::Link(link), false) => link.unsubscribe(channel).await,
        (Conn::Single(manager), true) => manager.clone().subscribe(channel).await,
        (Conn::Single(manager), false) => manager.clone().unsubscribe(channel).await,
        _ => Err((redis::ErrorKind::Client, "not a connection to one server").into()),
    }
}

fn is_no_answer(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY") || e.to_string().contains("READONLY")
}
