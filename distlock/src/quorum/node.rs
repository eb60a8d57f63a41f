//! One Redis server the client talks to: its connection, and whether its votes can be trusted.
//!
//! A Redis master restarted without its data has forgotten every lock it held. In a quorum,
//! that lets a second client win a majority while the first still holds the lock (the hazard
//! the Redlock description calls out). Each node therefore remembers the server's `run_id`;
//! when its connection drops, the node is suspect until `INFO server` answers again, and if
//! the `run_id` changed it does not count toward any quorum for the restart delay (set it to
//! your longest ttl), by which time every lock it forgot has expired everywhere else too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind};

use crate::error::{Error, Op};
use crate::notify::Channels;

/// How often a suspect node's `run_id` is checked again while it does not answer.
const RECHECK: Duration = Duration::from_millis(100);

/// Connection settings shared by every node of a client.
#[derive(Clone)]
pub(crate) struct NodeSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `Some(delay)`: watch for restarts and distrust a restarted node for `delay`.
    pub(crate) restart_guard: Option<Duration>,
}

pub(crate) struct Node {
    pub(crate) conn: ConnectionManager,
    pub(crate) addr: String,
    health: Arc<Health>,
}

#[derive(Default)]
struct Health {
    run_id: Mutex<Option<String>>,
    /// Set on disconnection; cleared once the run_id was read again.
    suspect: AtomicBool,
    /// A restart was seen: no votes before this instant.
    distrust_until: Mutex<Option<Instant>>,
    /// A re-check task is running.
    checking: AtomicBool,
}

impl Node {
    /// Opens the connection (RESP3, so release notifications arrive as push frames and feed
    /// `channels`). Fails within the connect timeout when no server answers.
    pub(crate) async fn connect(
        url: &str,
        settings: &NodeSettings,
        channels: Arc<Channels>,
    ) -> Result<Node, Error> {
        let addr = crate::client::redact(url);
        let bad_url =
            |e: redis::RedisError| Error::config(format!("cannot use Redis URL `{addr}`: {e}"));
        let info = url.into_connection_info().map_err(bad_url)?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(resp3)).map_err(bad_url)?;
        let health = Arc::new(Health::default());
        // Filled in once the connection exists: the push handler needs it to re-check.
        let conn_cell: Arc<Mutex<Option<ConnectionManager>>> = Arc::default();
        let on_push = {
            let (health, conn_cell, guard) =
                (health.clone(), conn_cell.clone(), settings.restart_guard);
            move |push: PushInfo| {
                if let (PushKind::Disconnection, Some(delay)) = (&push.kind, guard) {
                    health.suspect.store(true, Ordering::Release);
                    let conn = conn_cell.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(conn) = conn {
                        health.spawn_check(conn, delay);
                    }
                }
                channels.on_push(push);
                Ok::<(), std::convert::Infallible>(())
            }
        };
        let config = ConnectionManagerConfig::new()
            .set_push_sender(on_push)
            .set_automatic_resubscription()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout))
            // Reconnect quickly after a restart, but never spin: at most 1 s between tries.
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_secs(1));
        let connecting = ConnectionManager::new_with_config(client, config);
        let conn = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(source)) => return Err(connect_error(&addr, source)),
            Err(_) => {
                let timeout = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", settings.connect_timeout),
                );
                return Err(connect_error(&addr, timeout.into()));
            }
        };
        if settings.restart_guard.is_some() {
            let run_id = run_id(&mut conn.clone())
                .await
                .map_err(|e| connect_error(&addr, e))?;
            *health.run_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(run_id);
        }
        *conn_cell.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(Node { conn, addr, health })
    }

    /// True when this node's answers count toward a quorum now.
    pub(crate) fn trusted(&self) -> bool {
        if self.health.suspect.load(Ordering::Acquire) {
            return false;
        }
        let until = *self
            .health
            .distrust_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        until.is_none_or(|t| Instant::now() >= t)
    }
}

impl Health {
    /// Reads the run_id again until the server answers; a changed one starts the distrust.
    fn spawn_check(self: &Arc<Self>, mut conn: ConnectionManager, delay: Duration) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.checking.store(false, Ordering::Release);
            return;
        };
        let health = self.clone();
        runtime.spawn(async move {
            let now = loop {
                match run_id(&mut conn).await {
                    Ok(id) => break id,
                    Err(_) => tokio::time::sleep(RECHECK).await,
                }
            };
            let mut known = health.run_id.lock().unwrap_or_else(|e| e.into_inner());
            if known.as_deref() != Some(now.as_str()) {
                *health
                    .distrust_until
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + delay);
                *known = Some(now);
            }
            drop(known);
            health.suspect.store(false, Ordering::Release);
            health.checking.store(false, Ordering::Release);
        });
    }
}

async fn run_id(conn: &mut ConnectionManager) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .ok_or_else(|| {
            (
                redis::ErrorKind::UnexpectedReturnType,
                "INFO server has no run_id",
            )
                .into()
        })
}

fn connect_error(addr: &str, source: redis::RedisError) -> Error {
    Error::Redis {
        op: Op::Connect,
        key: Some(addr.to_owned()),
        source,
    }
}
