//! A local Sentinel deployment: one master, its replicas, and sentinels watching them.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use super::server::{RedisServer, RedisServerBuilder};
use super::wait::wait_until;

/// The name the sentinels know the master by.
pub(crate) const MASTER_NAME: &str = "distlock";

/// `down-after-milliseconds`: the master is declared down after this long without an answer.
pub(crate) const DOWN_AFTER_MS: u64 = 1000;
/// `failover-timeout`.
pub(crate) const FAILOVER_TIMEOUT_MS: u64 = 3000;

const SETTLE_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// A master with replicas (`data` servers; index 0 starts as the master) and sentinels
/// (quorum 2) watching it, all real processes on loopback ports. Any data server can be
/// killed, paused, resumed and restarted.
#[derive(Debug)]
pub struct RedisSentinel {
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    // Holds the sentinels' config files; dropped after them.
    _conf: tempfile::TempDir,
}

impl RedisSentinel {
    /// 1 master, 2 replicas, 3 sentinels.
    ///
    /// # Panics
    /// If a server does not start or the deployment does not settle within a minute.
    pub fn start() -> Self {
        Self::start_with(2, 3)
    }

    /// 1 master, `replicas` replicas, `sentinels` sentinels (quorum: a majority of them).
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(replicas: usize, sentinels: usize) -> Self {
        Self::start_servers(&vec![RedisServer::builder(); replicas + 1], sentinels)
    }

    /// A master and replicas each of its own executable (the master's first): a failover to
    /// a server of another version. The replicas must load the master's RDB (Valkey 8.1
    /// replicates from Redis 7.0; the reverse fails). The sentinels run the kit's server.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with_binaries(binaries: &[&Path], sentinels: usize) -> Self {
        let mut builders: Vec<RedisServerBuilder> = binaries
            .iter()
            .map(|binary| RedisServer::builder().binary(binary))
            .collect();
        // The replicas' first sync at once, not after the default 5 s wait for more replicas.
        builders[0] = builders[0]
            .clone()
            .args(["--repl-diskless-sync-delay", "0"]);
        Self::start_servers(&builders, sentinels)
    }

    fn start_servers(builders: &[RedisServerBuilder], sentinels: usize) -> Self {
        let master = builders[0].start();
        let mut data = vec![master];
        let replicaof = data[0].port().to_string();
        data.extend(builders[1..].iter().map(|b| {
            b.clone()
                .args(["--replicaof", "127.0.0.1", &replicaof])
                .start()
        }));
        let conf = tempfile::Builder::new()
            .prefix("distlock-sentinel-")
            .tempdir()
            .expect("temp dir for sentinel configs");
        let quorum = sentinels / 2 + 1;
        let watchers = (0..sentinels)
            .map(|i| {
                let path = conf.path().join(format!("sentinel-{i}.conf"));
                fs::write(
                    &path,
                    format!(
                        "sentinel monitor {MASTER_NAME} 127.0.0.1 {replicaof} {quorum}\n\
                         sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                         sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                         sentinel parallel-syncs {MASTER_NAME} 1\n"
                    ),
                )
                .expect("write a sentinel config");
                RedisServer::builder()
                    .config_file(path)
                    .arg("--sentinel")
                    .start()
            })
            .collect();
        let deployment = RedisSentinel {
            data,
            sentinels: watchers,
            _conf: conf,
        };
        deployment.wait_settled();
        deployment
    }

    /// `redis://127.0.0.1:<port>/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The master name to ask the sentinels for.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// Number of data servers (master and replicas).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no data servers.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The `i`-th data server.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.data[i]
    }

    /// The `i`-th data server, to kill, pause, resume or restart it.
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.data[i]
    }

    /// The `i`-th sentinel.
    pub fn sentinel(&self, i: usize) -> &RedisServer {
        &self.sentinels[i]
    }

    /// The data server every sentinel names as the master, if they agree.
    pub fn master(&self) -> Option<usize> {
        let mut seen = None;
        for s in &self.sentinels {
            let port = self.master_port(s)?;
            let i = self.data.iter().position(|d| d.port() == port)?;
            if seen.is_some_and(|m| m != i) {
                return None;
            }
            seen = Some(i);
        }
        seen
    }

    /// Waits until the sentinels agree on a master that says it is one, know each other and
    /// its live replicas, and every live replica's link to it is up.
    ///
    /// # Panics
    /// If that does not happen within a minute.
    pub fn wait_settled(&self) {
        assert!(
            wait_until(SETTLE_LIMIT, || self.settled()),
            "the sentinel deployment did not settle within {SETTLE_LIMIT:?}"
        );
    }

    /// Waits until the sentinels agree on a master other than `old`; returns it and how long
    /// that took.
    ///
    /// # Panics
    /// If no failover happened within a minute.
    pub fn wait_failover(&self, old: usize) -> (usize, Duration) {
        let started = Instant::now();
        loop {
            if let Some(m) = self.master().filter(|&m| m != old) {
                if self.role(m).as_deref() == Some("master") {
                    return (m, started.elapsed());
                }
            }
            assert!(
                started.elapsed() < SETTLE_LIMIT,
                "no failover away from server {old} within {SETTLE_LIMIT:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    fn master_port(&self, sentinel: &RedisServer) -> Option<u16> {
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut sentinel.try_connection().ok()?)
            .ok()?;
        addr?.1.parse().ok()
    }

    fn role(&self, i: usize) -> Option<String> {
        let server = &self.data[i];
        if !server.is_running() || server.is_paused() {
            return None;
        }
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut server.try_connection().ok()?)
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_owned())
    }

    fn settled(&self) -> bool {
        let Some(master) = self.master() else {
            return false;
        };
        if self.role(master).as_deref() != Some("master") {
            return false;
        }
        let live_replicas = (0..self.data.len())
            .filter(|&i| i != master && self.role(i).is_some())
            .collect::<Vec<_>>();
        for &i in &live_replicas {
            let Ok(mut conn) = self.data[i].try_connection() else {
                return false;
            };
            let info: String = match redis::cmd("INFO").arg("replication").query(&mut conn) {
                Ok(info) => info,
                Err(_) => return false,
            };
            let expected = format!("master_port:{}", self.data[master].port());
            if !info.contains("master_link_status:up") || !info.contains(&expected) {
                return false;
            }
        }
        self.sentinels.iter().all(|s| {
            let Ok(mut conn) = s.try_connection() else {
                return false;
            };
            let fields: Result<Vec<String>, _> = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(MASTER_NAME)
                .query(&mut conn);
            let Ok(fields) = fields else {
                return false;
            };
            let field = |name: &str| -> Option<usize> {
                let at = fields.iter().position(|f| f == name)?;
                fields.get(at + 1)?.parse().ok()
            };
            field("num-other-sentinels") == Some(self.sentinels.len() - 1)
                && field("num-slaves").is_some_and(|n| n >= live_replicas.len())
        })
    }
}
