//! A small throwaway Redis Cluster, formed with `CLUSTER` commands (no `redis-cli` needed).

use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

use super::{ServerError, TestServer, TestServerBuilder};
use crate::client::{Client, ClientBuilder};
use crate::error::Error;

/// Slots of a Redis Cluster.
const SLOTS: u32 = 16_384;
/// How long a cluster may take to agree on its slots once formed.
const FORM_TIMEOUT: Duration = Duration::from_secs(15);
/// Between two looks at a forming cluster (`CLUSTER INFO` on each node): there is no event
/// for "every node agrees".
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A Redis Cluster of `n` masters, each a [`TestServer`] of its own with an even share of
/// the slots (and replicas if [`TestClusterBuilder::replicas`] asks), for a
/// [`Client::cluster`] client. Any node can be paused, killed or restarted
/// (`cluster[1].pause()`; a restarted node keeps its `nodes.conf` and rejoins as the node it
/// was, without data); [`node_of`](Self::node_of) says which node serves a lock. Dropping it
/// stops them all.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::TestCluster;
///
/// let mut cluster = TestCluster::start(3).await?;
/// let locks = cluster.client().await?;
/// let guard = locks.lock("order:42").acquire().await?;
/// let node = cluster.node_of(&locks, "order:42")?;
/// cluster[node].pause()?; // the lock's master goes silent
/// # drop(guard); Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestCluster {
    nodes: Vec<TestServer>,
    masters: usize,
}

/// Configures a [`TestCluster`]; from [`TestCluster::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct TestClusterBuilder {
    masters: usize,
    replicas: usize,
    server: TestServerBuilder,
}

impl TestClusterBuilder {
    /// How many masters (3 unless set; taken within 1 and the 16,384 slots).
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n.clamp(1, SLOTS as usize);
        self
    }

    /// How many replicas each master gets (none unless set). Replica `k` follows master
    /// `k % masters`; the nodes are numbered masters first.
    pub fn replicas(mut self, per_master: usize) -> Self {
        self.replicas = per_master;
        self
    }

    /// One more argument for every node, e.g. `.arg("--cluster-node-timeout").arg("1500")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.server = self.server.arg(arg);
        self
    }

    /// Starts the nodes, gives each master an even share of the 16,384 slots, introduces
    /// them, attaches the replicas, and returns once every node reports the cluster `ok` and
    /// knows every other, and every replica's link to its master is up.
    pub async fn start(self) -> Result<TestCluster, ServerError> {
        let total = self.masters * (1 + self.replicas);
        let builder = self
            .server
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg("nodes.conf");
        let starts = (0..total).map(|_| builder.clone().start());
        let nodes = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = TestCluster {
            nodes,
            masters: self.masters,
        };
        cluster.form().await?;
        Ok(cluster)
    }

    /// [`start`](Self::start) for a caller without an async runtime (or inside one that it
    /// must not block on): formed on a thread of its own.
    pub fn start_blocking(self) -> Result<TestCluster, ServerError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            ServerError::new(format!("a runtime to form the cluster: {e}"))
                        })?
                        .block_on(self.start())
                })
                .join()
                .unwrap_or_else(|_| Err(ServerError::new("forming the cluster panicked")))
        })
    }
}

impl TestCluster {
    /// Starts a cluster of `masters` masters (at least 1) without replicas; see
    /// [`TestClusterBuilder::start`].
    pub async fn start(masters: usize) -> Result<TestCluster, ServerError> {
        Self::builder().masters(masters).start().await
    }

    /// Other shapes: replicas, more server arguments.
    pub fn builder() -> TestClusterBuilder {
        TestClusterBuilder {
            masters: 3,
            replicas: 0,
            server: TestServer::builder(),
        }
    }

    /// The nodes, masters first, to keep beyond the cluster's handle.
    #[must_use]
    pub fn into_servers(self) -> Vec<TestServer> {
        self.nodes
    }

