//! Acquiring, and what the model predicts of it in each mode.

use super::*;

impl Sut {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &mut self,
        id: usize,
        owner: usize,
        lock: usize,
        read: bool,
        short: bool,
        fault: Fault,
    ) {
        let kind = self.kind(lock, read);
        // An election's leadership is always renewed; `short` picks a campaign without wait.
        let campaign = kind == Kind::Leader;
        let waits = campaign && !short;
        let short = short && !campaign;
        let now = Instant::now();
        // What the model knows about the holds on this lock, mine (this owner's) or others'.
        let (mut mine_live, mut mine_maybe, mut theirs_live, mut theirs_maybe) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for h in self.on_lock(lock) {
            let list = match (h.owner == owner, h.status) {
                (true, Status::Live) => &mut mine_live,
                (true, _) => &mut mine_maybe,
                (false, Status::Live) => &mut theirs_live,
                (false, _) => &mut theirs_maybe,
            };
            list.push((h.kind, h.fence));
        }
        let excl = |list: &Vec<(Kind, Option<u64>)>| {
            list.iter()
                .filter(|(k, _)| *k != Kind::Read)
                .map(|(_, f)| *f)
                .collect::<Vec<_>>()
        };
        let reads = |list: &Vec<(Kind, Option<u64>)>| list.iter().any(|(k, _)| *k == Kind::Read);
        let intents = self
            .intents
            .iter()
            .any(|&(o, l, until)| o != owner && l == lock && until > now);
        let mut allowed = BTreeSet::new();
        // Tokens an Ok may carry: a tenure's own (None: unknown), or a new, larger one.
        let mut same: Vec<Option<u64>> = Vec::new();
        let mut new_ok = false;
        match (self.mode(lock), kind) {
            (_, Kind::Permit) => {
                // Any owner may hold several permits; only the count of holds decides.
                let live = mine_live.len() + theirs_live.len();
                let maybe = mine_maybe.len() + theirs_maybe.len();
                if live + maybe >= PERMITS {
                    allowed.insert(Outcome::Busy);
                }
                if live < PERMITS {
                    new_ok = true;
                    allowed.insert(Outcome::Ok);
                }
            }
            // A leadership is the setnx lock of the election's name.
            (Mode::Setnx, _) | (_, Kind::Leader) => {
                if !mine_live.is_empty() {
                    allowed.insert(Outcome::Reentrant);
                } else {
                    if !mine_maybe.is_empty() {
                        // Refused locally while its lease seems valid, else asked for anew.
                        allowed.insert(Outcome::Reentrant);
                    }
                    if !theirs_live.is_empty() {
                        allowed.insert(Outcome::Busy);
                    } else {
                        if !theirs_maybe.is_empty() || !mine_maybe.is_empty() {
                            allowed.insert(Outcome::Busy);
                        }
                        new_ok = true;
                    }
                }
            }
            (_, Kind::Exclusive | Kind::Write) => {
                if !excl(&mine_live).is_empty() {
                    // Re-entry of a tenure the owner certainly holds.
                    same = excl(&mine_live);
                } else {
                    // Re-entry, if its own tenure is still there.
                    same = excl(&mine_maybe);
                    // Holding only the read side refuses the upgrade before anything else.
                    let upgrade_certain = kind == Kind::Write && reads(&mine_live);
                    if kind == Kind::Write && (upgrade_certain || reads(&mine_maybe)) {
                        allowed.insert(Outcome::Upgrade);
                    }
                    if !upgrade_certain {
                        if !theirs_live.is_empty() {
                            allowed.insert(Outcome::Busy);
                        } else {
                            if !theirs_maybe.is_empty() {
                                allowed.insert(Outcome::Busy);
                            }
                            new_ok = true;
                        }
                    }
                }
                if !same.is_empty() || new_ok {
                    allowed.insert(Outcome::Ok);
                }
            }
            (_, Kind::Read) => {
                let writer =
                    |list: &Vec<(Kind, Option<u64>)>| list.iter().any(|(k, _)| *k == Kind::Write);
                if !mine_live.is_empty() {
                    // Re-entry, or the writer reading (downgrade): never kept out.
                    allowed.insert(Outcome::Ok);
                } else {
                    if !mine_maybe.is_empty() {
                        allowed.insert(Outcome::Ok);
                    }
                    if writer(&theirs_live) {
                        allowed.insert(Outcome::Busy);
                    } else {
                        // A writer that may have gone, or a waiting writer's intent that may
                        // have ended.
                        if writer(&theirs_maybe) || intents {
                            allowed.insert(Outcome::Busy);
                        }
                        allowed.insert(Outcome::Ok);
                    }
                }
            }
        }
        if matches!(self.mode(lock), Mode::Setnx | Mode::Election) && new_ok {
            allowed.insert(Outcome::Ok);
        }
        if fault != Fault::None {
            allowed.insert(Outcome::Transport);
        }
        if waits {
            // A campaign that waits times out where one that does not is told busy; under a
            // fault its last attempt may also have found the lock busy.
            if allowed.remove(&Outcome::Busy) || fault != Fault::None {
                allowed.insert(Outcome::Timeout);
            }
        }

        let client = &self.clients[Self::client_of(owner)];
        let name = lock_name(lock);
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let result = if campaign {
            let wait = if waits { CAMPAIGN_WAIT } else { Duration::ZERO };
            let election = client.election(&name).ttl(ttl).wait(wait);
            self.run(owner, fault, async {
                election.campaign().await.map(Handle::Lead)
            })
        } else {
            let request = match self.mode(lock) {
                Mode::Setnx if lock == BOTH => client.lock_many([lock_name(0), lock_name(1)]),
                Mode::Setnx => client.lock(&name),
                Mode::Reentrant => client.reentrant(&name),
                Mode::Write | Mode::ReadWrite if kind == Kind::Read => client.read(&name),
                Mode::Write | Mode::ReadWrite => client.write(&name),
                Mode::Semaphore => client.semaphore(&name, PERMITS as u32),
                Mode::Election => unreachable!("a campaign"),
            }
            .ttl(ttl)
            .watchdog(!short)
            // The model tells tenures apart by their tokens.
            .fencing(true);
            self.run(owner, fault, async {
                request.try_acquire().await.map(Handle::Lock)
            })
        };
        let after = Instant::now();
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => classify(e),
        };
        self.log.push(format!(
            "#{id} owner {owner} acquire {kind:?} of {}{} [{fault:?}] -> {}",
            if lock == BOTH {
                "m0+m1".to_owned()
            } else {
                lock_name(lock)
            },
            if short {
                " short"
            } else if waits {
                " waiting"
            } else {
                ""
            },
            match &result {
                Ok(g) => format!("Ok(fence {:?})", g.fence()),
                Err(e) => format!("{e}"),
            }
        ));
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "acquire: got {outcome:?}, model allows {allowed:?}"
            ));
        }
        match result {
            Ok(guard) => {
                let Some(fence) = guard.fence() else {
                    self.fail("no fencing token, though fencing(true) asked for one");
                };
                // A set's token is above each name's earlier tokens.
                let max = names(lock)
                    .iter()
                    .map(|&l| self.max_fence[l])
                    .max()
                    .unwrap_or(0);
                if kind == Kind::Read {
                    // Readers get the latest write tenure's token.
                    let ok = if self.unseen_fence[lock] {
                        fence >= max
                    } else {
                        fence == max
                    };
                    if !ok {
                        self.fail(format!("read token {fence}, latest write token {max}"));
                    }
                    self.max_fence[lock] = max.max(fence);
                    // A reader got in: no other owner's write hold is left.
                    self.gone(lock, |h| h.owner != owner && h.kind == Kind::Write);
                } else if kind == Kind::Permit {
                    // A permit of its own: every token is new, and the other permits stay.
                    if fence <= max {
                        self.fail(format!("permit token {fence}, not above {max}"));
                    }
                    self.max_fence[lock] = fence;
                } else if same.iter().any(|f| f.is_none_or(|f| f == fence)) && fence <= max {
                    // Re-entry of a tenure: nothing else changed.
                } else if new_ok && fence > max {
                    // A new tenure: every earlier hold on this lock must have ended (each name
                    // of a set's counter was raised to its token).
                    for l in names(lock) {
                        self.max_fence[l] = fence;
                    }
                    self.gone(lock, |_| true);
                    self.intents.retain(|&(o, l, _)| !(o == owner && l == lock));
                } else if kind == Kind::Leader {
                    self.fail(format!(
                        "a leadership of term {fence}: the term is not above every earlier \
                         term ({max}), or it won while the model knows another leader \
                         (new tenure allowed: {new_ok})"
                    ));
                } else {
                    self.fail(format!(
                        "token {fence}: expected one of {same:?} (re-entry) or, new tenure \
                         allowed: {new_ok}, above {max}"
                    ));
                }
                self.holds.insert(
                    id,
                    Hold {
                        owner,
                        lock,
                        kind,
                        short,
                        fence: Some(fence),
                        guard: Some(guard),
                        status: if short { Status::Maybe } else { Status::Live },
                    },
                );
            }
            Err(e) => {
                let outcome = classify(&e);
                if kind == Kind::Write && matches!(outcome, Outcome::Busy | Outcome::Transport) {
                    // A waiting writer's intent keeps new readers out for up to its ttl.
                    self.intents
                        .push((owner, lock, after + ttl + Duration::from_millis(100)));
                }
                // A campaign that timed out under a fault may have been answered busy last,
                // after an earlier attempt whose answer was lost took the lock.
                let ghost = outcome == Outcome::Transport
                    || (outcome == Outcome::Timeout && fault != Fault::None);
                if ghost {
                    // The request may have taken the lock; the give-back runs in the
                    // background.
                    if kind != Kind::Read {
                        for l in names(lock) {
                            self.unseen_fence[l] = true;
                        }
                    }
                    self.orphan(Hold {
                        owner,
                        lock,
                        kind,
                        short: true,
                        fence: None,
                        guard: None,
                        status: Status::Maybe,
                    });
                }
            }
        }
    }
}
