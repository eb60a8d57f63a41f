//! A local Redis Cluster: the published `distlock::testing::TestCluster` (which starts and
//! forms it), with what this project's failover tests add: slot owners as the live servers
//! see them, waiting for a failover and for replication to settle.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use distlock::testing::TestCluster;
use redis::Value;

use super::server::RedisServer;
use super::wait::wait_until;

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// Default `cluster-node-timeout`: a master unreachable this long is failed over. Short, so
/// failover tests take seconds; long enough that a loaded 2-core machine does not fail
/// masters over by itself.
pub(crate) const NODE_TIMEOUT_MS: u64 = 1500;

/// How long forming the cluster, or settling after a fault, may take.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// A Redis Cluster of real `redis-server` processes on loopback ports: by default 3 masters
/// with one replica each. Every process can be killed, paused (SIGSTOP), resumed and
/// restarted (it keeps its `nodes.conf`, so it rejoins as the node it was, without data).
///
/// Servers are numbered in start order; which of them are masters changes with failovers, so
/// tests ask [`master_of_slot`](Self::master_of_slot) / [`replicas_of_slot`](Self::replicas_of_slot).
#[derive(Debug)]
pub struct RedisCluster {
    servers: Vec<RedisServer>,
}

impl RedisCluster {
    /// 3 masters, 1 replica each, `cluster-node-timeout` 1500 ms.
    ///
    /// # Panics
    /// If the servers do not start or the cluster does not form within a minute.
    pub fn start() -> Self {
        Self::start_with(3, 1, NODE_TIMEOUT_MS)
    }

