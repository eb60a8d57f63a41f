//! The invariants checked after every step, and the end of a case (every guard dropped,
//! nothing left on the server).

use super::*;

impl Sut {
    pub(crate) fn check(&self) {
        for lock in 0..LOCKS {
            // Exclusion as the guards report it.
            let mut holders: Vec<(usize, Kind)> = Vec::new();
            for h in self.holds.values().filter(|h| covers(h.lock, lock)) {
                let Some(guard) = &h.guard else { continue };
                let held = guard.is_held();
                if h.status == Status::Live && !held {
                    self.fail(format!("a renewed hold reports is_held() false: {h:?}"));
                }
                if h.status == Status::Gone && held {
                    self.fail(format!(
                        "a guard whose hold the server no longer has reports is_held(): {h:?}"
                    ));
                }
                if held {
                    holders.push((h.owner, h.kind));
                }
            }
            let owners: BTreeSet<usize> = holders.iter().map(|(o, _)| *o).collect();
            if self.mode(lock) == Mode::Election && holders.len() > 1 {
                self.fail(format!("m{lock}: two leaders at once: {holders:?}"));
            }
            if self.mode(lock) == Mode::Semaphore {
                if holders.len() > PERMITS {
                    self.fail(format!(
                        "m{lock}: more than {PERMITS} permits held: {holders:?}"
                    ));
                }
            } else if holders.iter().any(|(_, k)| *k != Kind::Read) && owners.len() > 1 {
                self.fail(format!("m{lock}: several owners hold it: {holders:?}"));
            }
            // The server's key against the model.
            let (key_type, fields) = key_state(lock);
            let count = |kind: Kind, status: Status| {
                self.on_lock(lock)
                    .filter(|h| h.kind == kind && h.status == status)
                    .count()
            };
            let live = self.on_lock(lock).any(|h| h.status == Status::Live);
            let anything = self.on_lock(lock).next().is_some()
                || self
                    .intents
                    .iter()
                    .any(|&(_, l, until)| l == lock && until > Instant::now());
            if live && key_type == "none" {
                self.fail(format!(
                    "m{lock}: a renewed hold is live but the key is gone"
                ));
            }
            if !anything && key_type != "none" {
                self.fail(format!(
                    "m{lock}: nothing holds it but the key is there: {key_type} {fields:?}"
                ));
            }
            let expected_type = match self.mode(lock) {
                Mode::Setnx | Mode::Election => "string",
                Mode::Semaphore => "zset",
                _ => "hash",
            };
            if self.mode(lock) == Mode::Semaphore && key_type != "none" {
                let n = permits_held(&fields);
                let live = count(Kind::Permit, Status::Live);
                let maybe = count(Kind::Permit, Status::Maybe);
                if n < live || n > live + maybe {
                    self.fail(format!(
                        "m{lock}: {n} permits on the server, model expects {live}..={}: {fields:?}",
                        live + maybe
                    ));
                }
            }
            if key_type != "none" && key_type != expected_type {
                self.fail(format!("m{lock}: key of type {key_type}"));
            }
            let per_acquisition = [
                (Kind::Exclusive, "h:"),
                (Kind::Read, "r:"),
                (Kind::Write, "w:"),
            ];
            for (kind, prefix) in per_acquisition {
                if matches!(
                    self.mode(lock),
                    Mode::Setnx | Mode::Semaphore | Mode::Election
                ) {
                    break;
                }
                let n = count_prefix(&fields, prefix);
                let (low, high) = (
                    count(kind, Status::Live),
                    count(kind, Status::Live) + count(kind, Status::Maybe),
                );
                if n < low || n > high {
                    self.fail(format!(
                        "m{lock}: {n} `{prefix}` fields, model expects {low}..={high}: {fields:?}"
                    ));
                }
            }
            self.check_observer(lock);
        }
    }

    /// An election's observer never shows a term going back, and comes to show what the
    /// model is sure of: the one leadership on the server with its term, or nobody.
    fn check_observer(&self, lock: usize) {
        let Some((seen, last)) = &self.observers[lock] else {
            return;
        };
        let on_lock: Vec<&Hold> = self.on_lock(lock).collect();
        let expected = match on_lock.as_slice() {
            [] => Some(None),
            [only] if only.status == Status::Live => Some(only.fence),
            // A hold the model is unsure of: any view, as long as terms only grow.
            _ => None,
        };
        let shown = || seen.borrow().as_ref().map(|leader| leader.term.get());
        let mut terms_shown = Vec::new();
        let matched = poll(OBSERVER_LIMIT, || {
            let now = shown();
            if let Some(term) = now {
                terms_shown.push(term);
            }
            expected.is_none_or(|expected| now == expected)
        });
        for term in terms_shown {
            if term < last.get() {
                self.fail(format!(
                    "m{lock}: the observer showed term {term} after term {}",
                    last.get()
                ));
            }
            last.set(term);
        }
        if !matched {
            self.fail(format!(
                "m{lock}: the observer shows {:?} {OBSERVER_LIMIT:?} on, the model knows {:?}",
                shown(),
                expected
            ));
        }
    }

    /// Releases everything still held, then every lock key must vanish.
    pub(crate) fn finish(mut self) {
        // `DISTLOCK_MODEL_TRACE=1` prints every case's steps, to see what the runs exercise.
        if std::env::var_os("DISTLOCK_MODEL_TRACE").is_some() {
            eprintln!("case, modes {:?}:\n  {}", self.modes, self.log.join("\n  "));
        }
        let ids: Vec<usize> = self
            .holds
            .iter()
            .filter(|(_, h)| h.guard.is_some())
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.release(id, Fault::None);
        }
        let left = || {
            (0..LOCKS)
                .filter(|&l| key_state(l).0 != "none")
                .collect::<Vec<_>>()
        };
        // Renewed holds were released just now; what may remain (orphans, intents) expires
        // within SETTLE, and 1 s is enough when the model knows of nothing.
        let uncertain =
            self.holds.values().any(|h| h.status != Status::Gone) || !self.intents.is_empty();
        let limit = if uncertain {
            SETTLE
        } else {
            Duration::from_secs(1)
        };
        if !poll(limit, || left().is_empty()) {
            self.fail(format!(
                "lock keys left {limit:?} after everything was released: {:?}",
                left()
                    .into_iter()
                    .map(|l| (lock_key(l), key_state(l)))
                    .collect::<Vec<_>>()
            ));
        }
    }
}
