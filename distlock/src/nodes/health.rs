//! Whether a node's votes can be trusted: the restart guard.
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

use tokio::sync::mpsc;

use crate::conn::Conn;
use crate::sync::lock;

/// How often a suspect node's `run_id` is read again while it does not answer.
const RECHECK: Duration = Duration::from_millis(100);

#[derive(Default)]
pub(super) struct Health {
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
    pub(super) fn judge(&self, info: ServerInfo, delay: Duration) {
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

impl Health {
    /// The node may have restarted (a connection of it was lost or reopened): no votes until
    /// its `INFO` was read again.
    pub(super) fn suspect(&self) {
        self.suspect.store(true, Ordering::Release);
    }

    /// True when this node's answers count toward a quorum now.
    pub(super) fn trusted(&self) -> bool {
        if self.suspect.load(Ordering::Acquire) {
            return false;
        }
        lock(&self.distrust_until).is_none_or(|t| Instant::now() >= t)
    }
}

/// Watches one node: after every disconnection (and at once for a node that was down at
/// start-up) reads `INFO server` until the server answers, and judges it by its `run_id` and
/// uptime ([`Health::judge`]). The node stays suspect, casting no vote, until then.
pub(super) fn spawn_monitor(
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
pub(super) struct ServerInfo {
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

pub(super) async fn server_info(conn: &mut Conn) -> redis::RedisResult<ServerInfo> {
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