    /// `masters` masters with `replicas` replicas each.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(masters: usize, replicas: usize, node_timeout_ms: u64) -> Self {
        let formed = TestCluster::builder()
            .masters(masters)
            .replicas(replicas)
            .arg("--cluster-node-timeout")
            .arg(node_timeout_ms.to_string())
            // A replica whose master is gone may be promoted however stale: the tests want a
            // failover every time, and check what it costs.
            .arg("--cluster-replica-validity-factor")
            .arg("0")
            // Keep serving the slots that are covered while one is not.
            .arg("--cluster-require-full-coverage")
            .arg("no")
            // `DEBUG` from loopback, as on the kit's other servers.
            .arg("--enable-debug-command")
            .arg("local")
            .start_blocking()
            .unwrap_or_else(|e| panic!("forming a cluster: {e}"));
        let servers = formed
            .into_servers()
            .into_iter()
            .map(RedisServer::from_test_server)
            .collect();
        let cluster = RedisCluster { servers };
        cluster.wait_settled();
        cluster
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// `redis://127.0.0.1:<port>/` of every server (seed URLs for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The `i`-th server.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    /// The `i`-th server, to kill, pause, resume or restart it.
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// The server listening on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.servers.iter().position(|s| s.port() == port)
    }

    /// The slot of `key` (its hash tag if it has one), as Redis Cluster computes it.
    pub fn slot_of(key: &[u8]) -> u16 {
        let hashed = match key.iter().position(|&b| b == b'{') {
            Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &key[open + 1..open + 1 + len],
                _ => key,
            },
            None => key,
        };
        crc16(hashed) % SLOTS
    }

    /// The master serving `slot`, as the live servers see it.
    ///
    /// # Panics
    /// If no live server answers or none serves the slot.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        self.owners(slot)
            .expect("a live server knows the slot's master")
            .0
    }

    /// The replicas of the master serving `slot` (connected or not).
    pub fn replicas_of_slot(&self, slot: u16) -> Vec<usize> {
        let master = self.master_of_slot(slot);
        let id = self.node_id(master);
        self.live()
            .find_map(|i| {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut self.servers[i].try_connection().ok()?)
                    .ok()?;
                Some(
                    nodes
                        .lines()
                        .filter(|l| l.split(' ').nth(3) == Some(id.as_str()))
                        .filter_map(|l| port_of(l.split(' ').nth(1)?))
                        .filter_map(|p| self.index_of_port(p))
                        .collect(),
                )
            })
            .unwrap_or_default()
    }

    /// The cluster node id of server `i`.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.servers[i].connection())
            .expect("CLUSTER MYID")
    }

    /// Waits until every live server says `cluster_state:ok`, all agree on which master serves
    /// every slot (all 16384 covered), and every live replica's link to its master is up.
    ///
    /// # Panics
    /// If that does not happen within a minute.
    pub fn wait_settled(&self) {
        assert!(
            wait_until(SETTLE_LIMIT, || self.settled()),
            "the cluster did not settle within {SETTLE_LIMIT:?}"
        );
    }

    /// Waits until a server other than `old` serves `slot` as its master, and every live
    /// server agrees; returns the new master and how long that took.
    ///
    /// # Panics
    /// If no failover happened within a minute.
    pub fn wait_failover(&self, slot: u16, old: usize) -> (usize, Duration) {
        let started = Instant::now();
        loop {
            if let Some((master, agreed)) = self.owners(slot) {
                if master != old && agreed {
                    return (master, started.elapsed());
                }
            }
            assert!(
                started.elapsed() < SETTLE_LIMIT,
                "no failover of slot {slot} away from server {old} within {SETTLE_LIMIT:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// Servers that are running and not paused.
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.servers.len())
            .filter(|&i| self.servers[i].is_running() && !self.servers[i].is_paused())
    }

    /// The master of `slot` as the first live server that answers sees it, and whether every
    /// live server agrees.
    fn owners(&self, slot: u16) -> Option<(usize, bool)> {
        let views: Vec<Option<usize>> = self
            .live()
            .filter_map(|i| self.slot_masters(i))
            .map(|map| {
                map.iter()
                    .find(|(&(start, end), _)| start <= slot && slot <= end)
                    .map(|(_, &port)| port)
                    .and_then(|port| self.index_of_port(port))
            })
            .collect();
        let first = (*views.first()?)?;
        Some((first, views.iter().all(|v| *v == Some(first))))
    }

    /// `CLUSTER SLOTS` of server `i`: slot range -> master port.
    fn slot_masters(&self, i: usize) -> Option<BTreeMap<(u16, u16), u16>> {
        let mut conn = self.servers[i].try_connection().ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).ok()?;
        let Value::Array(ranges) = slots else {
            return None;
        };
        let mut map = BTreeMap::new();
        for range in ranges {
            let Value::Array(parts) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                return None;
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            map.insert(
                (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?),
                u16::try_from(*port).ok()?,
            );
        }
        Some(map)
    }

    fn settled(&self) -> bool {
        let mut views = Vec::new();
        for i in self.live() {
            let Ok(mut conn) = self.servers[i].try_connection() else {
                return false;
            };
            let info: String = match redis::cmd("CLUSTER").arg("INFO").query(&mut conn) {
                Ok(info) => info,
                Err(_) => return false,
            };
            if !info.contains("cluster_state:ok") {
                return false;
            }
            let replication: String = match redis::cmd("INFO").arg("replication").query(&mut conn) {
                Ok(info) => info,
                Err(_) => return false,
            };
            if replication.contains("role:slave") && !replication.contains("master_link_status:up")
            {
                return false;
            }
            let Some(map) = self.slot_masters(i) else {
                return false;
            };
            let covered: u32 = map.keys().map(|&(s, e)| u32::from(e - s) + 1).sum();
            if covered != u32::from(SLOTS) {
                return false;
            }
            views.push(map);
        }
        !views.is_empty() && views.windows(2).all(|w| w[0] == w[1]) && self.replicated(&views[0])
    }

    /// True when every live replica has acknowledged a write made on its master just now
    /// (`WAIT`). A replica reports `master_link_status:up` before its first sync has brought
    /// it anything: promoted then, it would have none of the data written before.
    fn replicated(&self, slots: &BTreeMap<(u16, u16), u16>) -> bool {
        let mut masters: BTreeMap<u16, u16> = BTreeMap::new();
        for (&(first, _), &port) in slots {
            masters.entry(port).or_insert(first);
        }
        masters.into_iter().all(|(port, slot)| {
            let Some(master) = self.index_of_port(port) else {
                return false;
            };
            let replicas = self
                .replicas_of_slot(slot)
                .into_iter()
                .filter(|&r| self.servers[r].is_running() && !self.servers[r].is_paused())
                .count();
            let Ok(mut conn) = self.servers[master].try_connection() else {
                return false;
            };
            let written = redis::cmd("SET")
                .arg(key_in_slot(slot))
                .arg("ready")
                .exec(&mut conn)
                .is_ok();
            let acked: Option<usize> = redis::cmd("WAIT")
                .arg(replicas)
                .arg(2000)
                .query(&mut conn)
                .ok();
            written && acked.is_some_and(|n| n >= replicas)
        })
    }
}

/// A key of the test kit's own that hashes to `slot`.
fn key_in_slot(slot: u16) -> String {
    (0u32..)
        .map(|n| format!("distlock-testkit:ready:{{{n}}}"))
        .find(|key| RedisCluster::slot_of(key.as_bytes()) == slot)
        .expect("every slot has a key")
}

/// `127.0.0.1:7000@17000` (a `CLUSTER NODES` address) -> 7000.
fn port_of(addr: &str) -> Option<u16> {
    addr.split('@').next()?.rsplit(':').next()?.parse().ok()
}

/// CRC16-CCITT (XMODEM), the hash Redis Cluster maps keys to slots with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(RedisCluster::slot_of(b"foo"), 12182);
        assert_eq!(
            RedisCluster::slot_of(b"{user1000}.following"),
            RedisCluster::slot_of(b"user1000")
        );
        assert_eq!(
            RedisCluster::slot_of(b"foo{}{bar}"),
            crc16(b"foo{}{bar}") % SLOTS
        );
        assert_eq!(port_of("127.0.0.1:7000@17000"), Some(7000));
        for slot in [0, 1, 5000, SLOTS - 1] {
            assert_eq!(RedisCluster::slot_of(key_in_slot(slot).as_bytes()), slot);
        }
    }
}
