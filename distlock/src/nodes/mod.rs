//! The servers a client locks on, and the Redlock quorum over them.
//!
//! A single-node client is the case N = 1, quorum 1. With N independent masters a lock needs
//! a majority (N/2 + 1). The per-node work is the mode's own scripts, unchanged; this layer
//! only fans them out and counts:
//!
//! * requests go to every node **in parallel** (the patent's one-by-one order multiplies the
//!   latency by N), each bounded by a per-node timeout far below the ttl, and an acquisition
//!   returns as soon as a majority granted it;
//! * the caller measured the start on the monotonic clock, so the guard's validity is
//!   `ttl - elapsed - drift` and an answer that came too late is given back (see `lock.rs`);
//! * a failed attempt is released on **all** nodes, also those that did not answer, before the
//!   caller hears of it, so no partial lock outlives the call;
//! * errors on a minority of nodes are tolerated; a majority unreachable is
//!   [`Error::QuorumNotReached`] naming each node's failure;
//! * a node whose server may have restarted within the restart delay (its own uptime is
//!   shorter, or its `run_id` changed while this client watched) casts no vote until the
//!   delay has passed (see [`node`]).
//!
//! Fencing tokens (only when asked for: [`LockRequest::fencing`](crate::LockRequest::fencing)):
//! each node keeps its own counter; the acquisition's token is the maximum
//! over the granting majority, and the majority's counters are then raised to it. Any later
//! majority shares a node with this one, so its token is larger, **provided no node loses its
//! data** (a restart without persistence resets that node's counter; the restart guard keeps
//! it out of quorums for a while, but run Redis with `appendfsync always` where fencing
//! matters).

mod commands;
mod every;
mod eviction;
mod groups;
mod health;
mod listen;
pub(crate) mod node;
pub(crate) mod records;

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::algorithm::{invoke, Algorithm, Ask, Attempt, HoldId, Lua};
use crate::config::Replicas;
use crate::conn::{no_answer_within, Conn};
use crate::error::{Error, NodeError};

use crate::identity;
use crate::key::LockKey;
use crate::majority::Majority;
use crate::tasks::Tasks;
use crate::token::FencingToken;
pub(crate) use groups::extend_groups;
use health::until_answered;
pub(crate) use node::{Node, NodeSettings};
pub(crate) use records::Records;

static RAISE_FENCE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../fence.lua"),
        include_str!("raise_fence.lua")
    ))
});

/// The servers of one client.
pub(crate) struct Nodes {
    pub(crate) nodes: Vec<Node>,
    /// How many must agree: 1 for a single node, N/2 + 1 for a quorum.
    pub(crate) majority: Majority,
    /// Bound on one node's answer inside a quorum operation.
    pub(crate) node_timeout: Duration,
    /// This client's waiters: a release publishes for them even where no waiter marked the
    /// lock (see [`Listeners`]).
    pub(crate) listeners: Arc<dyn Listeners>,
    /// The process's record on each node, naming the holders of this client's holds.
    pub(crate) records: Records,
    /// The client's background work, and whether it is closed.
    pub(crate) tasks: Tasks,
}

/// Who listens for a lock's releases in this process: a setnx release publishes for them even
/// where no waiter marked the lock as waited for (they queued behind a local attempt and never
/// marked it). The waiters' state lives above this layer; it is handed down as this.
pub(crate) trait Listeners: Send + Sync {
    /// True when a task of this client waits subscribed to `key`'s channel.
    fn listening(&self, key: &LockKey) -> bool;
}

/// One acquire attempt, as the nodes send it.
#[derive(Clone, Copy)]
pub(crate) struct AcquireAttempt<'a> {
    pub(crate) algorithm: &'static Algorithm,
    pub(crate) key: &'a LockKey,
    /// The acquisition the attempt belongs to.
    pub(crate) id: &'a HoldId,
    pub(crate) ttl_ms: u64,
    pub(crate) ask: Ask,
    /// Replica acknowledgement (never on a quorum).
    pub(crate) replicas: Option<Replicas>,
    /// The call site's number in this process, whose record the server must have first.
    pub(crate) site: u32,
    /// When the attempt was started (read before it): the records' clock.
    pub(crate) sent: Instant,
}

/// What one node said.
type Answer<T> = Result<T, NodeError>;

