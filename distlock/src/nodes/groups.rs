//! A set of names spanning Redis Cluster slots (`Client::lock_many`, see `key::set`).
//!
//! A Cluster runs a script on the keys of one slot only, so such a set cannot be taken in one
//! call. Its names are grouped by slot, in the set's fixed order, and an attempt takes the
//! groups one after another in that order, each whole or not at all (one script call). When a
//! group is busy, or a call fails, the groups this attempt took are given back before it
//! answers (every group, after an attempt that failed: it may have left one taken): the
//! caller never holds part of the set while it waits, and waits for the busy name's release
//! as for any busy lock. A give-back that fails makes the attempt fail, so the caller tries
//! again (finding its own holds) or, if it stops there, gives the whole set back. Every caller takes the groups in the same order, and
//! none keeps a group while waiting for another, so no two callers can wait on each other.
//! Releases and renewals go to every group, each group's answer counting for the whole: the
//! set is released when every group was, and renewed while every group is still ours.
//!
//! On one node, through Sentinel and on each node of a quorum, a set is always one call:
//! those servers take keys of any slots in one script.

use std::time::Duration;

use crate::algorithm::{evalsha, invoke, Algorithm, Attempt, HoldId};
use crate::conn::Conn;
use crate::error::{Error, Op};
use crate::key::{Kind, LockKey};
use crate::token::FencingToken;

use super::{AcquireAttempt, Nodes, RAISE_FENCE};

impl Nodes {
    /// One acquire attempt of a set whose names span `groups` (its slot groups, in order) on
    /// a Redis Cluster: each group in turn, given back if a later one is busy or fails.
    pub(super) async fn acquire_in_groups(
        &self,
        mut conn: Conn,
        attempt: AcquireAttempt<'_>,
        groups: &[LockKey],
    ) -> Result<Attempt, Error> {
        let AcquireAttempt {
            algorithm,
            id,
            ttl_ms,
            ask,
            replicas,
            ..
        } = attempt;
        let server = &self.nodes[0].quirks;
        let mut fences = Vec::with_capacity(groups.len());
        let mut offset = 0;
        for (taking, group) in groups.iter().enumerate() {
            let answer = match replicas {
                Some(replicas) => {
                    let get_refused = server.refuses_set_nx_get();
                    let call = algorithm.acquire_cmd(group, id, ttl_ms, ask, get_refused);
                    algorithm
                        .try_acquire_acked(&mut conn, &call, replicas)
                        .await
                }
                None => {
                    algorithm
                        .try_acquire(&mut conn, server, group, id, ttl_ms, ask)
                        .await
                }
            };
            let outcome = match answer {
                Ok(Attempt::Acquired { fence }) => {
                    fences.push((group, fence));
                    offset += group.members().len();
                    continue;
                }
                Ok(Attempt::Busy { holder_ttl, member }) => Ok(Attempt::Busy {
                    holder_ttl,
                    member: offset + member,
                }),
                Err(e) => Err(e),
            };
            // What this attempt took goes back; a failed call may have taken its group
            // unseen, so that one too. After an earlier attempt's failure (`unsure`), every
            // group: that attempt may have left a later group taken when its give-back
            // failed as well, and a caller that stops or waits now must hold nothing
            // (spec/many.pml found this).
            let taken = if ask.unsure {
                groups
            } else if outcome.is_ok() {
                &groups[..taking]
            } else {
                &groups[..=taking]
            };
            return match release_groups(&conn, algorithm, taken, id, &*self.listeners).await {
                // Given back: the caller may wait, holding nothing.
                Ok(_) => outcome,
                // Maybe still held in part: the caller tries again as after a lost reply,
                // and gives the whole set back if it stops.
                Err(e) if outcome.is_ok() => Err(e),
                Err(_) => outcome,
            };
        }
        if !ask.fencing {
            return Ok(Attempt::Acquired { fence: None });
        }
        match raise_fences(&conn, &fences).await {
            Ok(fence) => Ok(Attempt::Acquired { fence: Some(fence) }),
            Err(e) => {
                let _ = release_groups(&conn, algorithm, groups, id, &*self.listeners).await;
                Err(e)
            }
        }
    }
}

/// Gives the set back on every group in `groups` at once; true when every group still had
/// it. A failure is reported once every group answered.
pub(super) async fn release_groups(
    conn: &Conn,
    algorithm: &'static Algorithm,
    groups: &[LockKey],
    id: &HoldId,
    listeners: &dyn super::Listeners,
) -> Result<bool, Error> {
    let releases = groups.iter().map(|group| {
        let mut conn = conn.clone();
        let listening = listeners.listening(group);
        async move {
            algorithm
                .try_release(&mut conn, group, id, true, listening)
                .await
        }
    });
    let mut released = true;
    let mut failure = None;
    for answer in futures_util::future::join_all(releases).await {
        match answer {
            Ok(was) => released &= was,
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(released),
    }
}

/// Renews the set on every group in `groups` at once: the shortest lease the groups now hold,
/// `None` when any group is no longer ours (the set is lost, whatever the others said), else
/// the first failure.
pub(crate) async fn extend_groups(
    conn: &Conn,
    algorithm: &'static Algorithm,
    groups: &[LockKey],
    id: &HoldId,
    ttl_ms: u64,
) -> Result<Option<Duration>, Error> {
    let renewals = groups.iter().map(|group| {
        let mut conn = conn.clone();
        async move { algorithm.try_extend(&mut conn, group, id, ttl_ms).await }
    });
    let mut least: Option<Duration> = None;
    let mut failure = None;
    for answer in futures_util::future::join_all(renewals).await {
        match answer {
            Ok(None) => return Ok(None),
            Ok(Some(left)) => least = Some(least.map_or(left, |l| l.min(left))),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(least),
    }
}

/// The fencing token of a set taken a group at a time: the largest of the groups' tokens,
/// with the other groups' counters raised to it, so that each name's next token is above it
/// (as the set's script does within one group).
async fn raise_fences(
    conn: &Conn,
    fences: &[(&LockKey, Option<FencingToken>)],
) -> Result<FencingToken, Error> {
    let token = highest(fences.iter().map(|&(_, f)| f));
    let raises = fences
        .iter()
        .filter(|&&(_, fence)| fence.is_none_or(|f| f < token))
        .map(|&(group, _)| {
            let mut conn = conn.clone();
            let raise = raise_cmd(group, token);
            async move {
                invoke::<_, u64>(&RAISE_FENCE, &raise, &mut conn)
                    .await
                    .map_err(|e| Error::redis(Op::Acquire, group.name(), e))
            }
        });
    for raised in futures_util::future::join_all(raises).await {
        raised?;
    }
    Ok(token)
}

/// The token of an acquisition that took its names in parts (nodes of a quorum, groups of a
/// set): the largest the parts minted, which the others are raised to.
pub(super) fn highest(tokens: impl Iterator<Item = Option<FencingToken>>) -> FencingToken {
    tokens.flatten().max().unwrap_or(FencingToken::new(0))
}

/// The call that raises the fencing counters of `key`'s names (one, or a set's) to at least
/// `token`.
pub(super) fn raise_cmd(key: &LockKey, token: FencingToken) -> redis::Cmd {
    let names = key.members();
    let mut raise = evalsha(
        &RAISE_FENCE,
        names.len(),
        names.len() + 1,
        names.len() * (key.lock().len() + 8) + 20,
    );
    for name in names {
        raise.arg(name.helper_arg(Kind::Fence));
    }
    raise.arg(token.to_string());
    raise
}
