//! Sets of names taken together (`Client::lock_many`).
//!
//! Every name of a set keeps its own lock key, so a set excludes each of its names' locks and
//! each name's lock excludes the set. The names are kept in one fixed order, the same in every
//! process of a deployment: by Redis Cluster slot, then by lock key (duplicates dropped). Two
//! callers asking for `[a, b]` and `[b, a]` ask for the same set, and where a set must be
//! taken a part at a time (the slots of a Redis Cluster, one script call each) every caller
//! takes the parts in the same order.
//!
//! A set is a [`LockKey`] whose `base` is its first name's, so that what is keyed by one lock
//! key (the first attempt's wake-up channel, a script's routing) has one to use; everything
//! that concerns each name (the scripts' KEYS, the holds of this process, who listens for a
//! release) goes through [`LockKey::members`].

use std::sync::Arc;

use super::{shorten, LockKey};
use crate::error::Error;

/// The names of a set.
#[derive(Debug)]
pub(crate) struct Members {
    /// Every name, in the fixed order.
    keys: Box<[LockKey]>,
    /// The names of each slot, in the fixed order, each a set of its own: only when the
    /// names span more than one slot (empty otherwise).
    groups: Box<[LockKey]>,
}

impl LockKey {
    /// The set of `names`, in the fixed order and without duplicates. An empty list is
    /// refused: it would lock nothing.
    pub(crate) fn set(mut names: Vec<LockKey>) -> Result<LockKey, Error> {
        if names.is_empty() {
            return Err(Error::InvalidName {
                name: "[]".into(),
                reason: "a set of names needs at least one name".to_owned(),
            });
        }
        names.sort_by(|a, b| (a.slot(), a.lock()).cmp(&(b.slot(), b.lock())));
        names.dedup_by(|a, b| a.lock() == b.lock());
        let mut groups = Vec::new();
        let mut start = 0;
        for end in 1..=names.len() {
            if end == names.len() || names[end].slot() != names[start].slot() {
                groups.push(LockKey::of(names[start..end].into(), Box::default()));
                start = end;
            }
        }
        if groups.len() == 1 {
            groups.clear();
        }
        Ok(LockKey::of(names.into(), groups.into()))
    }

    fn of(keys: Box<[LockKey]>, groups: Box<[LockKey]>) -> LockKey {
        let names: Vec<&str> = keys.iter().map(LockKey::name).collect();
        let first = keys[0].clone();
        LockKey {
            shortened: Some(shorten(&format!("[{}]", names.join(", "))).into()),
            set: Some(Arc::new(Members { keys, groups })),
            ..first
        }
    }

    /// The names this key locks: a set's, in their fixed order, or this name alone.
    pub(crate) fn members(&self) -> &[LockKey] {
        match &self.set {
            Some(set) => &set.keys,
            None => std::slice::from_ref(self),
        }
    }

    /// True for a set of names (even of one), which only `lock_many`'s scripts take.
    pub(crate) fn is_set(&self) -> bool {
        self.set.is_some()
    }

    /// A set's names by slot, each group a set of its own, when they span more than one slot:
    /// a Redis Cluster runs a script on the keys of one slot only, so such a set is taken
    /// there one group at a time, in this order. `None` for a name or a set in one slot.
    pub(crate) fn slot_groups(&self) -> Option<&[LockKey]> {
        self.set
            .as_ref()
            .map(|set| &set.groups[..])
            .filter(|groups| !groups.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LockKey {
        LockKey::new("p", name.as_bytes(), 1024).expect("valid name")
    }

    fn set(names: &[&str]) -> LockKey {
        LockKey::set(names.iter().map(|n| key(n)).collect()).expect("a set")
    }

    fn locks(key: &LockKey) -> Vec<Vec<u8>> {
        key.members().iter().map(|m| m.lock().to_vec()).collect()
    }

    #[test]
    fn the_order_is_fixed_whatever_the_callers_order() {
        let names = ["b", "a", "c", "order:{7}", "pay:{7}", "a"];
        let one = set(&names);
        let mut reversed = names;
        reversed.reverse();
        assert_eq!(locks(&one), locks(&set(&reversed)));
        assert_eq!(one.members().len(), 5, "the duplicate is dropped");
        let slots: Vec<u16> = one.members().iter().map(LockKey::slot).collect();
        assert!(slots.windows(2).all(|w| w[0] <= w[1]), "{slots:?}");
        // The set's own key is its first name's: what one lock key routes goes there.
        assert_eq!(one.lock(), one.members()[0].lock());
        assert!(one.is_set() && !key("a").is_set());
        assert_eq!(locks(&key("a")), [key("a").lock().to_vec()]);
    }

    #[test]
    fn names_of_one_slot_form_one_group() {
        let tagged = set(&["pay:{7}", "order:{7}"]);
        assert!(tagged.slot_groups().is_none(), "one slot: one script");
        assert!(set(&["a"]).slot_groups().is_none());
        let spread = set(&["a", "b", "order:{7}", "pay:{7}"]);
        let groups = spread.slot_groups().expect("several slots");
        let regrouped: Vec<Vec<u8>> = groups.iter().flat_map(locks).collect();
        assert_eq!(regrouped, locks(&spread), "the groups keep the order");
        for group in groups {
            let slot = group.slot();
            assert!(group.members().iter().all(|m| m.slot() == slot));
            assert!(group.slot_groups().is_none());
        }
        let tags = groups
            .iter()
            .find(|g| g.members().len() == 2)
            .expect("the tagged names share a group");
        assert_eq!(tags.slot(), key("order:{7}").slot());
    }

    #[test]
    fn a_set_shows_its_names_and_an_empty_one_is_refused() {
        assert_eq!(set(&["b", "a"]).name(), {
            let mut shown = [key("a"), key("b")];
            shown.sort_by_key(|k| k.slot());
            format!("[{}, {}]", shown[0].name(), shown[1].name())
        });
        let err = LockKey::set(Vec::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");
        let many: Vec<String> = (0..100).map(|i| format!("name:{i}")).collect();
        let long = set(&many.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(long.name().len() < 200, "{}", long.name());
    }
}
