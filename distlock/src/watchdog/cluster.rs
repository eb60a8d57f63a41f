//! Renewals on a Redis Cluster: a pipeline per master, and a set of names spanning slots on
//! its own (`nodes::extend_groups`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{answer, renewals, Due, NodeReplies};
use crate::algorithm::pipeline_with_scripts;
use crate::conn::pack::pipeline;
use crate::conn::{Conn, SlotOwners};
use crate::nodes::extend_groups;

/// Renews a chunk on a Redis Cluster: one pipeline per master, all at once (a pipeline goes
/// to one node; which master serves which slot comes from [`SlotOwners`]). Slots the map
/// does not know get a pipeline each, routed by slot. A renewal the master refused with an
/// error (the slot moved or is migrating, or a promoted replica lacks the script) is sent
/// again alone, through the routing that follows redirections and sends the script's source
/// where it is missing, and the map is read again before the next chunk. A set of names whose
/// slots differ (`Client::lock_many`) is renewed apart, a call per slot at once, and counts as
/// renewed only where every slot's names were. Returns the answers and the number of
/// pipelines sent.
pub(super) async fn renew(
    conn: &Conn,
    chunk: &[Due],
    owners: &tokio::sync::Mutex<SlotOwners>,
) -> (NodeReplies, u64) {
    #[derive(PartialEq, Eq, Hash)]
    enum Target {
        Master(String, u16),
        Slot(u16),
    }
    // Held while the chunk is grouped only: the other chunks in flight to this cluster group
    // theirs meanwhile.
    let mut map = owners.lock().await;
    if map.needs_reading() {
        map.read(&mut conn.clone()).await;
    }
    let mut groups: HashMap<Target, Vec<usize>> = HashMap::new();
    let mut spanning = Vec::new();
    for (i, d) in chunk.iter().enumerate() {
        if let Some(slots) = d.watch.key.slot_groups() {
            spanning.push((i, slots));
            continue;
        }
        let slot = d.watch.key.slot();
        let target = match map.owner(slot) {
            Some((host, port)) => Target::Master(host.to_owned(), port),
            None => Target::Slot(slot),
        };
        groups.entry(target).or_default().push(i);
    }
    drop(map);
    let pipelines = (groups.len() + spanning.iter().map(|(_, s)| s.len()).sum::<usize>()) as u64;
    let misrouted = AtomicBool::new(false);
    let misrouted = &misrouted;
    let per_group = groups.into_iter().map(|(target, indices)| async move {
        let sent = pipeline_with_scripts(&indices, |indices, with_source| {
            let pipe = pipeline(&renewals(chunk, &indices, with_source, &[]));
            let mut conn = conn.clone();
            let target = &target;
            async move {
                match target {
                    Target::Master(host, port) => conn.pipeline_to_node(&pipe, host, *port).await,
                    Target::Slot(slot) => conn.pipeline_to_slot(&pipe, *slot).await,
                }
            }
        })
        .await;
        let Ok(values) = sent else {
            misrouted.store(true, Ordering::Relaxed);
            return indices.into_iter().map(|i| (i, None)).collect::<Vec<_>>();
        };
        // Any other error (the slot moved or is migrating): that renewal alone again, through
        // the routing that follows redirections; all such at once.
        let answers = indices.into_iter().zip(values).map(|(i, value)| {
            let mut conn = conn.clone();
            async move {
                let answer = match value {
                    redis::Value::ServerError(_) => {
                        misrouted.store(true, Ordering::Relaxed);
                        let d = &chunk[i].watch;
                        let cmd = d.algorithm.extend_cmd(&d.key, &d.id, d.ttl_ms);
                        d.algorithm.send_extend(&mut conn, &d.key, &cmd).await.ok()
                    }
                    value => answer(value),
                };
                (i, answer)
            }
        });
        futures_util::future::join_all(answers).await
    });
    let sets = spanning.into_iter().map(|(i, slots)| async move {
        let d = &chunk[i].watch;
        let renewed = extend_groups(conn, d.algorithm, slots, &d.id, d.ttl_ms).await;
        vec![(i, renewed.ok())]
    });
    let mut replies = vec![None; chunk.len()];
    let (per_group, sets) = futures_util::future::join(
        futures_util::future::join_all(per_group),
        futures_util::future::join_all(sets),
    )
    .await;
    for (i, answer) in per_group.into_iter().chain(sets).flatten() {
        replies[i] = answer;
    }
    if misrouted.load(Ordering::Relaxed) {
        owners.lock().await.mark_stale();
    }
    (replies, pipelines)
}
