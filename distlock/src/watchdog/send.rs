//! A node's sender: its queue of renewals as pipelines, a few outstanding at a time.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::Value;

use super::{answer, cluster, renewals, Due, NodeReplies, Shared};
use crate::algorithm::pipeline_with_scripts;
use crate::conn::Conn;
use crate::nodes::{Node, Nodes};
use crate::setnx::{native_answer, renews_natively, NativeAnswer};

/// How soon a node whose renewals failed (a timeout, the connection down) is asked again.
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// Most pipelines outstanding on one node. With one, the server sits idle while the client
/// reads an answer and writes the next chunk, and the client while the server runs it; a few
/// let these overlap. The bound keeps what a node that falls behind is handed to a few chunks.
const WINDOW: usize = 3;

/// Sends node `i`'s queue, a chunk at a time, for ever.
///
/// At most [`WINDOW`] pipelines are outstanding per node: a server that falls behind is not
/// sent more while it works through what it has, and a renewal it answers late still counts
/// (see [`super::table`]). Each answer is awaited as long as it can prove anything: past the
/// longest lease in the chunk, a proof would have run out before it arrived. After a chunk
/// with failures the node is sent nothing new for [`RETRY_AFTER`]; then the renewals that
/// still need it are sent again.
pub(super) async fn sender(shared: &Shared, nodes: &Nodes, i: usize) {
    let node = &nodes.nodes[i];
    let mut outstanding = FuturesUnordered::new();
    let mut paused_until: Option<Instant> = None;
    loop {
        if paused_until.is_some_and(|t| t <= Instant::now()) {
            paused_until = None;
        }
        while paused_until.is_none() && outstanding.len() < WINDOW {
            let chunk = shared.table().take(i, Instant::now());
            if chunk.is_empty() {
                break;
            }
            outstanding.push(send(shared, node, chunk));
        }
        let room = paused_until.is_none() && outstanding.len() < WINDOW;
        let pause_until = paused_until;
        let pause = async move {
            match pause_until {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((chunk, sent, replies)) = outstanding.next(), if !outstanding.is_empty() => {
                let failed = replies.iter().any(Option::is_none);
                shared
                    .table()
                    .record(nodes.majority, i, &chunk, sent, replies);
                if failed {
                    paused_until = Some(Instant::now() + RETRY_AFTER);
                }
            }
            _ = shared.work[i].notified(), if room => {}
            _ = pause => {}
        }
    }
}

/// Sends one chunk to a node; returns it with when it was sent and the node's answers.
async fn send(shared: &Shared, node: &Node, chunk: Vec<Due>) -> (Vec<Due>, Instant, NodeReplies) {
    let sent = Instant::now();
    let longest = chunk.iter().map(|d| d.watch.ttl_ms).max().unwrap_or(0);
    let worth_until = crate::lease::after(sent, Duration::from_millis(longest));
    let replies = if node.trusted() {
        tokio::time::timeout_at(worth_until.into(), renew(shared, node, &chunk))
            .await
            .unwrap_or_else(|_| vec![None; chunk.len()])
    } else {
        vec![None; chunk.len()]
    };
    (chunk, sent, replies)
}

/// Renews `chunk` on one node: one pipeline (a second for renewals whose script the server
/// lacks: `algorithm::pipeline_with_scripts`). Setnx leases go as the server's native
/// `SET .. IFEQ` where the node has it and the lease allows it (see `lease::native`); those a
/// server refuses as unknown are sent again as the script.
async fn renew(shared: &Shared, node: &Node, chunk: &[Due]) -> NodeReplies {
    if let Conn::Cluster(_) = node.conn {
        let (replies, pipelines) = cluster::renew(&node.conn, chunk, &shared.slot_owners).await;
        shared.round_trips.fetch_add(pipelines, Ordering::Relaxed);
        return replies;
    }
    let native: Vec<bool> = if node.native.has_set_ifeq(&node.conn).await {
        chunk
            .iter()
            .map(|d| {
                let w = &d.watch;
                renews_natively(w.algorithm, &w.key) && w.lease.native.begin()
            })
            .collect()
    } else {
        Vec::new()
    };
    let all: Vec<usize> = (0..chunk.len()).collect();
    let Some(values) = send_pipelines(shared, node, chunk, &all, &native).await else {
        return vec![None; chunk.len()];
    };
    let mut replies: NodeReplies = Vec::with_capacity(chunk.len());
    let mut unsupported = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        if !native.get(i).copied().unwrap_or(false) {
            replies.push(answer(value));
            continue;
        }
        // Answered: it ran (or was refused) before anything sent after it.
        let w = &chunk[i].watch;
        w.lease.native.end();
        replies.push(match native_answer(&value, w.ttl_ms) {
            NativeAnswer::Renewed(lease) => Some(Some(lease)),
            NativeAnswer::Refused => Some(None),
            NativeAnswer::Failed => None,
            NativeAnswer::Unsupported => {
                unsupported.push(i);
                None
            }
        });
    }
    if !unsupported.is_empty() {
        // Another server behind the address (a failover, a restart): scripts until it is
        // read again.
        node.native.lacking();
        if let Some(values) = send_pipelines(shared, node, chunk, &unsupported, &[]).await {
            for (&i, value) in unsupported.iter().zip(values) {
                replies[i] = answer(value);
            }
        }
    }
    replies.resize(chunk.len(), None);
    replies
}

/// Sends the renewals of `chunk` at `indices` as one pipeline, then those answered
/// `NOSCRIPT` again with the source; `None` when the first pipeline failed.
async fn send_pipelines(
    shared: &Shared,
    node: &Node,
    chunk: &[Due],
    indices: &[usize],
    native: &[bool],
) -> Option<Vec<Value>> {
    pipeline_with_scripts(indices, |indices, with_source| {
        let mut conn = node.conn.clone();
        shared.round_trips.fetch_add(1, Ordering::Relaxed);
        async move {
            conn.send_each(&renewals(chunk, &indices, with_source, native))
                .await
        }
    })
    .await
    .ok()
}
