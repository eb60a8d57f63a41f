//! A semaphore's state, for [`Client::inspect`](crate::Client::inspect): the number of permits
//! its holders recorded and the permits held, read as the scripts would (a lease that has
//! ended by the server's clock counts as gone; layout in `semaphore/prelude.lua`).

use std::collections::HashMap;
use std::time::Duration;

use super::{described, Holder, LockInfo};
use crate::identity::Described;
use crate::mode::LockMode;
use crate::nodes::Nodes;

/// Who holds one permit of a semaphore now, as [`Client::inspect`](crate::Client::inspect)
/// reads it: a record, not the permit itself (that is the holder's [`Guard`](crate::Guard)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// Who took it.
    pub holder: Holder,
    /// Its lease's remaining time.
    pub remaining: Duration,
    /// Its permit slot (0 to N-1), when it was taken with fencing: see
    /// [`FencingToken::slot`](crate::FencingToken::slot).
    pub slot: Option<u32>,
}

/// Fills `info` from the sorted set's members and scores (lowest score first) and the permit
/// slots' fields (owner, slot); returns each permit's description where it points to a
/// process's record, or `None` when the set is not a semaphore (it has no recorded limit).
pub(super) fn parse(
    info: &mut LockInfo,
    members: &[(String, String)],
    slots: &[(String, String)],
    now: i64,
) -> Option<Vec<Option<Described>>> {
    members.iter().find(|(member, _)| member == "permits")?;
    let slots: HashMap<&str, u32> = slots
        .iter()
        .filter_map(|(owner, slot)| Some((owner.as_str(), slot.parse().ok()?)))
        .collect();
    let mut descriptions = Vec::new();
    for (member, score) in members {
        let Ok(score) = score.parse::<f64>() else {
            continue;
        };
        if member == "permits" {
            info.permits = u32::try_from(-score as i64).ok();
            continue;
        }
        let ends = score as i64;
        if ends <= now {
            continue;
        }
        let slot = slots.get(member.as_str()).copied();
        let (owner, description) = member.split_once('\t').unwrap_or((member, ""));
        let (holder, d) = described(owner.to_owned(), description);
        info.permit_holders.push(PermitHolder {
            holder,
            remaining: Duration::from_millis((ends - now) as u64),
            slot,
        });
        descriptions.push(d);
    }
    if info.permit_holders.is_empty() {
        info.permits = None;
        info.remaining = None;
    } else {
        info.mode = Some(LockMode::Semaphore);
        info.hold_count = info.permit_holders.len() as u32;
    }
    Some(descriptions)
}

/// Completes each permit's holder from its process's record on `node` (host, pid, site).
pub(super) async fn look_up(
    nodes: &Nodes,
    node: usize,
    prefix: &str,
    permits: &mut [PermitHolder],
    descriptions: &[Option<Described>],
) {
    for (permit, d) in permits.iter_mut().zip(descriptions) {
        if let Some(d) = d {
            let holder = &mut permit.holder;
            (holder.host, holder.pid, holder.site) = nodes.look_up(node, prefix, d).await;
        }
    }
}