    /// Each node's `redis://` URL, in order.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(TestServer::url).collect()
    }

    /// A cluster client on these nodes ([`Client::cluster`]).
    pub async fn client(&self) -> Result<Client, Error> {
        Client::cluster(self.urls()).await
    }

    /// A builder for a cluster client with settings of the test's own.
    pub fn client_builder(&self) -> ClientBuilder {
        Client::cluster_builder(self.urls())
    }

    /// Which node (an index) serves the lock `name` of `client`: the master given its keys'
    /// slot at the start (a failover since moves it to a replica).
    pub fn node_of(&self, client: &Client, name: impl AsRef<[u8]>) -> Result<usize, Error> {
        let slot = u32::from(client.inner().key(name.as_ref())?.slot());
        let n = self.masters as u32;
        let node = (0..n)
            .find(|&i| slot <= slot_range(i, n).1)
            .unwrap_or(n - 1);
        Ok(node as usize)
    }

    /// How many nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none (never: a cluster has at least one node).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A node by index, if there is one (the `[i]` operator panics out of range).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut TestServer> {
        self.nodes.get_mut(i)
    }

    async fn form(&self) -> Result<(), ServerError> {
        let (masters, total) = (self.masters as u32, self.nodes.len());
        let mut conns = Vec::with_capacity(total);
        for node in &self.nodes {
            conns.push(connect(node).await?);
        }
        for (i, conn) in conns.iter_mut().enumerate() {
            // A distinct epoch each, as `redis-cli --cluster create` sets: no collisions to
            // settle once they meet.
            command(
                conn,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )
            .await?;
            if let Some(i) = u32::try_from(i).ok().filter(|&i| i < masters) {
                let (first, last) = slot_range(i, masters);
                let mut add = redis::cmd("CLUSTER");
                add.arg("ADDSLOTS");
                for slot in first..=last {
                    add.arg(slot);
                }
                command(conn, &add).await?;
            }
        }
        for node in &self.nodes[1..] {
            let meet = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .clone();
            command(&mut conns[0], &meet).await?;
        }
        // A replica can only follow a master it knows.
        self.settle(&mut conns, |info, _| known(info, total))
            .await?;
        let mut ids = Vec::with_capacity(self.masters);
        for conn in &mut conns[..self.masters] {
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query_async(conn)
                .await
                .map_err(|e| ServerError::new(format!("CLUSTER MYID: {e}")))?;
            ids.push(id);
        }
        for (k, conn) in conns[self.masters..].iter_mut().enumerate() {
            let master = &ids[k % self.masters];
            command(conn, redis::cmd("CLUSTER").arg("REPLICATE").arg(master)).await?;
        }
        let replicas_from = self.masters;
        self.settle(&mut conns, |info, i| {
            known(info, total)
                && info.contains("cluster_state:ok")
                && (i < replicas_from || info.contains("master_link_status:up"))
        })
        .await
    }

    /// Waits until `settled` holds for every node's `CLUSTER INFO` followed by its `INFO
    /// replication`, given the node's index.
    async fn settle(
        &self,
        conns: &mut [redis::aio::MultiplexedConnection],
        settled: impl Fn(&str, usize) -> bool,
    ) -> Result<(), ServerError> {
        let started = Instant::now();
        loop {
            let mut all = true;
            for (i, conn) in conns.iter_mut().enumerate() {
                let cluster: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(conn)
                    .await
                    .map_err(|e| ServerError::new(format!("CLUSTER INFO: {e}")))?;
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(conn)
                    .await
                    .map_err(|e| ServerError::new(format!("INFO replication: {e}")))?;
                all &= settled(&format!("{cluster}{replication}"), i);
            }
            if all {
                return Ok(());
            }
            if started.elapsed() > FORM_TIMEOUT {
                return Err(ServerError::new(format!(
                    "the cluster of {} nodes did not settle within {FORM_TIMEOUT:?}",
                    conns.len()
                )));
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// Whether a node's `CLUSTER INFO` says it knows all `total` nodes.
fn known(info: &str, total: usize) -> bool {
    info.contains(&format!("cluster_known_nodes:{total}\r"))
}

/// The slots node `i` of `n` serves: an even share each, the last taking the remainder.
fn slot_range(i: u32, n: u32) -> (u32, u32) {
    let share = SLOTS / n;
    let first = i * share;
    let last = if i + 1 == n {
        SLOTS - 1
    } else {
        first + share - 1
    };
    (first, last)
}

async fn connect(node: &TestServer) -> Result<redis::aio::MultiplexedConnection, ServerError> {
    let client = redis::Client::open(node.url())
        .map_err(|e| ServerError::new(format!("{}: {e}", node.url())))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| ServerError::new(format!("connecting to {}: {e}", node.url())))
}

async fn command(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<(), ServerError> {
    cmd.query_async::<()>(conn)
        .await
        .map_err(|e| ServerError::new(format!("forming the cluster: {e}")))
}

impl Index<usize> for TestCluster {
    type Output = TestServer;

    fn index(&self, i: usize) -> &TestServer {
        &self.nodes[i]
    }
}

impl IndexMut<usize> for TestCluster {
    fn index_mut(&mut self, i: usize) -> &mut TestServer {
        &mut self.nodes[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slots_are_shared_out_whole() {
        for n in 1..=7 {
            let mut next = 0;
            for i in 0..n {
                let (first, last) = slot_range(i, n);
                assert_eq!(first, next);
                next = last + 1;
            }
            assert_eq!(next, SLOTS);
        }
    }
}
