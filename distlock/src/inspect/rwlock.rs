//! A read/write lock's state, for [`Client::inspect`](crate::Client::inspect): its hash and
//! its two sorted sets (layout in `rwlock/prelude.lua`), read as the scripts would: leases and
//! intents that have ended by the server's clock count as gone.

use std::time::Duration;

use super::{described, LockInfo, ReadHolder};
use crate::identity::Described;
use crate::mode::LockMode;

/// Fills `info` from the hash's fields and `sets`: the readers' and the intents' members with
/// their scores. Returns the writer's description where it points to a process's record.
pub(super) fn parse(
    info: &mut LockInfo,
    fields: &[(String, String)],
    sets: &[Vec<(String, String)>; 2],
    now: i64,
) -> Option<Described> {
    let mut description_read = None;
    let field = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
    // Scores come back as text, integral or not.
    let ms = |v: &str| v.parse::<f64>().ok().map(|f| f as i64);
    let holds = |list: &str| list.split_whitespace().count() as u32;
    let writer_until = field("writer-until").and_then(ms);
    if let (Some(writer), Some(until)) = (field("writer"), writer_until) {
        if until > now {
            info.mode = Some(LockMode::Write);
            info.hold_count = field("writer-holds").map_or(0, holds);
            let (holder, d) = described(writer.to_owned(), field("writer-holder").unwrap_or(""));
            info.holder = Some(holder);
            description_read = d;
            info.fencing_token = field("writer-fence").and_then(super::token);
        }
    }
    let [readers, intents] = sets;
    for (owner, until) in readers {
        let Some(until) = ms(until).filter(|u| *u > now) else {
            continue;
        };
        let n = field(&format!("r:{owner}")).map_or(0, holds);
        if n > 0 {
            info.readers.push(ReadHolder {
                owner: owner.clone(),
                holds: n,
                remaining: Duration::from_millis((until - now) as u64),
            });
        }
    }
    for (owner, until) in intents {
        if ms(until).is_some_and(|u| u > now) {
            info.waiting_writers.push(owner.clone());
        }
    }
    info.readers.sort_by(|a, b| a.owner.cmp(&b.owner));
    info.waiting_writers.sort();
    if info.mode.is_none() && !info.readers.is_empty() {
        info.mode = Some(LockMode::Read);
        info.hold_count = info.readers.iter().map(|r| r.holds).sum();
        info.fencing_token = info.last_fencing_token;
    }
    if info.mode.is_none() && info.waiting_writers.is_empty() {
        info.remaining = None;
    }
    description_read
}