impl Nodes {
    pub(crate) fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }

    /// The connection of a single-node client for the commands of the hold `id` (see
    /// [`Node::lane`]).
    fn single(&self, id: &HoldId) -> Option<Conn> {
        (!self.is_quorum()).then(|| self.nodes[0].lane(id.lane))
    }

    /// Runs `op` on every node at once (untrusted nodes answer with an error unless
    /// `all_nodes`), yielding answers as they come.
    fn fan_out<'a, T, F, Fut>(
        &'a self,
        all_nodes: bool,
        op: F,
    ) -> FuturesUnordered<impl Future<Output = (usize, Answer<T>)> + 'a>
    where
        F: Fn(&'a Node, Conn) -> Fut + 'a,
        Fut: Future<Output = Result<T, Error>> + 'a,
        T: 'a,
    {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let call = (all_nodes || node.trusted()).then(|| op(node, node.commands()));
                async move { (i, ask(node, self.node_timeout, call).await) }
            })
            .collect()
    }

    /// [`fan_out`](Self::fan_out) whose requests own what they use, so that those still on
    /// their way once the outcome is decided can be left to finish in a task of their own.
    fn fan_out_owned<T, F, Fut>(
        self: &Arc<Self>,
        all_nodes: bool,
        op: F,
    ) -> FuturesUnordered<impl Future<Output = (usize, Answer<T>)> + Send + 'static>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let call = (all_nodes || node.trusted()).then(|| op(node.commands()));
                let nodes = self.clone();
                async move {
                    let node = &nodes.nodes[i];
                    (i, ask(node, nodes.node_timeout, call).await)
                }
            })
            .collect()
    }

    /// One acquire attempt on every node (with replica acknowledgement, on the one node: it
    /// is refused on a quorum before this is reached).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        attempt: AcquireAttempt<'_>,
    ) -> Result<Attempt, Error> {
        let AcquireAttempt {
            algorithm,
            key,
            id,
            ttl_ms,
            ask,
            replicas,
            site,
            sent,
        } = attempt;
        if self.records.lacks(site) {
            // Before the first hold from a call site: the record that names it.
            // It goes on the acquisition's own connection (a single node's lane), so it
            // reaches the server first; boxed, as a rare path, out of the hot future.
            let conns: Vec<Conn> = match self.single(id) {
                Some(conn) => vec![conn],
                None => self.nodes.iter().map(Node::commands).collect(),
            };
            let write = self.records.write_lacking(site, conns, self.node_timeout);
            Box::pin(write).await;
        }
        self.records.rewrite_if_old(&self.nodes, &self.tasks, sent);
        if let Some(mut conn) = self.single(id) {
            self.nodes[0].eviction.check(&mut conn).await?;
            // A set of names spanning slots, on a Redis Cluster: a slot at a time.
            if let Some(groups) = key.slot_groups().filter(|_| conn.sharded()) {
                return Box::pin(self.acquire_in_groups(conn, attempt, groups)).await;
            }
            let server = &self.nodes[0].quirks;
            if let Some(replicas) = replicas {
                let call = algorithm.acquire_cmd(key, id, ttl_ms, ask, server.refuses_set_nx_get());
                return Box::pin(algorithm.try_acquire_acked(&mut conn, &call, replicas)).await;
            }
            return algorithm
                .try_acquire(&mut conn, server, key, id, ttl_ms, ask)
                .await;
        }
        // Boxed: the quorum's state would otherwise size every single-node acquisition's
        // future too, which is moved (copied) several times per call.
        Box::pin(self.acquire_quorum(algorithm, key, id, ttl_ms, ask)).await
    }

    /// [`acquire`](Self::acquire) on a Redlock quorum.
    async fn acquire_quorum(
        &self,
        algorithm: &'static Algorithm,
        key: &LockKey,
        id: &HoldId,
        ttl_ms: u64,
        ask: Ask,
    ) -> Result<Attempt, Error> {
        // One command for all nodes: the script where any of them refused `SET .. GET`.
        let get_refused = self.nodes.iter().any(|n| n.quirks.refuses_set_nx_get());
        let call = &algorithm.acquire_cmd(key, id, ttl_ms, ask, get_refused);
        let mut answers = self.fan_out(false, |node, mut conn| async move {
            node.eviction.check(&mut conn).await?;
            algorithm.send_acquire(&mut conn, call, &node.quirks).await
        });
        let (mut granted, mut busy, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        let mut answered = 0;
        while let Some((i, answer)) = answers.next().await {
            answered += 1;
            match answer {
                Ok(Attempt::Acquired { fence }) => granted.push((i, fence)),
                Ok(Attempt::Busy { holder_ttl, member }) => busy.push((holder_ttl, member)),
                Err(e) => errors.push(e),
            }
            // A majority decided: the stragglers cannot change the outcome, and are not
            // waited for.
            if self.majority.reached(granted.len()) || self.majority.reached(busy.len()) {
                break;
            }
        }
        // The stragglers' requests are dropped, not waited for: one that was written reaches
        // its node all the same (the connection writes a dropped caller's bytes), and every
        // release goes to all nodes, after it on the same connection. Not left to finish
        // either: a follow-up it might send (the script after `NOSCRIPT`, or after a plain
        // `SET`'s reply) could reach its node after the release and take the lock there.
        drop(answers);
        if self.majority.reached(granted.len()) && !ask.fencing {
            return Ok(Attempt::Acquired { fence: None });
        }
        if self.majority.reached(granted.len()) {
            match self.raise_fences(key, &granted).await {
                Ok(fence) => return Ok(Attempt::Acquired { fence: Some(fence) }),
                Err(e) => errors.push(e),
            }
        }
        // Not ours: give back what was granted, and what may have been granted unseen (a node
        // that failed to answer, or one still on its way when the majority said busy).
        if !granted.is_empty() || !errors.is_empty() || answered < self.nodes.len() {
            self.release_everywhere(algorithm, key, id).await;
        }
        if !granted.is_empty() {
            // A split vote: another client holds part of the majority we lack and is giving
            // it back too. Both would be woken by each other's release and collide again, so
            // back off for a random moment first (the Redlock description's random delay).
            let jitter = rand::random_range(Duration::ZERO..=self.node_timeout / 2);
            tokio::time::sleep(jitter).await;
        }
        if self.majority.reached(granted.len() + busy.len()) {
            // The lock is held elsewhere; wait for the earliest lease to end (and, of a set,
            // for the name that node found busy).
            let earliest = busy.iter().filter(|(ttl, _)| ttl.is_some()).min();
            let (holder_ttl, member) = earliest.or(busy.first()).copied().unwrap_or((None, 0));
            return Ok(Attempt::Busy { holder_ttl, member });
        }
        Err(Error::QuorumNotReached {
            name: key.lock_name(),
            acked: granted.len(),
            needed: self.majority.needed(),
            nodes: self.majority.nodes(),
            errors,
        })
    }

    /// Makes the token the maximum of the majority's counters and raises the lower ones to it,
    /// so a later majority (which shares a node with this one) issues a larger token.
    async fn raise_fences(
        &self,
        key: &LockKey,
        granted: &[(usize, Option<FencingToken>)],
    ) -> Result<FencingToken, NodeError> {
        let token = groups::highest(granted.iter().map(|&(_, f)| f));
        let behind: Vec<usize> = granted
            .iter()
            .filter(|&&(_, f)| f.is_none_or(|f| f < token))
            .map(|&(i, _)| i)
            .collect();
        if behind.is_empty() {
            return Ok(token);
        }
        let raise = &groups::raise_cmd(key, token);
        let raises = behind.iter().map(|&i| {
            let node = &self.nodes[i];
            async move {
                let mut conn = node.commands();
                let call = invoke::<_, u64>(&RAISE_FENCE, raise, &mut conn);
                matches!(tokio::time::timeout(self.node_timeout, call).await, Ok(Ok(v)) if v >= token.get())
            }
        });
        let raised = futures_util::future::join_all(raises)
            .await
            .into_iter()
            .filter(|&ok| ok)
            .count();
        if self.majority.reached(granted.len() - behind.len() + raised) {
            Ok(token)
        } else {
            Err(NodeError {
                node: "quorum".into(),
                reason: "could not raise the fencing counters of a majority".into(),
                retryable: true,
            })
        }
    }

    /// Gives the hold back on every node (trusted or not). True when a majority still had it.
    ///
    /// Returns as soon as the answers decide (a majority said yes, or enough said no that a
    /// majority cannot), like an acquisition. The requests to the other nodes are already on
    /// their way; they are not dropped but finish in a task of their own, so a slow or frozen
    /// minority costs a release nothing and every node still frees the lock. Each node's
    /// connection keeps its order: a later request of this client reaches a node after the
    /// release did.
    pub(crate) async fn release(
        self: &Arc<Self>,
        algorithm: &'static Algorithm,
        key: &LockKey,
        id: &HoldId,
    ) -> Result<bool, Error> {
        if let Some(mut conn) = self.single(id) {
            let sharded = conn.sharded();
            if let Some(groups) = key.slot_groups().filter(|_| sharded) {
                let release =
                    groups::release_groups(&conn, algorithm, groups, id, &*self.listeners);
                return Box::pin(release).await;
            }
            let listening = self.listeners.listening(key);
            return algorithm
                .try_release(&mut conn, key, id, sharded, listening)
                .await;
        }
        // Boxed for the reason given in `acquire`.
        Box::pin(self.release_quorum(algorithm, key, id)).await
    }

    /// [`release`](Self::release) on a Redlock quorum.
    async fn release_quorum(
        self: &Arc<Self>,
        algorithm: &'static Algorithm,
        key: &LockKey,
        id: &HoldId,
    ) -> Result<bool, Error> {
        let listening = self.listeners.listening(key);
        let cmd = Arc::new(algorithm.release_cmd(key, id, &identity::wake_id(), false, listening));
        let answers = self.fan_out_owned(true, |mut conn| {
            let (cmd, key) = (cmd.clone(), key.clone());
            async move {
                let released = algorithm.send_release(&mut conn, &key, &cmd).await?;
                Ok(released.then_some(Duration::ZERO))
            }
        });
        Ok(self.decide(key, answers).await?.is_some())
    }

    /// Gives the hold back on every node and waits for all of them (or their timeouts): a
    /// failed acquisition leaves no partial lock behind by the time its caller hears of it.
    async fn release_everywhere(&self, algorithm: &'static Algorithm, key: &LockKey, id: &HoldId) {
        let listening = self.listeners.listening(key);
        let cmd = &algorithm.release_cmd(key, id, &identity::wake_id(), false, listening);
        self.fan_out(true, |_, mut conn| async move {
            algorithm.send_release(&mut conn, key, cmd).await
        })
        .for_each(|_| async {})
        .await;
    }

    /// Renews the hold on every trusted node. The lease a majority now holds (see
    /// [`Majority::least_agreed`]) when a majority renewed it, `None` when it could not; returns as
    /// soon as the answers decide, the other renewals finishing on their own (see
    /// [`release`](Self::release)).
    pub(crate) async fn extend(
        self: &Arc<Self>,
        algorithm: &'static Algorithm,
        key: &LockKey,
        id: &HoldId,
        ttl_ms: u64,
    ) -> Result<Option<Duration>, Error> {
        if let Some(mut conn) = self.single(id) {
            if let Some(groups) = key.slot_groups().filter(|_| conn.sharded()) {
                return Box::pin(extend_groups(&conn, algorithm, groups, id, ttl_ms)).await;
            }
            return algorithm.try_extend(&mut conn, key, id, ttl_ms).await;
        }
        let cmd = Arc::new(algorithm.extend_cmd(key, id, ttl_ms));
        let answers = self.fan_out_owned(false, |mut conn| {
            let (cmd, key) = (cmd.clone(), key.clone());
            async move { algorithm.send_extend(&mut conn, &key, &cmd).await }
        });
        self.decide(key, answers).await
    }

    /// Counts yes/no answers as they come: with a majority of yes, the lease the majority
    /// holds; `None` once a majority can no longer say yes because nodes said no; else (too
    /// many unreachable, known once every node answered or timed out) the quorum error.
    /// Requests still on their way when the outcome is decided finish in a spawned task.
    async fn decide<F>(
        &self,
        key: &LockKey,
        mut answers: FuturesUnordered<F>,
    ) -> Result<Option<Duration>, Error>
    where
        F: Future<Output = (usize, Answer<Option<Duration>>)> + Send + 'static,
    {
        let (mut yes, mut no, mut errors) = (Vec::new(), 0, Vec::new());
        while let Some((_, answer)) = answers.next().await {
            match answer {
                Ok(Some(lease)) => yes.push(lease),
                Ok(None) => no += 1,
                Err(e) => errors.push(e),
            }
            if self.majority.reached(yes.len()) || self.majority.out_of_reach(no) {
                break;
            }
        }
        finish_in_background(&self.tasks, answers);
        if let Some(lease) = self.majority.least_agreed(&yes) {
            return Ok(Some(lease));
        }
        if self.majority.out_of_reach(no) {
            return Ok(None);
        }
        Err(Error::QuorumNotReached {
            name: key.lock_name(),
            acked: yes.len(),
            needed: self.majority.needed(),
            nodes: self.majority.nodes(),
            errors,
        })
    }
}

