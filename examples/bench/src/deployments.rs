//! Where the scenarios run: the single node, the five quorum nodes, the Redis Cluster with
//! its slot map, S13's PostgreSQL; and the columns connected to each.

use std::sync::Arc;

use distlock_testkit::{PostgresServer, RedisCluster, RedisServer, RedisServers};

use crate::columns::{Column, Kind};

/// The Redis Cluster of S1c/S2c: 3 masters without replicas (nothing fails over in a
/// benchmark, so replicas would only add replication traffic to the masters).
pub const CLUSTER_MASTERS: usize = 3;
pub const CLUSTER_REPLICAS: usize = 0;
/// Longer than the kit's 1.5 s default: a master stalled by the loaded machine must not be
/// marked failed mid-round (without replicas nothing could take over its slots).
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 5_000;

/// Columns connected to one deployment; `Err` says why a column cannot run there.
pub type Columns = Vec<(Kind, Result<Arc<dyn Column>, String>)>;

/// Where the scenarios run: the single node, the five quorum nodes, and the Redis Cluster
/// (when a cluster scenario is selected) with its slot map.
pub struct Deployments<'a> {
    pub node: &'a RedisServer,
    pub nodes: &'a RedisServers,
    pub cluster: Option<(&'a RedisCluster, &'a SlotMap)>,
    /// S13's PostgreSQL, when S13 runs.
    pub postgres: Option<&'a Result<PostgresServer, String>>,
}

/// Which master serves each slot, read once after the cluster formed (nothing fails over in
/// a benchmark): S2c checks that its keys spread over every master.
pub struct SlotMap {
    /// (first slot, last slot, master's port)
    ranges: Vec<(u16, u16, u16)>,
}

impl SlotMap {
    pub fn read(cluster: &RedisCluster) -> SlotMap {
        // `CLUSTER SLOTS`: [first, last, [ip, port, id, ...], replicas...] per range.
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut cluster.server(0).connection())
            .expect("CLUSTER SLOTS");
        let int = |v: &redis::Value| redis::from_redis_value_ref::<u16>(v).expect("a number");
        let ranges = slots
            .iter()
            .map(|range| {
                let master: Vec<redis::Value> =
                    redis::from_redis_value_ref(&range[2]).expect("the master's address");
                (int(&range[0]), int(&range[1]), int(&master[1]))
            })
            .collect();
        SlotMap { ranges }
    }

    /// The port of the master serving `key`.
    fn master(&self, key: &str) -> Option<u16> {
        let slot = RedisCluster::slot_of(key.as_bytes());
        self.ranges
            .iter()
            .find(|&&(first, last, _)| first <= slot && slot <= last)
            .map(|&(_, _, port)| port)
    }

    /// How many masters the S2c keys of a run on `key` by `kind` land on.
    pub fn s2c_masters(&self, kind: Kind, key: &str) -> usize {
        let masters: std::collections::BTreeSet<Option<u16>> = (0..crate::scenarios::S2_TASKS)
            .map(|i| self.master(&kind.cluster_key(&crate::uncontended::s2_key(key, i))))
            .collect();
        masters.len()
    }
}

pub async fn connect_all(urls: &[String]) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        columns.push((kind, kind.connect(urls).await));
    }
    columns
}

pub async fn connect_cluster(urls: &[String]) -> Columns {
    let mut columns = Vec::new();
    for kind in Kind::ALL {
        columns.push((kind, kind.connect_cluster(urls).await));
    }
    columns
}
