//! What the facade asks of every node beside the lock cycle: reading a lock on all of them and
//! what a majority reads alike (inspection, an election's observers), a script sent to all of
//! them (a forced unlock), the holders' records, the lock names under a prefix (those a
//! majority holds), and a message on a lock's wake-up channel (a new leader's announcement).
//! The facade names the script and reads the answers; which connection carries each request,
//! at once on every node and within the quorum's node timeout, is decided here, as for an
//! acquisition.

use std::collections::BTreeSet;
use std::sync::Arc;

use redis::{Cmd, RedisResult, Value};

use crate::algorithm::{invoke, Lua};
use crate::conn::{within, Conn};
use crate::error::{Error, NodeError, Op};
use crate::identity::Described;
use crate::key::{name_of, LockKey};
use crate::majority::Majority;

use super::{records, Nodes};

/// What a process's record says of a hold: host, pid and the call site's name.
pub(crate) type Recorded = (Option<String>, Option<u32>, Option<String>);

/// The nodes' answers to one read, from at least a majority of them (on a quorum).
pub(crate) struct Readings<T> {
    /// `(node, answer)`, in node order.
    answers: Vec<(usize, T)>,
    majority: Majority,
}

/// The answers of a majority of nodes that read alike (see [`Readings::agreed`]).
pub(crate) struct Agreed<'a, T> {
    /// `(node, answer)`, in node order: at least a majority of the nodes.
    pub(crate) answers: Vec<(usize, &'a T)>,
    majority: Majority,
}

impl<T> Readings<T> {
    /// Every answer, in node order.
    pub(crate) fn all(&self) -> impl Iterator<Item = &(usize, T)> {
        self.answers.iter()
    }

    /// The answer of `node`, if it answered.
    pub(crate) fn into_answer(self, node: usize) -> Option<T> {
        self.answers
            .into_iter()
            .find_map(|(i, answer)| (i == node).then_some(answer))
    }

    /// The answers of the nodes that read alike by `vote` when a majority of all nodes do
    /// (one node: its answer), `None` when no reading has a majority (a quorum forming or
    /// coming apart).
    pub(crate) fn agreed<K: PartialEq>(&self, vote: impl Fn(&T) -> K) -> Option<Agreed<'_, T>> {
        let votes: Vec<K> = self
            .answers
            .iter()
            .map(|(_, answer)| vote(answer))
            .collect();
        let winner = votes.iter().find(|&candidate| {
            let alike = votes.iter().filter(|&v| v == candidate).count();
            self.majority.reached(alike)
        })?;
        let answers = self
            .answers
            .iter()
            .zip(&votes)
            .filter(|(_, v)| *v == winner)
            .map(|((node, answer), _)| (*node, answer))
            .collect();
        Some(Agreed {
            answers,
            majority: self.majority,
        })
    }
}

impl<T> Agreed<'_, T> {
    /// What the agreeing majority reads at least of a value (a lease, a counter): see
    /// [`Majority::least_agreed`]. `None` when the nodes do not all give one.
    pub(crate) fn least<V: Ord + Copy>(&self, value: impl Fn(&T) -> V) -> Option<V> {
        self.majority
            .least_agreed_of(|| self.answers.iter().map(|(_, a)| value(a)))
    }
}

impl Nodes {
    /// The connection for a request outside the lock cycle: a quorum node's commands
    /// connection, a single node's first (beside its renewals and subscriptions, behind no
    /// acquisition).
    fn conn_for(&self, node: usize) -> Conn {
        let node = &self.nodes[node];
        if self.is_quorum() {
            node.commands()
        } else {
            node.conn.clone()
        }
    }

