//! One Redis server the client talks to: its connection, and whether its votes can be trusted.
//!
//! A Redis master restarted without its data has forgotten every lock it held. In a quorum,
//! that lets a second client win a majority while the first still holds the lock (the hazard
//! the Redlock description calls out). Each quorum node therefore remembers the server's
//! `run_id`; when its connection drops, the node is suspect until `INFO server` answers again,
//! and if the `run_id` changed it does not count toward any quorum for the restart delay (set
//! it to your longest ttl), by which time every lock it forgot has expired everywhere else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc;

use crate::error::{Error, Op};
use crate::notify::Channels;

/// How often a suspect node's `run_id` is read again while it does not answer.
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
    /// The task that re-reads the run_id after a disconnection; stopped with the node.
    monitor: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct Health {
    run_id: Mutex<Option<String>>,
    /// Set on disconnection; cleared once the run_id was read again.
    suspect: AtomicBool,
    /// A restart was seen: no votes before this instant.
    distrust_until: Mutex<Option<Instant>>,
}

impl Node {
    /// Opens the connection (RESP3, so release notifications arrive as push frames and feed
    /// `channels`). Fails within the connect timeout when no server answers, unless
    /// `lazy_if_down`: a quorum node that is down at start-up is then connected lazily, kept
    /// out of quorums until it answers (and, having never been seen, for the restart delay
    /// after that), and returned with the error that made it lazy.
    pub(crate) async fn connect(
        url: &str,
        settings: &NodeSettings,
        channels: Arc<Channels>,
        lazy_if_down: bool,
    ) -> Result<(Node, Option<Error>), Error> {
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
        // The push handler lives inside the connection, so it must not own the connection
        // (a cycle would leak it): it only flags the node and wakes the monitor task.
        let (recheck, rechecks) = mpsc::unbounded_channel::<()>();
        let on_push = {
            let (health, guarded) = (health.clone(), settings.restart_guard.is_some());
            move |push: PushInfo| {
                if guarded && push.kind == PushKind::Disconnection {
                    health.suspect.store(true, Ordering::Release);
                    let _ = recheck.send(());
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
        let connecting = ConnectionManager::new_with_config(client.clone(), config.clone());
        let attempt = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", settings.connect_timeout),
            )
            .into()),
        };
        let (conn, failure) = match attempt {
            Ok(conn) => (conn, None),
            Err(source) if lazy_if_down => {
                let conn = ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|e| connect_error(&addr, e))?;
                (conn, Some(connect_error(&addr, source)))
            }
            Err(source) => return Err(connect_error(&addr, source)),
        };
        let monitor = match settings.restart_guard {
            None => None,
            Some(delay) => {
                if failure.is_none() {
                    let id = run_id(&mut conn.clone())
                        .await
                        .map_err(|e| connect_error(&addr, e))?;
                    *lock(&health.run_id) = Some(id);
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
            addr,
            health,
            monitor,
        };
        Ok((node, failure))
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
/// start-up) reads the run_id until the server answers; a changed or first-seen run_id starts
/// the distrust. The node stays suspect, casting no vote, until then.
fn spawn_monitor(
    mut conn: ConnectionManager,
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
            let now = loop {
                match run_id(&mut conn).await {
                    Ok(id) => break id,
                    Err(_) => tokio::time::sleep(RECHECK).await,
                }
            };
            let mut known = lock(&health.run_id);
            if known.as_deref() != Some(now.as_str()) {
                *lock(&health.distrust_until) = Some(Instant::now() + delay);
                *known = Some(now);
            }
            drop(known);
            health.suspect.store(false, Ordering::Release);
        }
    })
    .abort_handle()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
