//! The holds a client has taken, by lock key, with the task context that owns each: an
//! acquisition looks here first, so that a lock held by the current context (or one around it)
//! is re-entered (reentrant and read/write modes) without queueing behind the tasks that wait
//! for it, or refused at once (setnx: waiting on oneself would never end).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::context::LockContext;
use crate::key::LockKey;
use crate::lease::LeaseState;
use crate::release::Hold;
use crate::sync::lock;

/// Holds of one client by lock key: usually none or one per key, a few when nested.
type LocalHolds = HashMap<Arc<[u8]>, HoldList, foldhash::quality::RandomState>;

/// One hold: the task context that owns it, its lease, and what its release names (for
/// `Client::shutdown`, which releases what the guards still hold).
struct Entry {
    context: LockContext,
    lease: Arc<LeaseState>,
    hold: Hold,
}

/// The holds of one lock: nearly always one, kept inline so that taking an uncontended lock
/// allocates no list; a few when nested or shared.
enum HoldList {
    One(Entry),
    Many(Vec<Entry>),
}

impl HoldList {
    fn iter(&self) -> std::slice::Iter<'_, Entry> {
        match self {
            HoldList::One(hold) => std::slice::from_ref(hold).iter(),
            HoldList::Many(holds) => holds.iter(),
        }
    }

    /// Adds a hold, dropping those whose lease ran out: they no longer protect anything
    /// (their guards may live on).
    fn push(&mut self, hold: Entry) {
        match self {
            HoldList::One(only) if !only.lease.is_valid() => *only = hold,
            HoldList::One(_) => {
                let HoldList::One(only) = std::mem::replace(self, HoldList::Many(Vec::new()))
                else {
                    unreachable!("matched One above")
                };
                *self = HoldList::Many(vec![only, hold]);
            }
            HoldList::Many(holds) => {
                holds.retain(|e| e.lease.is_valid());
                holds.push(hold);
            }
        }
    }

    /// Removes the hold with this lease; true when none is left.
    fn remove(&mut self, lease: &Arc<LeaseState>) -> bool {
        match self {
            HoldList::One(only) => Arc::ptr_eq(&only.lease, lease),
            HoldList::Many(holds) => {
                holds.retain(|e| !Arc::ptr_eq(&e.lease, lease));
                holds.is_empty()
            }
        }
    }
}

/// Every hold taken through one client.
#[derive(Default)]
pub(crate) struct Holds {
    table: Mutex<LocalHolds>,
}

impl Holds {
    /// The innermost enclosing context (see [`LockContext`]) that holds the lock at `key` (any
    /// name of a set) through this client with a lease still good. A lock nobody here holds
    /// costs one map lookup.
    pub(crate) fn holder_in_scope(&self, key: &LockKey) -> Option<LockContext> {
        let holds = lock(&self.table);
        let held_by =
            |list: &HoldList, c| list.iter().any(|e| e.context == c && e.lease.is_valid());
        if let [name] = key.members() {
            let here = holds.get(name.lock())?;
            return LockContext::find_enclosing(|c| held_by(here, c));
        }
        let here: Vec<&HoldList> = key
            .members()
            .iter()
            .filter_map(|name| holds.get(name.lock()))
            .collect();
        if here.is_empty() {
            return None;
        }
        LockContext::find_enclosing(|c| here.iter().any(|list| held_by(list, c)))
    }

    /// Records a hold (under each name of a set) until [`unhold`](Self::unhold).
    pub(crate) fn hold(&self, hold: &Hold, context: LockContext, lease: Arc<LeaseState>) {
        let mut holds = lock(&self.table);
        for name in hold.key.members() {
            let entry = Entry {
                context,
                lease: lease.clone(),
                hold: hold.clone(),
            };
            match holds.entry(name.shared().clone()) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(HoldList::One(entry));
                }
                std::collections::hash_map::Entry::Occupied(mut here) => {
                    here.get_mut().push(entry);
                }
            }
        }
    }

    /// Forgets the hold with this lease (under each name of a set).
    pub(crate) fn unhold(&self, key: &LockKey, lease: &Arc<LeaseState>) {
        let mut holds = lock(&self.table);
        for name in key.members() {
            if let Some(here) = holds.get_mut(name.lock()) {
                if here.remove(lease) {
                    holds.remove(name.lock());
                }
            }
        }
    }

    /// Forgets every hold, handing back their leases and releases (a set's once).
    pub(crate) fn take_all(&self) -> Vec<(Arc<LeaseState>, Hold)> {
        let table = std::mem::take(&mut *lock(&self.table));
        let mut all: Vec<(Arc<LeaseState>, Hold)> = Vec::with_capacity(table.len());
        let mut seen = std::collections::HashSet::with_capacity(table.len());
        let entries = table.into_values().flat_map(|list| match list {
            HoldList::One(e) => vec![e],
            HoldList::Many(entries) => entries,
        });
        for e in entries {
            if seen.insert(Arc::as_ptr(&e.lease)) {
                all.push((e.lease, e.hold));
            }
        }
        all
    }
}
