//! A small throwaway Redis Cluster: masters only, formed with `CLUSTER` commands (no
//! `redis-cli` needed).

use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

use super::{ServerError, TestServer};
use crate::client::{Client, ClientBuilder};
use crate::error::Error;

/// Slots of a Redis Cluster.
const SLOTS: u32 = 16_384;
/// How long a cluster may take to agree on its slots once formed.
const FORM_TIMEOUT: Duration = Duration::from_secs(15);
/// Between two looks at a forming cluster (`CLUSTER INFO` on each node): there is no event
/// for "every node agrees".
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A Redis Cluster of `n` masters (no replicas), each a [`TestServer`] of its own with an
/// even share of the slots, for a [`Client::cluster`] client. Any node can be paused,
/// killed or restarted (`cluster[1].pause()`); [`node_of`](Self::node_of) says which node
/// serves a lock. Dropping it stops them all.
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
}

impl TestCluster {
    /// Starts `masters` servers (at least 1) with cluster mode on, gives each an even share
    /// of the 16,384 slots, introduces them, and returns once every node reports the cluster
    /// `ok` and knows every other.
    pub async fn start(masters: usize) -> Result<TestCluster, ServerError> {
        let masters = masters.max(1);
        let builder = TestServer::builder()
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg("nodes.conf");
        let starts = (0..masters).map(|_| builder.clone().start());
        let nodes = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = TestCluster { nodes };
        cluster.form().await?;
        Ok(cluster)
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

    /// Which node (an index) serves the lock `name` of `client` (its keys' slot, as
    /// assigned at the start).
    pub fn node_of(&self, client: &Client, name: impl AsRef<[u8]>) -> Result<usize, Error> {
        let slot = u32::from(client.inner().key(name.as_ref())?.slot());
        let n = self.nodes.len() as u32;
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
        let n = self.nodes.len() as u32;
        let mut conns = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            conns.push(connect(node).await?);
        }
        for (i, conn) in (0..n).zip(conns.iter_mut()) {
            // A distinct epoch each, as `redis-cli --cluster create` sets: no collisions to
            // settle once they meet.
            command(
                conn,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )
            .await?;
            let (first, last) = slot_range(i, n);
            let mut add = redis::cmd("CLUSTER");
            add.arg("ADDSLOTS");
            for slot in first..=last {
                add.arg(slot);
            }
            command(conn, &add).await?;
        }
        for node in &self.nodes[1..] {
            let meet = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .clone();
            command(&mut conns[0], &meet).await?;
        }
        let started = Instant::now();
        loop {
            let mut settled = true;
            for conn in &mut conns {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(conn)
                    .await
                    .map_err(|e| ServerError::new(format!("CLUSTER INFO: {e}")))?;
                settled &= info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}\r"));
            }
            if settled {
                return Ok(());
            }
            if started.elapsed() > FORM_TIMEOUT {
                return Err(ServerError::new(format!(
                    "the cluster of {n} nodes did not settle within {FORM_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
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