    /// `call`, bounded by the quorum's node timeout on a quorum; elsewhere the connection's
    /// own response timeout bounds it.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        if self.is_quorum() {
            within(self.node_timeout, call).await
        } else {
            call.await
        }
    }

    /// Sends `cmd` (a call of `script`, about `key`) to every node at once and reads each
    /// answer with `parse`, each node within the quorum's node timeout. Answers in node order.
    pub(crate) async fn on_every_node<T>(
        &self,
        op: Op,
        key: &LockKey,
        script: &Lua,
        cmd: &Cmd,
        parse: impl Fn(Value) -> Result<T, Error>,
    ) -> Vec<Result<T, Error>> {
        let calls = (0..self.nodes.len()).map(|i| {
            let mut conn = self.conn_for(i);
            async move {
                self.bounded(invoke::<_, Value>(script, cmd, &mut conn))
                    .await
                    .map_err(|e| Error::redis(op, key.name(), e))
            }
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .map(|reply| reply.and_then(&parse))
            .collect()
    }

    /// Reads a lock on every node (see [`on_every_node`](Self::on_every_node)): the answers
    /// when a majority gave one (a node whose answer `parse` refused counts as failed), else
    /// [`Error::QuorumNotReached`] naming each node's failure; a single node's failure is the
    /// error itself.
    pub(crate) async fn read_every<T>(
        &self,
        key: &LockKey,
        script: &Lua,
        cmd: &Cmd,
        parse: impl Fn(Value) -> Result<T, Error>,
    ) -> Result<Readings<T>, Error> {
        let replies = self
            .on_every_node(Op::Inspect, key, script, cmd, parse)
            .await;
        let (mut answers, mut errors) = (Vec::new(), Vec::new());
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(answer) => answers.push((i, answer)),
                Err(e) if !self.is_quorum() => return Err(e),
                Err(e) => errors.push(NodeError {
                    node: self.nodes[i].addr.clone(),
                    reason: e.to_string(),
                    retryable: e.is_retryable(),
                }),
            }
        }
        if !self.majority.reached(answers.len()) {
            return Err(Error::QuorumNotReached {
                name: key.lock_name(),
                acked: answers.len(),
                needed: self.majority.needed(),
                nodes: self.majority.nodes(),
                errors,
            });
        }
        Ok(Readings {
            answers,
            majority: self.majority,
        })
    }

    /// What the record of a hold's process says on `node` (host, pid, site); nothing when
    /// it is gone or the node does not answer in time.
    pub(crate) async fn look_up(
        &self,
        node: usize,
        prefix: &str,
        described: &Described,
    ) -> Recorded {
        let mut conn = self.conn_for(node);
        let look_up = async {
            Ok::<_, redis::RedisError>(records::look_up(&mut conn, prefix, described).await)
        };
        self.bounded(look_up).await.unwrap_or_default()
    }

    /// The names of the locks held now under `prefix` (a `SCAN` of every node at once, each
    /// request within the quorum's node timeout: an operator's listing, not a hot path),
    /// sorted. On a quorum, the names a majority of the nodes holds, as the quorum sees a
    /// lock (a hold a minority keeps, an attempt that lost or a leftover, holds nothing), once
    /// a majority answered; fewer is [`Error::QuorumNotReached`]. A single node's failure is
    /// the error itself.
    pub(crate) async fn lock_names(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let pattern = if prefix.is_empty() {
            "*".to_owned()
        } else {
            format!("{}:*", glob_escape(prefix))
        };
        let scans = (0..self.nodes.len()).map(|i| self.names_on(i, prefix, &pattern));
        let scanned = futures_util::future::join_all(scans).await;
        let (mut held, mut answered, mut errors) = (Vec::new(), 0, Vec::new());
        for (i, names) in scanned.into_iter().enumerate() {
            match names {
                Ok(names) => {
                    answered += 1;
                    held.extend(names);
                }
                Err(e) if !self.is_quorum() => return Err(e),
                Err(e) => errors.push(NodeError {
                    node: self.nodes[i].addr.clone(),
                    reason: e.to_string(),
                    retryable: e.is_retryable(),
                }),
            }
        }
        if !self.majority.reached(answered) {
            return Err(Error::QuorumNotReached {
                name: pattern.into(),
                acked: answered,
                needed: self.majority.needed(),
                nodes: self.majority.nodes(),
                errors,
            });
        }
        // Each node's names once, so a name's count is how many nodes hold it.
        held.sort_unstable();
        let mut names: Vec<String> = Vec::new();
        for run in held.chunk_by(|a, b| a == b) {
            if self.majority.reached(run.len()) {
                names.push(run[0].clone());
            }
        }
        Ok(names)
    }

    /// The names of the locks `node` holds under `prefix` (keys matching `pattern`).
    async fn names_on(
        &self,
        node: usize,
        prefix: &str,
        pattern: &str,
    ) -> Result<BTreeSet<String>, Error> {
        let failed = |source| Error::Redis {
            op: Op::Inspect,
            name: None,
            server: None,
            source,
        };
        let mut conn = self.conn_for(node);
        let mut names = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .bounded(scan.query_async(&mut conn))
                .await
                .map_err(failed)?;
            // Lock keys only: helper keys and records have shapes of their own.
            let candidates: Vec<(Vec<u8>, String)> = keys
                .into_iter()
                .filter_map(|k| name_of(prefix, &k).map(|name| (k, name)))
                .collect();
            let ttls: Vec<i64> = if candidates.is_empty() {
                Vec::new()
            } else {
                let mut pipe = redis::pipe();
                for (k, _) in &candidates {
                    pipe.cmd("PTTL").arg(k);
                }
                self.bounded(pipe.query_async(&mut conn))
                    .await
                    .map_err(failed)?
            };
            // Locks always expire: a key without expiry is the application's.
            for ((_, name), ttl) in candidates.into_iter().zip(ttls) {
                if ttl > 0 {
                    names.insert(name);
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(names);
            }
        }
    }

    /// True where the lock scripts publish with `SPUBLISH` (their `s` argument): a Cluster's
    /// connection (see `Conn::publish`).
    pub(crate) fn publishes_sharded(&self) -> bool {
        self.nodes.first().is_some_and(|node| node.conn.sharded())
    }

    /// Publishes `payload` on `key`'s wake-up channel on every node, in the background and
    /// best-effort (each node within the quorum's node timeout): a listener that misses it
    /// reads the lock again on its own schedule.
    pub(crate) fn publish(self: &Arc<Self>, key: &LockKey, payload: &'static [u8]) {
        let (nodes, channel) = (self.clone(), key.channel());
        self.tasks.spawn(async move {
            let sends = nodes.nodes.iter().map(|node| {
                let (mut conn, channel) = (node.conn.clone(), &channel);
                let nodes = &nodes;
                async move {
                    let _ = nodes.bounded(conn.publish(channel, payload)).await;
                }
            });
            futures_util::future::join_all(sends).await;
        });
    }
}

/// `s` with the glob pattern's special characters escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
