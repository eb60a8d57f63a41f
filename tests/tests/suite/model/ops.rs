//! Release, extend, dropping a guard and a lease's end (the server's keys deleted), each
//! against the model's prediction.

use super::*;

impl Sut {
    pub(crate) fn release(&mut self, id: usize, fault: Fault) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} release: no such guard"));
            return;
        };
        let guard = hold.guard.take().expect("guards keep their guard");
        let status = hold.status;
        let owner = hold.owner;
        let mut allowed = BTreeSet::new();
        match status {
            Status::Live => {
                allowed.insert(Outcome::Ok);
            }
            Status::Maybe => {
                allowed.extend([Outcome::Ok, Outcome::NotOwner]);
            }
            Status::Gone => {
                allowed.insert(Outcome::NotOwner);
            }
        }
        if fault != Fault::None {
            // A retry after a lost reply counts a hold it no longer finds as released.
            allowed.extend([Outcome::Transport, Outcome::Ok]);
        }
        let result = self.run(owner, fault, guard.release());
        let outcome = result.as_ref().map_or_else(classify, |_| Outcome::Ok);
        self.log
            .push(format!("#{id} release [{fault:?}] -> {outcome:?}"));
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "release of a {status:?} hold: got {outcome:?}, model allows {allowed:?}"
            ));
        }
        let hold = self.holds.remove(&id).expect("hold");
        if outcome == Outcome::Transport {
            // The guard's drop finishes the release in the background.
            self.orphan(Hold {
                status: Status::Maybe,
                ..hold
            });
        }
    }

    pub(crate) fn extend(&mut self, id: usize, fault: Fault) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} extend: no such guard"));
            return;
        };
        let (status, owner, short) = (hold.status, hold.owner, hold.short);
        let mut guard = match hold.guard.take().expect("guards keep their guard") {
            Handle::Lock(guard) => guard,
            Handle::Lead(leadership) => {
                // A leadership is renewed, never extended by hand: ask whether it leads.
                let leads = leadership.is_leader();
                self.log.push(format!("#{id} is_leader -> {leads}"));
                hold.guard = Some(Handle::Lead(leadership));
                match status {
                    Status::Live if !leads => self.fail("a renewed leadership is not leading"),
                    Status::Gone if leads => self.fail("a leadership the server lost leads"),
                    _ => return,
                }
            }
        };
        let mut allowed = BTreeSet::new();
        match status {
            Status::Live => allowed.insert(Outcome::Ok),
            Status::Maybe => {
                allowed.insert(Outcome::Ok);
                allowed.insert(Outcome::LeaseLost)
            }
            Status::Gone => allowed.insert(Outcome::LeaseLost),
        };
        if fault != Fault::None {
            allowed.insert(Outcome::Transport);
        }
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let result = self.run(owner, fault, guard.extend(ttl));
        let outcome = result.as_ref().map_or_else(classify, |_| Outcome::Ok);
        self.log
            .push(format!("#{id} extend [{fault:?}] -> {outcome:?}"));
        self.holds.get_mut(&id).expect("hold").guard = Some(Handle::Lock(guard));
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "extend of a {status:?} hold: got {outcome:?}, model allows {allowed:?}"
            ));
        }
    }

    pub(crate) fn drop_guard(&mut self, id: usize) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} drop: no such guard"));
            return;
        };
        let guard = hold.guard.take().expect("guards keep their guard");
        let (status, lock, kind) = (hold.status, hold.lock, hold.kind);
        self.log.push(format!("#{id} drop ({status:?})"));
        if status != Status::Live {
            // Nothing to wait for that the model could recognise: an orphan until the key
            // expires.
            let _in_runtime = self.rt.enter();
            drop(guard);
            if status == Status::Gone {
                self.holds.remove(&id);
            }
            return;
        }
        // The hold is certainly on the server: wait for the background release to remove
        // exactly that (its field, its permit, or the setnx key holding its token).
        let held = |fields: &[String]| match kind {
            Kind::Exclusive | Kind::Leader => count_prefix(fields, "h:"),
            Kind::Read => count_prefix(fields, "r:"),
            Kind::Write => count_prefix(fields, "w:"),
            Kind::Permit => permits_held(fields),
        };
        let setnx = matches!(self.mode(lock), Mode::Setnx | Mode::Election);
        let values = || names(lock).into_iter().map(get_string).collect::<Vec<_>>();
        let before_values = if setnx { values() } else { Vec::new() };
        let before = if setnx { 0 } else { held(&key_state(lock).1) };
        {
            let _in_runtime = self.rt.enter();
            drop(guard);
        }
        let released = poll(Duration::from_secs(2), || {
            if setnx {
                // Every name's value changed: a set's names go together.
                values()
                    .iter()
                    .zip(&before_values)
                    .all(|(now, before)| now != before)
            } else {
                held(&key_state(lock).1) < before
            }
        });
        if !released {
            self.fail("a dropped guard's hold was still on the server 2 s later");
        }
        self.holds.remove(&id);
    }

    pub(crate) fn expire(&mut self, lock: usize) {
        if self.on_lock(lock).any(|h| h.status == Status::Live) {
            self.log
                .push(format!("expire m{lock}: skipped, a renewed hold is live"));
            return;
        }
        let started = Instant::now();
        let gone = poll(SETTLE, || key_state(lock).0 == "none");
        self.log.push(format!(
            "expire m{lock}: key gone after {:?}",
            started.elapsed()
        ));
        if !gone {
            self.fail(format!(
                "m{lock}: no renewed hold, yet its key outlived {SETTLE:?}: {:?}",
                key_state(lock)
            ));
        }
        self.gone(lock, |_| true);
        self.intents.retain(|&(_, l, _)| l != lock);
    }
}
