//! Listening on a lock's wake-up channel, for the waiters and observers above (`notify`):
//! which connection carries a subscription, and how long each node may take to confirm it,
//! is decided here, as for every other request to the nodes. Subscriptions ride on each
//! node's first connection, the one that took the push sink, and redis-rs sends them again
//! first thing after a reconnection.

use std::time::Duration;

use redis::{RedisResult, Value};

use crate::conn::within;

use super::{until_answered, Nodes};

impl Nodes {
    /// Subscribes `channel`: a single node's subscriptions connection (within its own response
    /// timeout), or every node of a quorum at once, each within the node timeout, since a
    /// release publishes on every node that held the lock and any one may be frozen or cut
    /// off. The nodes that confirmed, in node order; the last failure when none did.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> RedisResult<Vec<usize>> {
        if !self.is_quorum() {
            self.nodes[0].conn.clone().subscribe(channel).await?;
            return Ok(vec![0]);
        }
        let attempts = self.nodes.iter().map(|node| async move {
            let mut conn = node.conn.clone();
            within(self.node_timeout, conn.subscribe(channel)).await
        });
        let (mut confirmed, mut last_error) = (Vec::new(), None);
        let results = futures_util::future::join_all(attempts).await;
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(()) => confirmed.push(i),
                Err(e) => last_error = Some(e),
            }
        }
        if confirmed.is_empty() {
            return Err(last_error
                .unwrap_or_else(|| (redis::ErrorKind::Io, "no node to subscribe on").into()));
        }
        Ok(confirmed)
    }

    /// Subscribes `channel` again on `node` (one that [`subscribe`](Self::subscribe)
    /// confirmed, whose server dropped it), within `bound`.
    pub(crate) async fn resubscribe(
        &self,
        node: usize,
        channel: &[u8],
        bound: Duration,
    ) -> RedisResult<()> {
        let mut conn = self.nodes[node].conn.clone();
        within(bound, conn.subscribe(channel)).await
    }

    /// Unsubscribes `channel` on `nodes`, one after another, each within `bound`; whether an
    /// answer that did not come took effect is left unknown to the caller.
    pub(crate) async fn unsubscribe(&self, nodes: &[usize], channel: &[u8], bound: Duration) {
        for &node in nodes {
            let mut conn = self.nodes[node].conn.clone();
            let _ = within(bound, conn.unsubscribe(channel)).await;
        }
    }

    /// Returns once a single node's subscriptions connection answers a `PING` (each within
    /// the node timeout, `pause` after each failure). After a disconnection that is once
    /// redis-rs connected again and sent the subscriptions, which go first on the new
    /// connection.
    pub(crate) async fn subscriptions_answer(&self, pause: Duration) {
        let ping = &redis::cmd("PING");
        until_answered(pause, || {
            let mut conn = self.nodes[0].conn.clone();
            async move { within(self.node_timeout, ping.query_async::<Value>(&mut conn)).await }
        })
        .await;
    }
}