/// Leaves the requests still on their way to finish in a task of their own (their answers
/// can change nothing: the outcome was decided).
fn finish_in_background<F>(tasks: &Tasks, answers: FuturesUnordered<F>)
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    if answers.is_empty() {
        return;
    }
    // Inside `async` code run by Tokio there is always a runtime; without one the requests are
    // dropped, and the releases that follow go to every node all the same.
    tasks.spawn(answers.for_each(|_| async {}));
}

/// One node's answer to one request: bounded by the per-node timeout; a node not counted now
/// (its server is younger than the restart delay) gets no request (`call` is `None`) and
/// answers with why.
async fn ask<T>(
    node: &Node,
    node_timeout: Duration,
    call: Option<impl Future<Output = Result<T, Error>>>,
) -> Answer<T> {
    let fail = |reason: String, retryable: bool| NodeError {
        node: node.addr.clone(),
        reason,
        retryable,
    };
    let Some(call) = call else {
        return Err(fail(
            "up for less than the restart delay (it may have lost its locks in a restart); not counted until the delay has passed".into(),
            true,
        ));
    };
    match tokio::time::timeout(node_timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(fail(e.to_string(), e.is_retryable())),
        Err(_) => Err(fail(no_answer_within(node_timeout).to_string(), true)),
    }
}
